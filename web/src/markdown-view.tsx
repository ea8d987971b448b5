// A text or reasoning part of an answer, rendered as markdown (markdown.ts). The renderer is a
// chunk of its own, fetched as the page starts: the first paint does not wait for it, and until it
// is there a part shows as plain text. While a part streams in, its text changes with every word:
// the part renders again at most every MIN_GAP ms (longer when rendering it is slow, so that a
// long answer leaves the page responsive), and then only its blocks that changed (the last one,
// as a rule); other parts do not render again (their blocks are the same strings, so the DOM is
// not touched).
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';

type Renderer = typeof import('./markdown');

let renderer: Renderer | undefined;
const rendererListeners = new Set<() => void>();
void import('./markdown').then(
  (m) => {
    renderer = m;
    for (const listener of [...rendererListeners]) listener();
  },
  () => {
    // Not served (a server updated under an open page): answers stay plain text.
  },
);

function useRenderer(): Renderer | undefined {
  const [r, setR] = useState(renderer);
  useEffect(() => {
    if (r) return undefined;
    if (renderer) return void setR(renderer);
    const listener = () => setR(renderer);
    rendererListeners.add(listener);
    return () => void rendererListeners.delete(listener);
  }, [r]);
  return r;
}

/** True once the code highlighter is there: the part renders again with its code highlighted. */
function useHighlighter(md: Renderer | undefined): boolean {
  const [ready, setReady] = useState(() => !!md?.highlighterLoaded());
  useEffect(() => {
    if (!md || ready) return undefined;
    if (md.highlighterLoaded()) return void setReady(true);
    return md.onHighlighter(() => setReady(true));
  }, [md, ready]);
  return ready;
}

const MIN_GAP = 50;
// While text streams in, rendering may take at most a quarter of the time.
const BUSY_SHARE = 4;
// A render adds at most this much text (a long answer that arrives at once shows in steps).
const STEP = 64 * 1024;

/** The next text to show on the way from `shown` to `text`: at most STEP more, up to a blank line. */
function nextStep(shown: string, text: string): string {
  const from = text.startsWith(shown) ? shown.length : 0;
  if (text.length - from <= STEP) return text;
  const cut = text.lastIndexOf('\n\n', from + STEP);
  return text.slice(0, cut > from ? cut + 2 : from + STEP);
}

/**
 * `text`, but changing at most every `gap()` ms and by at most STEP characters a time; the
 * latest text always shows in the end.
 */
function useProgressive(text: string, gap: () => number): string {
  const [shown, setShown] = useState(() => nextStep('', text));
  const latest = useRef(text);
  latest.current = text;
  const timer = useRef<ReturnType<typeof setTimeout>>();
  const last = useRef(0);
  useEffect(() => {
    if (text === shown || timer.current !== undefined) return;
    const wait = Math.max(0, last.current + gap() - performance.now());
    timer.current = setTimeout(() => {
      timer.current = undefined;
      last.current = performance.now();
      setShown((prev) => nextStep(prev, latest.current));
    }, wait);
  }, [text, shown]);
  useEffect(() => () => clearTimeout(timer.current), []);
  return shown;
}

/**
 * Copies the code of the block whose Copy button was clicked (a click anywhere in rendered
 * markdown comes here). Falls back to the selection and execCommand where the Clipboard API is
 * missing (a page served over plain http to another machine).
 */
function copyCode(event: MouseEvent): void {
  const button = (event.target as Element | null)?.closest?.('button.copy-code');
  const code = button?.closest('.code-block')?.querySelector('pre code');
  if (!button || !code) return;
  const text = code.textContent ?? '';
  const done = (ok: boolean) => {
    button.textContent = ok ? 'Copied' : 'Copy failed';
    setTimeout(() => (button.textContent = 'Copy'), 1500);
  };
  if (navigator.clipboard?.writeText) {
    navigator.clipboard.writeText(text).then(() => done(true), () => done(false));
    return;
  }
  const range = document.createRange();
  range.selectNodeContents(code);
  const selection = getSelection();
  selection?.removeAllRanges();
  selection?.addRange(range);
  done(document.execCommand('copy'));
}

// Longer answers let the browser skip laying out and painting the blocks out of view.
const LONG = 20_000;

export function Markdown({ text }: { text: string }) {
  const md = useRenderer();
  const highlighting = useHighlighter(md);
  const cache = useRef(new Map<string, string>());
  const cost = useRef(0);
  const shown = useProgressive(text, () => Math.max(MIN_GAP, cost.current * BUSY_SHARE));
  const blocks = useMemo(() => {
    if (!md) return undefined;
    const start = performance.now();
    const out = md.renderBlocks(shown, cache.current);
    cost.current = performance.now() - start;
    return out;
  }, [md, shown, highlighting]);
  if (blocks === undefined)
    return (
      <div class="text plain" key="plain">
        {shown}
      </div>
    );
  return (
    <div class={`text markdown${shown.length > LONG ? ' long' : ''}`} key="markdown" onClick={copyCode}>
      {blocks.map((html, i) => (
        <div class="md-block" key={i} dangerouslySetInnerHTML={{ __html: html }} />
      ))}
    </div>
  );
}
