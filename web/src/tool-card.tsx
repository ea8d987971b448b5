// One card per tool call, following the call live (pending → running → completed / error), with
// the permission ask, question or interactive panel of that call inside it, and what the call did
// in the form that suits the tool: `bash` as a terminal with its exit code, `edit` and `write` as
// a diff of the file, images a tool returned as images; other tools' input and output as text.
import type { InteractiveToolCall, JSONObject, PermissionRequest, QuestionRequest, ToolPart } from '@switchboard/sdk';
import { useEffect, useRef, useState } from 'preact/hooks';
import { fileName, ImageAttachment, shownImage, type FileRef } from './files';
import { useController } from './hooks';
import { InteractivePanel } from './interactive';

/** "client_web-abc_confirm-action" → the browser tool's own name. */
export function toolLabel(tool: string, clientID: string): { name: string; browser: boolean } {
  const prefix = `client_${clientID}_`;
  if (tool.startsWith(prefix)) return { name: tool.slice(prefix.length), browser: true };
  return { name: tool, browser: tool.startsWith('client_') };
}

type CardStatus = 'pending' | 'running' | 'awaiting' | 'completed' | 'error' | 'cancelled';

function cardStatus(part: ToolPart, waiting: boolean): CardStatus {
  const s = part.state;
  if (s.status === 'error') return /abort|cancel/i.test(s.error) ? 'cancelled' : 'error';
  if (s.status === 'running' && waiting) return 'awaiting';
  return s.status;
}

const statusText: Record<CardStatus, string> = {
  pending: 'pending',
  running: 'running',
  awaiting: 'awaiting input',
  completed: 'completed',
  error: 'error',
  cancelled: 'cancelled',
};

export function PermissionAsk({ ask }: { ask: PermissionRequest }) {
  const controller = useController();
  const [note, setNote] = useState('');
  const [busy, setBusy] = useState(false);
  const id = `perm-${ask.id}`;
  const reply = async (r: 'once' | 'always' | 'reject') => {
    setBusy(true);
    const ok = await controller.replyPermission(ask.id, r, note.trim() || undefined);
    if (!ok) setBusy(false);
  };
  const first = useRef<HTMLButtonElement>(null);
  useEffect(() => first.current?.focus(), []);
  return (
    <div class="permission" role="group" aria-labelledby={`${id}-title`}>
      <p id={`${id}-title`} class="permission-title">
        Permission needed: <strong>{ask.permission}</strong>
        {ask.patterns.length > 0 && (
          <>
            {' '}
            for <code>{ask.patterns.join(', ')}</code>
          </>
        )}
      </p>
      <div class="field">
        <label for={`${id}-note`}>Message to the model (optional)</label>
        <input id={`${id}-note`} type="text" value={note} onInput={(e) => setNote(e.currentTarget.value)} />
      </div>
      <div class="actions">
        <button type="button" class="primary" ref={first} disabled={busy} onClick={() => void reply('once')}>
          Allow once
        </button>
        <button type="button" class="secondary" disabled={busy} onClick={() => void reply('always')}
          title={ask.always.length ? `Always allow ${ask.always.join(', ')} in this session` : undefined}>
          Always
        </button>
        <button type="button" class="danger" disabled={busy} onClick={() => void reply('reject')}>
          Reject
        </button>
      </div>
    </div>
  );
}

interface AskedQuestion {
  question: string;
  header?: string;
  options: { label: string; description?: string }[];
  multiple?: boolean;
}

