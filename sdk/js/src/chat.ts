import type {
  ClientToolsManager,
  ConnectionState,
  InteractiveToolCall,
  PendingClientTools,
} from './client-tools.js';
import type { ClientToolSpec, PromptInput, SwitchboardClient } from './client.js';
import { SwitchboardError, errorMessage } from './errors.js';
import type {
  MessageInfo,
  MessageWithParts,
  Part,
  PermissionReply,
  PermissionRequest,
  PermissionRule,
  QuestionRequest,
  ServerEvent,
  SessionStatus,
} from './types.js';
import { sleep } from './util.js';

/**
 * Seed 003's chat status:
 * - `idle`: nothing running; send() starts a turn.
 * - `streaming`: a turn is running (the model is answering, tools are running, or a retry waits).
 * - `awaiting-input`: the turn waits for a person: an interactive client tool in
 *   `pendingClientTools`, a permission ask in `permissions`, a question in `questions`.
 * - `error`: the last turn (or send) failed; `error` says why. The next send() clears it.
 */
export type ChatStatus = 'idle' | 'streaming' | 'error' | 'awaiting-input';

export interface ChatError {
  /** `ProviderAuthError`, `APIError`, `MessageAbortedError`, `PermissionRejectedError`, or `SwitchboardError` for a failed request. */
  name: string;
  message: string;
  /** The server's error code, for a failed request. */
  code?: string;
}

/**
 * Everything a chat UI renders. Immutable: every change makes a new state object; parts of it
 * that did not change (a message, the pending map) keep their identity, so memoized views skip
 * them. Fits React's useSyncExternalStore(chat.subscribe, chat.getState) as it is.
 */
export interface ChatState {
  readonly sessionID: string;
  readonly status: ChatStatus;
  /** The session's messages with their parts, oldest first; streamed text grows in place. */
  readonly messages: readonly MessageWithParts[];
  /** Interactive client-tool calls of this session waiting for a person, by tool name. */
  readonly pendingClientTools: PendingClientTools;
  /** Permission asks of this session waiting for a reply (see replyPermission). */
  readonly permissions: readonly PermissionRequest[];
  /** Questions of the `question` tool waiting for an answer (client.question.reply). */
  readonly questions: readonly QuestionRequest[];
  readonly error: ChatError | undefined;
  /** The event stream: `connected` while updates arrive, `reconnecting` after it dropped. */
  readonly connection: ConnectionState;
}

export interface ChatOptions {
  /** Continue this session; default: create a new one. */
  sessionID?: string;
  title?: string;
  permission?: PermissionRule[];
  /**
   * Tools this chat answers, by name: a handler runs automatically, `'interactive'` puts each
   * call in `pendingClientTools` until the UI submits or cancels it.
   */
  clientTools?: Record<string, ClientToolSpec>;
  /** Defaults for every send(). */
  model?: PromptInput['model'];
  agent?: string;
}

type Listener = (state: ChatState) => void;

interface MessageEntry {
  info: MessageInfo;
  parts: Map<string, Part>;
  snapshot?: MessageWithParts;
}

/**
 * A chat on one session: the message list kept current from `/event`, the status, the interactive
 * tool calls and permission asks waiting for a person, and the actions a UI needs (send, stop,
 * submit or cancel an interactive call, reply to a permission). Framework-neutral: subscribe()
 * for changes, getState() for the current snapshot.
 *
 * Create it with `await client.chat(options)`; it uses `client.clientTools`, so one chat per
 * client at a time.
 */
export class Chat {
  readonly sessionID: string;
  readonly clientTools: ClientToolsManager;
  private readonly client: SwitchboardClient;
  private readonly options: ChatOptions;
  private readonly listeners = new Set<Listener>();
  private readonly messageMap = new Map<string, MessageEntry>();
  private state: ChatState;
  private serverStatus: SessionStatus['type'] = 'idle';
  private sending = false;
  private closed = false;
  private lastEventID: string | undefined;  // of the last /event frame, to resume after a drop
  private readonly lifetime = new AbortController();
  private readonly unsubscribe: (() => void)[] = [];
  private firstSync: { promise: Promise<void>; resolve: () => void; reject: (e: unknown) => void };
  // A chat with its own clientTools connected them, and disconnects them on close().
  private readonly ownsClientTools: boolean;

