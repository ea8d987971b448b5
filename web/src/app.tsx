import type { ChatStatus, ProviderInfo, Session } from '@switchboard/sdk';
import { useEffect, useRef, useState } from 'preact/hooks';
import { browserTools } from './browser-tools';
import type { AppState } from './controller';
import { useAppState, useController } from './hooks';
import { MessageList } from './messages';

const statusLabel: Record<ChatStatus, string> = {
  idle: 'Ready',
  streaming: 'Working…',
  'awaiting-input': 'Awaiting input',
  error: 'Error',
};

function sessionName(s: Session): string {
  // The server's default title carries a UTC timestamp; show it in the reader's time instead.
  if (s.title.startsWith('New session - ')) return `New session, ${new Date(s.time.created).toLocaleString()}`;
  return s.title;
}

function Sidebar({ state }: { state: AppState }) {
  const controller = useController();
  return (
    <nav class="sidebar" aria-label="Sessions">
      <div class="brand">Switchboard</div>
      <button type="button" class="primary new-session" onClick={() => void controller.newSession()}>
        New session
      </button>
      <ul class="session-list">
        {state.sessions.map((s) => {
          const busy = state.busy[s.id];
          const current = s.id === state.currentID;
          return (
            <li key={s.id} class={current ? 'current' : undefined} data-session-id={s.id}>
              <button type="button" class="session-open" aria-current={current ? 'page' : undefined}
                onClick={() => void controller.open(s.id)}>
                <span class="session-title">{sessionName(s)}</span>
                {busy && <span class={`dot dot-${busy}`}>{busy === 'awaiting-input' ? 'awaiting input' : busy}</span>}
              </button>
              <button type="button" class="icon session-delete" aria-label={`Delete ${sessionName(s)}`}
                title="Delete session"
                onClick={() => {
                  if (confirm(`Delete "${sessionName(s)}" and its messages?`)) void controller.deleteSession(s.id);
                }}>
                ×
              </button>
            </li>
          );
        })}
      </ul>
      {state.sessions.length === 0 && state.listConnection === 'connected' && <p class="hint">No sessions yet.</p>}
    </nav>
  );
}

