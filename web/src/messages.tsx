// The conversation: user and assistant messages, streamed markdown, and one card per tool call that
// follows the call live (pending → running → completed / error), with the permission ask or the
// interactive panel of that call inside it.
import type {
  ChatState,
  InteractiveToolCall,
  MessageWithParts,
  PermissionRequest,
  QuestionRequest,
  ToolPart,
} from '@switchboard/sdk';
import { useEffect, useRef, useState } from 'preact/hooks';
import { useController } from './hooks';
import { InteractivePanel } from './interactive';
import { Markdown } from './markdown-view';

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

function PermissionAsk({ ask }: { ask: PermissionRequest }) {
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
function QuestionAsk({ ask }: { ask: QuestionRequest }) {
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

function ToolCard({
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
  const hasInput = s.status !== 'pending' && Object.keys(s.input ?? {}).length > 0;
  const output = s.status === 'completed' ? s.output : undefined;
  // A final newline ends the last line; it does not start another.
  const lines = output ? output.replace(/\n$/, '').split('\n').length : 0;
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
      {permission && <PermissionAsk ask={permission} />}
      {interactive && <InteractivePanel call={interactive} />}
      {question && <QuestionAsk ask={question} />}
      {output !== undefined && (
        <details class="tool-output" open={lines <= 8}>
          <summary>Output{lines > 1 ? ` (${lines} lines)` : ''}</summary>
          <pre>{output}</pre>
        </details>
      )}
      {s.status === 'error' && <p class="tool-error">{s.error}</p>}
    </article>
  );
}

// ---- files of user messages ----

/** A file part of a user message (docs/api.md "Files in prompts"); the SDK's Part does not list it. */
interface FilePart {
  id: string;
  type: 'file';
  mime: string;
  url: string;
  filename?: string;
}

/** What a user message may hold: its text (`synthetic` when the server wrote it from a file) and files. */
type UserPart = { id: string; type: string; text?: string; synthetic?: boolean } | FilePart;

interface Attachment {
  part: FilePart;
  /** The synthetic text parts the server stored just before the file: what the model read of it. */
  read: string[];
}

/**
 * The text the person typed and the files they attached. Synthetic text parts are not the
 * person's: those just before a file part go with that file (shown folded in its chip), others
 * are left out.
 */
function userContent(parts: readonly UserPart[]): { text: string; files: Attachment[] } {
  const typed: string[] = [];
  const files: Attachment[] = [];
  let read: string[] = [];
  for (const p of parts) {
    if (p.type === 'file') {
      files.push({ part: p as FilePart, read });
      read = [];
    } else if (p.type === 'text' && 'text' in p && typeof p.text === 'string') {
      if ('synthetic' in p && p.synthetic) read.push(p.text);
      else {
        typed.push(p.text);
        read = [];
      }
    }
  }
  return { text: typed.join('\n'), files };
}

const imageMimes = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);

/** Shown as an image only when both the part's mime and its base64 `data:` URL say the same image type. */
function shownImage(part: FilePart): boolean {
  const mime = part.mime.toLowerCase();
  if (!imageMimes.has(mime) || typeof part.url !== 'string') return false;
  const prefix = `data:${mime};base64,`;
  return part.url.slice(0, prefix.length).toLowerCase() === prefix;
}

function fileName(part: FilePart): string {
  if (part.filename) return part.filename;
  if (!part.url.startsWith('data:')) return part.url.split('/').pop() || part.url;
  return 'file';
}

/** A thumbnail that opens the image at full size in a modal dialog (Escape or Close closes it). */
function ImageAttachment({ part }: { part: FilePart }) {
  const dialog = useRef<HTMLDialogElement>(null);
  const name = fileName(part);
  return (
    <>
      <button type="button" class="attachment-thumb" title={`${name} (${part.mime}): open larger`}
        onClick={() => dialog.current?.showModal()}>
        <img src={part.url} alt={name} />
      </button>
      <dialog class="image-dialog" ref={dialog} aria-label={name}
        onClick={(e) => {
          // A click on the backdrop (the dialog element itself, outside its content) closes it.
          if (e.target === e.currentTarget) e.currentTarget.close();
        }}>
        <figure>
          <img src={part.url} alt={name} />
          <figcaption>
            {name} <span class="attachment-mime">{part.mime}</span>
          </figcaption>
        </figure>
        <form method="dialog" class="actions">
          <button type="submit" class="secondary">
            Close
          </button>
        </form>
      </dialog>
    </>
  );
}

/** Any other file: its name and type; what the model read of it, when the server stored that, folded inside. */
function FileChip({ file }: { file: Attachment }) {
  const name = fileName(file.part);
  const label = (
    <>
      <span class="attachment-name">{name}</span> <span class="attachment-mime">{file.part.mime}</span>
    </>
  );
  if (!file.read.length)
    return (
      <span class="attachment-chip" title={`${name} (${file.part.mime})`}>
        {label}
      </span>
    );
  return (
    <details class="attachment-chip">
      <summary title={`${name} (${file.part.mime}): show what the model read`}>{label}</summary>
      <pre>{file.read.join('\n')}</pre>
    </details>
  );
}

function errorText(m: MessageWithParts): string | undefined {
  if (m.info.role !== 'assistant' || !m.info.error) return undefined;
  const e = m.info.error;
  if (e.name === 'MessageAbortedError') return 'Stopped.';
  // Says in words who stopped the turn; the name adds nothing for a person.
  if (e.name === 'PermissionRejectedError') return e.data.message;
  return `${e.name}: ${e.data.message}`;
}

function Message({
  m,
  clientID,
  interactive,
  permissions,
  questions,
}: {
  m: MessageWithParts;
  clientID: string;
  interactive: Map<string, InteractiveToolCall>;
  permissions: readonly PermissionRequest[];
  questions: readonly QuestionRequest[];
}) {
  if (m.info.role === 'user') {
    const { text, files } = userContent(m.parts as readonly UserPart[]);
    return (
      <div class="message user" data-message-id={m.info.id}>
        <p class="who visually-hidden">You</p>
        <div class="user-content">
          {(text || !files.length) && <div class="bubble">{text}</div>}
          {files.length > 0 && (
            <ul class="attachments" aria-label="Attached files">
              {files.map((f) => (
                <li key={f.part.id}>
                  {shownImage(f.part) ? <ImageAttachment part={f.part} /> : <FileChip file={f} />}
                </li>
              ))}
            </ul>
          )}
        </div>
      </div>
    );
  }
  const error = errorText(m);
  const visible = m.parts.filter((p) => p.type === 'tool' || ((p.type === 'text' || p.type === 'reasoning') && p.text));
  if (!visible.length && !error) return null;
  return (
    <div class="message assistant" data-message-id={m.info.id}>
      <p class="who visually-hidden">Assistant</p>
      {visible.map((p) => {
        if (p.type === 'text') return <Markdown key={p.id} text={p.text} />;
        if (p.type === 'reasoning')
          return (
            <details class="reasoning" key={p.id}>
              <summary>Thinking</summary>
              <Markdown text={p.text} />
            </details>
          );
        if (p.type === 'tool')
          return (
            <ToolCard key={p.id} part={p} clientID={clientID} interactive={interactive.get(p.callID)}
              permission={permissions.find((a) => a.tool?.callID === p.callID)}
              question={questions.find((q) => q.tool.callID === p.callID)} />
          );
        return null;
      })}
      {error && <p class="turn-error">{error}</p>}
    </div>
  );
}

/** The open chat's messages; keeps the newest in view while the reader is at the bottom. */
export function MessageList({ chat, clientID }: { chat: ChatState; clientID: string }) {
  const list = useRef<HTMLDivElement>(null);
  const pinned = useRef(true);
  const interactive = new Map<string, InteractiveToolCall>();
  for (const calls of Object.values(chat.pendingClientTools)) for (const c of calls) interactive.set(c.toolCallId, c);
  const shownCalls = new Set<string>();
  for (const m of chat.messages) for (const p of m.parts) if (p.type === 'tool') shownCalls.add(p.callID);
  // Asks and calls whose tool card is not (yet) in the list still need an answer.
  const looseAsks = chat.permissions.filter((a) => !a.tool?.callID || !shownCalls.has(a.tool.callID));
  const looseCalls = [...interactive.values()].filter((c) => !shownCalls.has(c.toolCallId));
  const looseQuestions = chat.questions.filter((q) => !shownCalls.has(q.tool.callID));

  useEffect(() => {
    const el = list.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  });
  return (
    <div class="messages" ref={list} role="log" aria-label="Conversation" aria-busy={chat.status === 'streaming'}
      onScroll={(e) => {
        const el = e.currentTarget;
        pinned.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
      }}>
      {chat.messages.length === 0 && <p class="empty">No messages yet. Ask something below.</p>}
      {chat.messages.map((m) => (
        <Message key={m.info.id} m={m} clientID={clientID} interactive={interactive} permissions={chat.permissions}
          questions={chat.questions} />
      ))}
      {looseAsks.map((a) => (
        <div class="message assistant" key={a.id}>
          <PermissionAsk ask={a} />
        </div>
      ))}
      {looseQuestions.map((q) => (
        <div class="message assistant" key={q.id}>
          <QuestionAsk ask={q} />
        </div>
      ))}
      {looseCalls.map((c) => (
        <div class="message assistant" key={c.requestID}>
          <InteractivePanel call={c} />
        </div>
      ))}
    </div>
  );
}