// The server's `question` tool: one or more questions with options, answered together.
export function QuestionAsk({ ask }: { ask: QuestionRequest }) {
  const controller = useController();
  const questions = ask.questions as AskedQuestion[];
  const [chosen, setChosen] = useState<string[][]>(() => questions.map(() => []));
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string>();
  const id = `question-${ask.id}`;
  const finish = async (send: () => Promise<boolean>) => {
    setBusy(true);
    setProblem(undefined);
    try {
      await send();
    } catch (error) {
      setProblem(error instanceof Error ? error.message : String(error));
      setBusy(false);
    }
  };
  return (
    <form class="interactive" role="group" aria-label="Questions from the model"
      onSubmit={(e) => {
        e.preventDefault();
        if (chosen.some((c) => c.length === 0)) return setProblem('Answer every question first.');
        void finish(() => controller.client.question.reply(ask.id, chosen));
      }}>
      {questions.map((q, qi) => (
        <fieldset key={qi}>
          <legend>{q.header ? `${q.header}: ${q.question}` : q.question}</legend>
          {q.options.map((o, oi) => (
            <div class="check option" key={o.label}>
              <input id={`${id}-${qi}-${oi}`} name={`${id}-${qi}`} type={q.multiple ? 'checkbox' : 'radio'}
                checked={chosen[qi]!.includes(o.label)}
                onChange={(e) => {
                  const mine = chosen[qi]!;
                  const next = q.multiple
                    ? e.currentTarget.checked ? [...mine, o.label] : mine.filter((l) => l !== o.label)
                    : [o.label];
                  setChosen(chosen.map((c, i) => (i === qi ? next : c)));
                }} />
              <label for={`${id}-${qi}-${oi}`}>
                {o.label}
                {o.description && <span class="hint"> — {o.description}</span>}
              </label>
            </div>
          ))}
        </fieldset>
      ))}
      {problem && (
        <p class="inline-error" role="alert">
          {problem}
        </p>
      )}
      <div class="actions">
        <button type="button" class="secondary" disabled={busy}
          onClick={() => void finish(() => controller.client.question.reject(ask.id))}>
          Dismiss
        </button>
        <button type="submit" class="primary" disabled={busy}>
          Answer
        </button>
      </div>
    </form>
  );
}

function pretty(value: unknown): string {
  return JSON.stringify(value, null, 2) ?? '';
}


/** Lines of `text`; a final newline ends the last line, it does not start another. */
export function lineCount(text: string): number {
  return text ? text.replace(/\n$/, '').split('\n').length : 0;
}

// Longer outputs start collapsed, their summary saying how many lines they hold.
const OPEN_LINES = 8;

function Output({ text, class: className }: { text: string; class?: string }) {
  const lines = lineCount(text);
  return (
    <details class={`tool-output${className ? ` ${className}` : ''}`} open={lines <= OPEN_LINES}>
      <summary>Output{lines > 1 ? ` (${lines} lines)` : ''}</summary>
      <pre>{text}</pre>
    </details>
  );
}

function str(o: JSONObject | undefined, key: string): string | undefined {
  const v = o?.[key];
  return typeof v === 'string' ? v : undefined;
}

// ---- bash: a terminal ----

/** How the command ended, from the bash tool's metadata: exit code, signal, time-out. */
function exitText(meta: JSONObject): { text: string; ok: boolean } | undefined {
  if (meta.timedOut === true) return { text: 'timed out', ok: false };
  if (typeof meta.signal === 'string') return { text: `killed by ${meta.signal}`, ok: false };
  if (typeof meta.exit === 'number') return { text: `exit ${meta.exit}`, ok: meta.exit === 0 };
  return undefined;
}

/**
 * The command's output as the model got it, less the "(Exit code N.)" the tool adds after it
 * (metadata.output holds the command's own output, cut when long): the card shows the exit code.
 */
function commandOutput(output: string, meta: JSONObject): string {
  const own = str(meta, 'output');
  if (own === undefined || !output.startsWith(own)) return output;
  return /^\n*\(Exit code -?\d+\.\)\n*$/.test(output.slice(own.length)) ? own : output;
}

function Terminal({ part }: { part: ToolPart }) {
  const s = part.state;
  if (s.status === 'pending') return null;
  const command = str(s.input, 'command') ?? '';
  // While it runs, the output so far comes with the tool's progress (metadata.output).
  const output = s.status === 'completed' ? commandOutput(s.output, s.metadata) : str(s.metadata, 'output');
  const exit = s.status === 'completed' ? exitText(s.metadata) : undefined;
  return (
    <div class="terminal">
      <pre class="terminal-command" aria-label="Command">
        <span class="terminal-prompt" aria-hidden="true">
          {'$ '}
        </span>
        {command}
      </pre>
      {output !== undefined && output !== '' && <Output text={output} class="terminal-output" />}
      {exit && <p class={`exit-code ${exit.ok ? 'exit-ok' : 'exit-fail'}`}>{exit.text}</p>}
    </div>
  );
}