// A provider's wire format, from the AI SDK package OpenCode would use for it (none: scripted).
function providerKind(p: ProviderInfo): string {
  const npm = Object.values(p.models)[0]?.api.npm ?? '';
  return npm ? npm.replace(/^@ai-sdk\//, '') : 'scripted';
}

function ModelPicker({ state }: { state: AppState }) {
  const controller = useController();
  const providers = state.providers?.all ?? [];
  return (
    <div class="model-picker">
      <label for="model">Model</label>
      <select id="model" value={state.model} disabled={!providers.length}
        onChange={(e) => controller.setModel(e.currentTarget.value)}>
        {providers.map((p) => (
          <optgroup key={p.id} label={`${p.id} (${providerKind(p)})`}>
            {Object.keys(p.models).map((m) => (
              <option key={m} value={`${p.id}/${m}`}>
                {p.id}/{m}
              </option>
            ))}
          </optgroup>
        ))}
      </select>
    </div>
  );
}

function ScriptedNotice({ state, open, onUse }: { state: AppState; open: boolean; onUse: (text: string) => void }) {
  const providers = state.providers?.all ?? [];
  const model = providers.find((p) => state.model.startsWith(`${p.id}/`));
  if (!model || providerKind(model) !== 'scripted') return null;
  if (state.scripted.has(model.id))
    return (
      <details class="notice" open={open}>
        <summary>
          The selected model is a <strong>scripted model</strong>.
        </summary>
        <p>
          It plays the script that the server's configuration gives provider <code>{model.id}</code>: each turn of a
          session answers with the script's next step, whatever you write.
        </p>
      </details>
    );
  // With nothing configured the server offers its built-in `scripted` provider alone.
  const nothingConfigured = providers.length === 1 && providers[0]!.id === 'scripted';
  const id = (name: string) => `client_${state.clientID}_${name}`;
  const examples = [
    `/call ${id('get-page-info')} {}`,
    `/call ${id('confirm-action')} {"action": "Archive the report", "description": "It moves to the archive folder."}`,
    `/call ${id('select-option')} {"prompt": "Pick a color", "options": ["red", "green", "blue"]}`,
    `/call ${id('request-input')} {"prompt": "Your details", "schema": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name"]}}`,
    `/call list {}`,
  ];
  return (
    <details class="notice" open={open}>
      <summary>
        {nothingConfigured ? 'No model provider is configured: the ' : 'The selected model is a '}
        <strong>scripted model</strong>
        {nothingConfigured ? ' answers.' : '.'}
      </summary>
      <p>
        It echoes what you write, and <code>/call TOOL {'{json}'}</code> calls a tool. Try one:
      </p>
      <ul class="examples">
        {examples.map((e) => (
          <li key={e}>
            <button type="button" class="link" onClick={() => onUse(e)}>
              {e}
            </button>
          </li>
        ))}
      </ul>
    </details>
  );
}

function Composer({
  state,
  offline,
  draft,
  setDraft,
}: {
  state: AppState;
  offline: boolean;
  draft: string;
  setDraft: (s: string) => void;
}) {
  const controller = useController();
  const status = state.chat?.status ?? 'idle';
  const awaiting = status === 'awaiting-input';
  const running = status === 'streaming' || awaiting;
  const [sending, setSending] = useState(false);
  const box = useRef<HTMLTextAreaElement>(null);
  const send = async () => {
    const text = draft.trim();
    if (!text || running || sending || offline) return;
    setSending(true);
    const ok = await controller.send(text);
    setSending(false);
    if (ok) setDraft('');
    box.current?.focus();
  };
  return (
    <form class="composer" onSubmit={(e) => {
      e.preventDefault();
      void send();
    }}>
      {awaiting && (
        <p class="awaiting" id="awaiting-note">
          The model is waiting for your answer above.
        </p>
      )}
      <div class="composer-row">
        <label for="prompt" class="visually-hidden">
          Message
        </label>
        <textarea id="prompt" ref={box} rows={2} value={draft} disabled={awaiting || state.opening}
          aria-describedby={awaiting ? 'awaiting-note' : undefined}
          placeholder={awaiting ? 'Answer the request above to continue' : 'Message the model (Enter sends, Shift+Enter for a new line)'}
          onInput={(e) => setDraft(e.currentTarget.value)}
          onKeyDown={(e) => {
            if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
              e.preventDefault();
              void send();
            }
          }} />
        {running ? (
          <button type="button" class="danger" onClick={() => void controller.stop()}>
            Stop
          </button>
        ) : (
          <button type="submit" class="primary" disabled={!draft.trim() || sending || offline}>
            Send
          </button>
        )}
      </div>
    </form>
  );
}

export function App() {
  const state = useAppState();
  const controller = useController();
  const [draft, setDraft] = useState('');
  useEffect(() => {
    void controller.start();
  }, [controller]);
  const chat = state.chat;
  const status: ChatStatus = chat?.status ?? 'idle';
  const reconnecting =
    state.listConnection === 'reconnecting' ||
    chat?.connection === 'reconnecting' ||
    state.toolsConnection === 'reconnecting';
  const current = state.sessions.find((s) => s.id === state.currentID);
  return (
    <div class="app" data-client-id={state.clientID} data-browser-tools={Object.keys(browserTools).join(' ')}>
      <Sidebar state={state} />
      <main class="main">
        <header class="topbar">
          <h1 class="session-heading">{current ? sessionName(current) : 'Switchboard'}</h1>
          <ModelPicker state={state} />
          <span class={`status status-${status}`} role="status" aria-live="polite" data-status={status}>
            {state.currentID ? statusLabel[status] : ''}
          </span>
        </header>
        {reconnecting && (
          <div class="banner" role="status" data-testid="reconnecting">
            Reconnecting to the server…
          </div>
        )}
        {state.notice && (
          <div class="banner error" role="alert">
            {state.notice}
          </div>
        )}
        <ScriptedNotice state={state} open={!chat?.messages.length} onUse={setDraft} />
        {chat ? (
          <MessageList chat={chat} clientID={state.clientID} />
        ) : (
          <div class="messages">
            <p class="empty">{state.opening ? 'Opening the session…' : 'New session: write a message below to start it.'}</p>
          </div>
        )}
        {chat?.error && chat.status === 'error' && chat.error.name === 'SwitchboardError' && (
          <p class="banner error" role="alert">
            {chat.error.message}
          </p>
        )}
        <Composer state={state} offline={reconnecting} draft={draft} setDraft={setDraft} />
      </main>
    </div>
  );
}
