// The conversation: user and assistant messages, streamed text, and one card per tool call that
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
    const text = m.parts.map((p) => (p.type === 'text' ? p.text : '')).join('\n');
    return (
      <div class="message user" data-message-id={m.info.id}>
        <p class="who visually-hidden">You</p>
        <div class="bubble">{text}</div>
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
        if (p.type === 'text') return <div class="text" key={p.id}>{p.text}</div>;
        if (p.type === 'reasoning')
          return (
            <details class="reasoning" key={p.id}>
              <summary>Thinking</summary>
              <div class="text">{p.text}</div>
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
