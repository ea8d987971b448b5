// What a model writes, as HTML (markdown-view.tsx loads this module on its own, after the first
// paint, so that the page shows before marked and DOMPurify arrive): CommonMark + GitHub's tables, task lists, strikethrough and bare
// links (marked), sanitized (DOMPurify). Model output is untrusted, so nothing in it may run:
//
// - HTML in the markdown is shown as the text it is, never parsed as HTML;
// - links are made only to http:, https: and mailto: URLs (anything else, `javascript:` and
//   `data:` included, stays plain text) and open in a new tab with rel="noopener noreferrer";
// - images are not loaded (that would fetch from wherever the model says): they become links;
// - DOMPurify then keeps only the elements and attributes this renderer writes, whatever the
//   renderer let through by mistake.
//
// Fenced code with a language is highlighted once highlight.ts has loaded (it is loaded the first
// time it is needed; until then the code shows plain, and onHighlighter's listeners hear when it
// is there).
import DOMPurify from 'dompurify';
import { Marked, Renderer, type Tokens, type TokensList } from 'marked';

const escapes: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHTML(text: string): string {
  return text.replace(/[&<>"']/g, (c) => escapes[c]!);
}

/** The URL a link may point to, or undefined: only absolute http(s) and mailto URLs. */
export function safeHref(href: string): string | undefined {
  if (!/^(?:https?:\/\/|mailto:)/i.test(href)) return undefined;
  try {
    const url = new URL(href);
    return ['http:', 'https:', 'mailto:'].includes(url.protocol) ? url.href : undefined;
  } catch {
    return undefined;
  }
}

// ---- highlighting, loaded on demand ----

type Highlight = (code: string, language: string) => string | undefined;
let highlighter: Highlight | undefined;
let loading: Promise<void> | undefined;
const highlighterListeners = new Set<() => void>();

function loadHighlighter(): void {
  loading ??= import('./highlight').then(
    (m) => {
      highlighter = m.highlight;
      for (const listener of [...highlighterListeners]) listener();
    },
    () => {
      // Not served (a server updated under an open page): the code stays plain.
    },
  );
}

/** Calls `listener` once highlighting is available; returns the unsubscribe. */
export function onHighlighter(listener: () => void): () => void {
  highlighterListeners.add(listener);
  return () => highlighterListeners.delete(listener);
}

export function highlighterLoaded(): boolean {
  return highlighter !== undefined;
}

// ---- the renderer ----

function codeBlock(code: string, info: string | undefined): string {
  // The info string's first word names the language ("ts", "python {linenos}"...).
  const language = (info ?? '').trim().split(/\s+/)[0]!.replace(/[^\w+#.-]/g, '').slice(0, 32);
  let body: string | undefined;
  if (language) {
    if (highlighter) body = highlighter(code, language.toLowerCase());
    else loadHighlighter();
  }
  const classes = body !== undefined ? `hljs language-${language}` : language ? `language-${language}` : '';
  return (
    '<div class="code-block"><div class="code-head">' +
    `<span class="code-lang">${escapeHTML(language || 'text')}</span>` +
    '<button type="button" class="copy-code" aria-label="Copy code">Copy</button></div>' +
    `<pre><code${classes ? ` class="${classes}"` : ''}>${body ?? escapeHTML(code)}</code></pre></div>\n`
  );
}

const marked = new Marked({
  gfm: true,
  breaks: false,
  async: false,
  renderer: {
    // HTML in the answer is text: shown, never parsed.
    html({ text, block }: Tokens.HTML | Tokens.Tag) {
      return block ? `<p class="raw-html">${escapeHTML(text.replace(/\n+$/, ''))}</p>\n` : escapeHTML(text);
    },
    // After an inline tag marked reads as raw (<kbd>, <code>, <pre>, <script>) it passes the text
    // that follows as it is ("escaped"): that text is HTML from the answer too, so it is escaped
    // here (false: marked's own rendering, which escapes every other text).
    text(token: Tokens.Text | Tokens.Escape) {
      return 'escaped' in token && token.escaped && !('tokens' in token && token.tokens)
        ? escapeHTML(token.text)
        : false;
    },
    code({ text, lang }: Tokens.Code) {
      return codeBlock(text.replace(/\n$/, ''), lang);
    },
    link({ href, title, tokens }: Tokens.Link) {
      const inner = this.parser.parseInline(tokens);
      const url = safeHref(href);
      if (!url) return inner;
      const hint = title ? ` title="${escapeHTML(title)}"` : '';
      return `<a href="${escapeHTML(url)}"${hint} target="_blank" rel="noopener noreferrer">${inner}</a>`;
    },
    image({ href, title, text }: Tokens.Image) {
      const label = escapeHTML(text || title || 'image');
      const url = safeHref(href);
      if (!url) return label;
      return `<a class="image-link" href="${escapeHTML(url)}" title="Image (not loaded): ${escapeHTML(url)}" target="_blank" rel="noopener noreferrer">${label}</a>`;
    },
    table(token: Tokens.Table) {
      return `<div class="table-wrap">${Renderer.prototype.table.call(this, token)}</div>\n`;
    },
  },
});

const purify = DOMPurify(window);
purify.addHook('afterSanitizeAttributes', (node) => {
  if (node.nodeName !== 'A') return;
  const href = node.getAttribute('href');
  if (!href || !safeHref(href)) {
    node.removeAttribute('href');
    node.removeAttribute('target');
    return;
  }
  node.setAttribute('target', '_blank');
  node.setAttribute('rel', 'noopener noreferrer');
});

const sanitizeOptions = {
  ALLOWED_TAGS: [
    'a', 'blockquote', 'br', 'button', 'code', 'del', 'div', 'em', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'hr',
    'input', 'li', 'ol', 'p', 'pre', 'span', 'strong', 'table', 'tbody', 'td', 'th', 'thead', 'tr', 'ul',
  ],
  ALLOWED_ATTR: ['align', 'aria-label', 'checked', 'class', 'disabled', 'href', 'rel', 'start', 'target', 'title', 'type'],
  // DOMPurify tests every attribute value outside its list of URI-safe attributes against this:
  // values with a scheme need one of these (type="checkbox" has none). The hook above allows
  // only absolute http(s) and mailto links.
  ALLOWED_URI_REGEXP: /^(?:(?:https?|mailto):|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i,
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
};

function sanitize(html: string): string {
  return purify.sanitize(html, sanitizeOptions);
}

/**
 * Each of `htmls`, sanitized. Many blocks (a long answer's first render) go through DOMPurify in
 * one call, each in a wrapper that the result is split at again: one call costs much less than
 * thousands.
 */
function sanitizeAll(htmls: string[]): string[] {
  if (htmls.length < 8) return htmls.map(sanitize);
  const joined = htmls.map((html) => `<div class="md-split">${html}</div>`).join('');
  const body = purify.sanitize(joined, { ...sanitizeOptions, RETURN_DOM: true });
  const parts = [...body.children];
  if (parts.length !== htmls.length || parts.some((p) => p.localName !== 'div' || p.className !== 'md-split'))
    return htmls.map(sanitize);
  return parts.map((p) => p.innerHTML);
}

/**
 * What renderBlocks() last made, by the markdown of each top-level block (and the link
 * definitions it may use): a streamed answer only changes at its end, so only its last block is
 * rendered again.
 */
export type BlockCache = Map<string, string>;

/**
 * `text` (markdown) as the sanitized HTML of each of its top-level blocks (paragraph, list,
 * table, fenced code, ...), rendering only the blocks that `cache` does not hold.
 */
export function renderBlocks(text: string, cache: BlockCache): string[] {
  let tokens: TokensList;
  try {
    tokens = marked.lexer(text);
  } catch {
    return [sanitize(`<p class="raw-html">${escapeHTML(text)}</p>`)];
  }
  const links = tokens.links;
  const linksKey = Object.keys(links).length ? JSON.stringify(links) : '';
  const used: BlockCache = new Map();
  const out: string[] = [];
  const fresh: { at: number; key: string; html: string }[] = [];
  for (const token of tokens) {
    if (token.type === 'space' || token.type === 'def') continue;
    // Code rendered before the highlighter came is rendered again, highlighted.
    const code = highlighter && (token.type === 'code' || /```|~~~/.test(token.raw)) ? 'hl' : '';
    const key = `${code}\u0000${linksKey}\u0000${token.raw}`;
    const html = used.get(key) ?? cache.get(key);
    if (html !== undefined) used.set(key, html);
    else {
      let raw: string;
      try {
        raw = marked.parser(Object.assign([token], { links }) as TokensList);
      } catch {
        raw = `<p class="raw-html">${escapeHTML(token.raw)}</p>`;
      }
      fresh.push({ at: out.length, key, html: raw });
    }
    out.push(html ?? '');
  }
  const clean = sanitizeAll(fresh.map((f) => f.html));
  fresh.forEach((f, i) => {
    out[f.at] = clean[i]!;
    used.set(f.key, clean[i]!);
  });
  cache.clear();
  for (const [key, html] of used) cache.set(key, html);
  return out;
}