  /** Use `client.chat()`, which also connects the tools and loads the messages. */
  constructor(client: SwitchboardClient, sessionID: string, options: ChatOptions = {}) {
    this.client = client;
    this.sessionID = sessionID;
    this.options = options;
    this.clientTools = client.clientTools;
    this.ownsClientTools = Object.keys(options.clientTools ?? {}).length > 0;
    this.state = Object.freeze({
      sessionID,
      status: 'idle',
      messages: Object.freeze([]),
      pendingClientTools: Object.freeze({}),
      permissions: Object.freeze([]),
      questions: Object.freeze([]),
      error: undefined,
      connection: 'connecting',
    });
    let resolve!: () => void;
    let reject!: (e: unknown) => void;
    const promise = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    this.firstSync = { promise, resolve, reject };
  }

  /** Starts the event stream and waits for the first load of the session's state. */
  async start(): Promise<void> {
    this.unsubscribe.push(
      this.clientTools.on('pending', (pending) => this.update({ pendingClientTools: this.mine(pending) })),
    );
    void this.runEvents();
    await this.firstSync.promise;
  }

  getState = (): ChatState => this.state;

  /** Calls `listener` with the new state after every change; returns the unsubscribe function. */
  subscribe = (listener: Listener): (() => void) => {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  };

  /**
   * Starts a turn with `input`. Resolves to true once the server accepted it, false when it did
   * not (the reason is in `state.error`; e.g. CONFLICT while a turn is running). Never rejects.
   */
  async send(input: string | PromptInput): Promise<boolean> {
    const prompt: PromptInput = typeof input === 'string' ? { text: input } : { ...input };
    if (prompt.model === undefined && this.options.model !== undefined) prompt.model = this.options.model;
    if (prompt.agent === undefined && this.options.agent !== undefined) prompt.agent = this.options.agent;
    this.sending = true;
    this.update({ error: undefined });
    try {
      await this.client.session.promptAsync(this.sessionID, prompt);
      return true;
    } catch (error) {
      this.sending = false;
      this.update({ error: toChatError(error) });
      return false;
    }
  }

  /** Aborts the running turn (running tools are cancelled). True when one was running. */
  async stop(): Promise<boolean> {
    try {
      return await this.client.session.abort(this.sessionID);
    } catch (error) {
      this.update({ error: toChatError(error) });
      return false;
    }
  }

  /** Answers a permission ask of this chat (`once`, `always`, `reject`). Never rejects. */
  async replyPermission(id: string, reply: PermissionReply, message?: string): Promise<boolean> {
    try {
      return await this.client.permission.reply(id, reply, message);
    } catch (error) {
      this.update({ error: toChatError(error) });
      return false;
    }
  }

  /** Resolves with the first state (the current one included) for which `predicate` holds. */
  until(
    predicate: (state: ChatState) => boolean,
    options: { timeout?: number; signal?: AbortSignal } = {},
  ): Promise<ChatState> {
    if (predicate(this.state)) return Promise.resolve(this.state);
    return new Promise((resolve, reject) => {
      const done = () => {
        off();
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
      };
      const off = this.subscribe((state) => {
        if (!predicate(state)) return;
        done();
        resolve(state);
      });
      const onAbort = () => {
        done();
        reject(new SwitchboardError('ABORTED', 'chat.until() aborted'));
      };
      options.signal?.addEventListener('abort', onAbort, { once: true });
      const timer =
        options.timeout === undefined
          ? undefined
          : setTimeout(() => {
              done();
              reject(
                new SwitchboardError(
                  'TIMEOUT',
                  `chat state did not change as expected within ${options.timeout} ms (status ${this.state.status})`,
                ),
              );
            }, options.timeout);
    });
  }

