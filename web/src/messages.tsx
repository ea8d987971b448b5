// The conversation: user messages with their files, the assistant's answers (markdown, streamed)
// and one card per tool call (tool-card.tsx); asks and interactive calls whose card is not in the
// list yet show on their own.
import type { ChatState, InteractiveToolCall, MessageWithParts, PermissionRequest, QuestionRequest } from '@switchboard/sdk';
import { useEffect, useRef } from 'preact/hooks';
import { fileName, ImageAttachment, shownImage, type FilePart } from './files';
import { InteractivePanel } from './interactive';
import { Markdown } from './markdown-view';
import { PermissionAsk, QuestionAsk, ToolCard } from './tool-card';

// ---- files of user messages ----

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
    // A request for a summary (OpenCode's /compact): the model sees the summary below from here on.
    if (m.parts.some((p) => p.type === 'compaction'))
      return (
        <div class="message compaction" data-message-id={m.info.id} role="note">
          The conversation so far is summarized below; the model sees the summary in its place from here on.
        </div>
      );
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
    <div class={m.info.summary ? 'message assistant summary' : 'message assistant'} data-message-id={m.info.id}>
      <p class={m.info.summary ? 'who' : 'who visually-hidden'}>{m.info.summary ? 'Summary of the conversation' : 'Assistant'}</p>
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