// ---- edit and write: a diff ----

interface DiffRow {
  kind: 'add' | 'del' | 'same' | 'hunk' | 'note';
  text: string;
  old?: number;
  new?: number;
}

/** The rows of a unified diff (as the edit tool's metadata.diff holds it), numbered. */
export function diffRows(patch: string): DiffRow[] {
  const rows: DiffRow[] = [];
  let oldLine = 0;
  let newLine = 0;
  let inHunk = false;
  for (const line of patch.replace(/\n$/, '').split('\n')) {
    const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
    if (hunk) {
      oldLine = Number(hunk[1]);
      newLine = Number(hunk[2]);
      inHunk = true;
      rows.push({ kind: 'hunk', text: line });
    } else if (!inHunk) {
      // The header (--- a, +++ b, Index:, ===): the card names the file already.
    } else if (line.startsWith('+')) rows.push({ kind: 'add', text: line.slice(1), new: newLine++ });
    else if (line.startsWith('-')) rows.push({ kind: 'del', text: line.slice(1), old: oldLine++ });
    else if (line.startsWith('\\')) rows.push({ kind: 'note', text: line.slice(1).trim() });
    else rows.push({ kind: 'same', text: line.slice(1), old: oldLine++, new: newLine++ });
  }
  return rows;
}

/** A new file's content as the rows of a diff that adds every line. */
function addedRows(content: string): DiffRow[] {
  if (!content) return [];
  const lines = content.replace(/\n$/, '').split('\n');
  return [
    { kind: 'hunk', text: `@@ -0,0 +1,${lines.length} @@` },
    ...lines.map((text, i) => ({ kind: 'add' as const, text, new: i + 1 })),
  ];
}

const signs: Record<DiffRow['kind'], string> = { add: '+', del: '-', same: ' ', hunk: '', note: '' };
const OPEN_DIFF_ROWS = 60;

function Diff({ rows, file }: { rows: DiffRow[]; file?: string }) {
  const added = rows.filter((r) => r.kind === 'add').length;
  const removed = rows.filter((r) => r.kind === 'del').length;
  return (
    <details class="diff" open={rows.length <= OPEN_DIFF_ROWS}>
      <summary>
        {file ? <code class="diff-file">{file}</code> : 'Changes'}{' '}
        <span class="diff-stat">
          <span class="diff-stat-add">+{added}</span> <span class="diff-stat-del">-{removed}</span>
        </span>
      </summary>
      <div class="diff-scroll">
        <table class="diff-table">
          <tbody>
            {rows.map((r, i) =>
              r.kind === 'hunk' || r.kind === 'note' ? (
                <tr key={i} class={`diff-${r.kind}`}>
                  <td colSpan={4}>{r.text}</td>
                </tr>
              ) : (
                <tr key={i} class={`diff-${r.kind}`}>
                  <td class="diff-num" aria-hidden="true">{r.old ?? ''}</td>
                  <td class="diff-num" aria-hidden="true">{r.new ?? ''}</td>
                  <td class="diff-sign">{signs[r.kind]}</td>
                  <td class="diff-text">{r.text}</td>
                </tr>
              ),
            )}
          </tbody>
        </table>
      </div>
    </details>
  );
}

// The diffs of the permission asks this page has seen, by call: a write stored before its result
// carried a diff, or one too large to diff, has none in its result.
const askedDiffs = new Map<string, string>();

/**
 * What an edit or a write changes: the tool's diff (in its metadata once done, in its permission
 * ask while one waits, kept from the ask after it), else for a new file its whole content as
 * added lines.
 */