  /**
   * Stops following the session and disconnects the client tools this chat connected. The
   * session stays on the server.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.lifetime.abort();
    for (const off of this.unsubscribe) off();
    if (this.ownsClientTools) await this.clientTools.disconnect();
    this.update({ connection: 'closed' });
  }

  // ---- state ------------------------------------------------------------------------------------

  private mine(pending: PendingClientTools): PendingClientTools {
    const out: Record<string, readonly InteractiveToolCall[]> = {};
    for (const [name, calls] of Object.entries(pending)) {
      const own = calls.filter((c) => c.sessionID === this.sessionID);
      if (own.length) out[name] = own.length === calls.length ? calls : Object.freeze(own);
    }
    return Object.freeze(out);
  }

  private update(change: Partial<Omit<ChatState, 'status' | 'sessionID'>>, messagesChanged = false): void {
    const next: Record<string, unknown> = { ...this.state, ...change };
    if (messagesChanged) next.messages = this.messageList();
    next.status = this.deriveStatus(next as unknown as ChatState);
    const changed = Object.keys(next).some(
      (k) => next[k] !== (this.state as unknown as Record<string, unknown>)[k],
    );
    if (!changed) return;
    this.state = Object.freeze(next) as unknown as ChatState;
    for (const listener of [...this.listeners]) {
      try {
        listener(this.state);
      } catch (error) {
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }

  private deriveStatus(s: ChatState): ChatStatus {
    if (
      Object.keys(s.pendingClientTools).length > 0 ||
      s.permissions.length > 0 ||
      s.questions.length > 0 ||
      this.serverStatus === 'awaiting-input'
    )
      return 'awaiting-input';
    if (this.serverStatus === 'busy' || this.serverStatus === 'retry' || this.sending)
      return 'streaming';
    if (s.error) return 'error';
    return 'idle';
  }

  private messageList(): readonly MessageWithParts[] {
    const entries = [...this.messageMap.values()].sort((a, b) =>
      a.info.id < b.info.id ? -1 : a.info.id > b.info.id ? 1 : 0,
    );
    return Object.freeze(
      entries.map((e) => {
        if (!e.snapshot) {
          const parts = [...e.parts.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
          e.snapshot = Object.freeze({ info: e.info, parts: Object.freeze(parts) as Part[] });
        }
        return e.snapshot;
      }),
    );
  }

  private entry(info: MessageInfo): MessageEntry {
    let e = this.messageMap.get(info.id);
    if (!e) this.messageMap.set(info.id, (e = { info, parts: new Map() }));
    return e;
  }

  // ---- events -----------------------------------------------------------------------------------

  private async runEvents(): Promise<void> {
    let attempt = 0;
    while (!this.closed) {
      try {
        const resume = { signal: this.lifetime.signal, lastEventID: this.lastEventID };
        for await (const event of this.client.events(resume)) {
          if (event.id !== undefined) this.lastEventID = event.id;
          if (event.type === 'server.connected') {
            // Resumed: the events missed follow. Otherwise reload what the chat shows.
            if (event.properties.resumed !== true) await this.resync();
            attempt = 0;
            this.update({ connection: 'connected' });
            this.firstSync.resolve();
            continue;
          }
          this.apply(event);
        }
      } catch (error) {
        if (this.closed) return;
        if (this.state.connection === 'connecting') {
          // The first connection failed: start() reports it.
          this.firstSync.reject(error);
          this.closed = true;
          this.update({ connection: 'closed', error: toChatError(error) });
          return;
        }
      }
      if (this.closed) return;
      this.update({ connection: 'reconnecting' });
      // The next stream resumes after the last event seen, or resync() reloads the state.
      const delay = Math.min(1000 * 2 ** attempt++, 30000);
      await sleep(delay, this.lifetime.signal);
    }
  }

  // Reloads messages, status and waiting asks (after a gap the stream could not replay).
  private async resync(): Promise<void> {
    const [messages, status, permissions, questions] = await Promise.all([
      this.client.session.messages(this.sessionID),
      this.client.session.status(),
      this.client.permission.list(),
      this.client.question.list(),
    ]);
    this.messageMap.clear();
    for (const m of messages) {
      const e = this.entry(m.info);
      for (const p of m.parts) e.parts.set(p.id, p);
    }
    this.serverStatus = status[this.sessionID]?.type ?? 'idle';
    if (this.serverStatus !== 'idle') this.sending = false;
    const lastAssistant = [...messages].reverse().find((m) => m.info.role === 'assistant');
    const failed = lastAssistant?.info.role === 'assistant' ? lastAssistant.info.error : undefined;
    this.update(
      {
        permissions: Object.freeze(permissions.filter((p) => p.sessionID === this.sessionID)),
        questions: Object.freeze(questions.filter((q) => q.sessionID === this.sessionID)),
        pendingClientTools: this.mine(this.clientTools.pendingClientTools),
        error: failed ? { name: failed.name, message: failed.data.message } : this.state.error,
      },
      true,
    );
  }

  private apply(event: ServerEvent): void {
    switch (event.type) {
      case 'session.status': {
        if (event.properties.sessionID !== this.sessionID) return;
        this.serverStatus = event.properties.status.type;
        this.sending = false;
        this.update({});
        return;
      }
      case 'session.error': {
        if (event.properties.sessionID !== this.sessionID) return;
        const e = event.properties.error;
        this.update({ error: { name: e.name, message: e.data?.message ?? e.name } });
        return;
      }
      case 'message.updated': {
        const info = event.properties.info;
        if (info.sessionID !== this.sessionID) return;
        const e = this.entry(info);
        e.info = info;
        e.snapshot = undefined;
        this.update({}, true);
        return;
      }
      case 'message.part.updated': {
        const part = event.properties.part;
        if (part.sessionID !== this.sessionID) return;
        const e = this.messageMap.get(part.messageID);
        if (!e) return;  // its message.updated comes first; a part without one is stale
        e.parts.set(part.id, part);
        e.snapshot = undefined;
        this.update({}, true);
        return;
      }
      case 'message.part.delta': {
        const d = event.properties;
        if (d.sessionID !== this.sessionID) return;
        const e = this.messageMap.get(d.messageID);
        if (!e) return;
        const part = e.parts.get(d.partID);
        const text = part && (part.type === 'text' || part.type === 'reasoning') ? part.text : '';
        const base =
          part ??
          ({ id: d.partID, sessionID: d.sessionID, messageID: d.messageID, type: 'text', text: '', time: { start: Date.now() } } as Part);
        e.parts.set(d.partID, { ...base, text: text + d.delta } as Part);
        e.snapshot = undefined;
        this.update({}, true);
        return;
      }
      case 'permission.asked': {
        if (event.properties.sessionID !== this.sessionID) return;
        this.update({ permissions: Object.freeze([...this.state.permissions, event.properties]) });
        return;
      }
      case 'permission.replied': {
        if (event.properties.sessionID !== this.sessionID) return;
        const id = event.properties.requestID;
        this.update({ permissions: Object.freeze(this.state.permissions.filter((p) => p.id !== id)) });
        return;
      }
      case 'question.asked': {
        if (event.properties.sessionID !== this.sessionID) return;
        this.update({ questions: Object.freeze([...this.state.questions, event.properties]) });
        return;
      }
      case 'question.replied':
      case 'question.rejected': {
        if (event.properties.sessionID !== this.sessionID) return;
        const id = event.properties.requestID;
        this.update({ questions: Object.freeze(this.state.questions.filter((q) => q.id !== id)) });
        return;
      }
      default:
        return;
    }
  }
}

function toChatError(error: unknown): ChatError {
  if (error instanceof SwitchboardError)
    return { name: 'SwitchboardError', message: error.message, code: error.code };
  return { name: error instanceof Error ? error.name : 'Error', message: errorMessage(error) };
}

/** Creates the session (or opens `options.sessionID`), connects its tools, loads its state. */
export async function createChat(client: SwitchboardClient, options: ChatOptions = {}): Promise<Chat> {
  const manager = client.clientTools;
  const tools = Object.entries(options.clientTools ?? {});
  if (tools.length && manager.state !== 'closed')
    throw new Error(`the client tools of ${client.clientID} are ${manager.state}: close the other chat first`);
  const session = options.sessionID
    ? await client.session.get(options.sessionID)
    : await client.session.create({ title: options.title, permission: options.permission });
  for (const [name, spec] of tools) {
    const { handler, ...definition } = spec;
    await manager.register(name, definition, handler);
  }
  const chat = new Chat(client, session.id, options);
  try {
    if (tools.length) await manager.connect(session.id);
    await chat.start();
  } catch (error) {
    await chat.close();
    throw error;
  }
  return chat;
}