function FileChange({ part, permission }: { part: ToolPart; permission?: PermissionRequest }) {
  const s = part.state;
  if (s.status === 'pending') return null;
  const file = str(s.input, 'filePath');
  const asked = str(permission?.metadata, 'diff');
  if (asked && askedDiffs.get(part.callID) !== asked) {
    askedDiffs.set(part.callID, asked);
    // The newest hundred: a page open for days must not keep every diff it was asked about.
    if (askedDiffs.size > 100) askedDiffs.delete(askedDiffs.keys().next().value!);
  }
  const patch = str(s.metadata, 'diff') || asked || askedDiffs.get(part.callID);
  if (patch) return <Diff rows={diffRows(patch)} file={file} />;
  const content = part.tool === 'write' ? str(s.input, 'content') : undefined;
  if (content === undefined) return null;
  // write's result says whether the file was there before; a replaced file has no diff to show.
  const replaced = s.metadata.exists === true || permission?.metadata.exists === true;
  if (!replaced) return <Diff rows={addedRows(content)} file={file} />;
  return (
    <details class="tool-input" open={lineCount(content) <= OPEN_LINES}>
      <summary>
        New content of <code>{file}</code> ({lineCount(content)} lines; the file was replaced)
      </summary>
      <pre>{content}</pre>
    </details>
  );
}

// ---- attachments (images) ----

function isFileRef(value: unknown): value is FileRef {
  const v = value as FileRef | null;
  return !!v && typeof v === 'object' && typeof v.mime === 'string' && typeof v.url === 'string';
}

function Attachments({ files }: { files: FileRef[] }) {
  return (
    <ul class="attachments tool-attachments" aria-label="Files the tool returned">
      {files.map((f, i) => (
        <li key={i}>
          {shownImage(f) ? (
            <ImageAttachment part={f} />
          ) : (
            <span class="attachment-chip" title={`${fileName(f)} (${f.mime})`}>
              <span class="attachment-name">{fileName(f)}</span> <span class="attachment-mime">{f.mime}</span>
            </span>
          )}
        </li>
      ))}
    </ul>
  );
}

// ---- the card ----

const ownViews = new Set(['bash', 'edit', 'write']);

export function ToolCard({
  part,
  clientID,
  interactive,
  permission,
  question,
}: {
  part: ToolPart;
  clientID: string;
  interactive?: InteractiveToolCall;
  permission?: PermissionRequest;
  question?: QuestionRequest;
}) {
  const { name, browser } = toolLabel(part.tool, clientID);
  const s = part.state;
  const status = cardStatus(part, !!interactive || !!permission || !!question);
  const title = 'title' in s && s.title ? s.title : undefined;
  // Built-in tools with a view of their own show their input there.
  const view = browser ? undefined : ownViews.has(part.tool) ? part.tool : undefined;
  const hasInput = !view && s.status !== 'pending' && Object.keys(s.input ?? {}).length > 0;
  const output = s.status === 'completed' && view !== 'bash' ? s.output : undefined;
  const files = s.status === 'completed' ? (s.attachments ?? []).filter(isFileRef) : [];
  return (
    <article class={`tool-card status-${status}`} data-status={status} data-tool={name} data-call-id={part.callID}
      aria-label={`Tool ${name}: ${statusText[status]}`}>
      <header class="tool-head">
        <span class="tool-name">{name}</span>
        {browser && <span class="tag">browser</span>}
        {title && <span class="tool-title">{title}</span>}
        <span class={`badge badge-${status}`}>{statusText[status]}</span>
      </header>
      {s.status === 'pending' && s.raw && <pre class="tool-raw">{s.raw}</pre>}
      {hasInput && (
        <details class="tool-input">
          <summary>Input</summary>
          <pre>{pretty(s.input)}</pre>
        </details>
      )}
      {view === 'bash' && <Terminal part={part} />}
      {(view === 'edit' || view === 'write') && <FileChange part={part} permission={permission} />}
      {permission && <PermissionAsk ask={permission} />}
      {interactive && <InteractivePanel call={interactive} />}
      {question && <QuestionAsk ask={question} />}
      {output !== undefined && <Output text={output} />}
      {files.length > 0 && <Attachments files={files} />}
      {s.status === 'error' && <p class="tool-error">{s.error}</p>}
    </article>
  );
}
