// The page's state outside the views: the session list (kept current from /event), the open
// chat (the SDK's Chat on one session, with this page's browser tools), the model choice and the
// connection. Views read it with useController() and call its methods.
import {
  SwitchboardClient,
  type Chat,
  type ChatState,
  type ConnectionState,
  type ProviderList,
  type ServerConfig,
  type Session,
  type SessionStatus,
} from '@switchboard/sdk';
import { browserTools } from './browser-tools';

export interface AppState {
  readonly clientID: string;
  readonly sessions: readonly Session[];
  /** Sessions that are not idle, by id (from session.status events). */
  readonly busy: Readonly<Record<string, SessionStatus['type']>>;
  readonly currentID: string | undefined;
  /** The open chat's state; undefined while it opens or when no session is open. */
  readonly chat: ChatState | undefined;
  readonly opening: boolean;
  readonly providers: ProviderList | undefined;
  /** The providers that play a script from the server's config (the others of type scripted echo). */
  readonly scripted: ReadonlySet<string>;
  /** "PROVIDER/MODEL" sent with each prompt. */
  readonly model: string;
  /** The page's own /event stream (session list). */
  readonly listConnection: 'connecting' | 'connected' | 'reconnecting';
  /** The browser tools' connection. */
  readonly toolsConnection: ConnectionState;
  /** A failure that belongs to no chat (the list could not load, a delete failed). */
  readonly notice: string | undefined;
}

const CLIENT_KEY = 'switchboard.clientID';
// The client token the server issued to this tab's id: kept beside the id, so that after a
// reload (or a server restart) the tab is still that client.
const TOKEN_KEY = 'switchboard.clientToken';
const MODEL_KEY = 'switchboard.model';

// One id per browser tab that survives reloads, so that after a reload within the server's
// reconnect grace the tools and any call waiting for this tab come back.
function tabClientID(): string {
  let id = sessionStorage.getItem(CLIENT_KEY);
  if (!id) {
    id = `web-${crypto.getRandomValues(new Uint32Array(2)).reduce((s, n) => s + n.toString(36), '')}`;
    sessionStorage.setItem(CLIENT_KEY, id);
  }
  return id;
}

function sessionFromHash(): string | undefined {
  const m = /^#\/session\/([A-Za-z0-9_-]+)$/.exec(location.hash);
  return m?.[1];
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * The providers of type `scripted` configured with a script (GET /config keeps a scripted
 * provider's `script` or `scriptFile` under its options): those answer from the script; one
 * without a script, like the built-in `scripted`, echoes.
 */
function playsScript(config: ServerConfig): Set<string> {
  const out = new Set<string>();
  const providers = config.provider;
  if (!providers || typeof providers !== 'object') return out;
  for (const [id, entry] of Object.entries(providers as Record<string, unknown>)) {
    const p = entry as { type?: unknown; options?: { script?: unknown; scriptFile?: unknown } } | null;
    if (p?.type !== 'scripted') continue;
    const script = p.options?.script;
    if ((Array.isArray(script) && script.length > 0) || typeof p.options?.scriptFile === 'string') out.add(id);
  }
  return out;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export class Controller {
  readonly client: SwitchboardClient;
  private state: AppState;
  private readonly listeners = new Set<() => void>();
  private chat: Chat | undefined;
  private chatOff: (() => void)[] = [];
  // Opening and closing chats one after another: the SDK allows one chat per client at a time.
  private queue: Promise<void> = Promise.resolve();
  private wanted: string | undefined;
  // The person picked a session (or a new one) before the list first loaded: keep their choice.
  private chosen = false;

  constructor(baseURL = location.origin) {
    const clientID = tabClientID();
    this.client = new SwitchboardClient(baseURL, {
      clientID,
      clientToken: sessionStorage.getItem(TOKEN_KEY) ?? undefined,
      onClientToken: (token) => sessionStorage.setItem(TOKEN_KEY, token),
      // The page's sessions are the person's, not one tab's: any tab may open one and attach
      // its browser tools.
      ownSessions: false,
      clientTools: {
        transport: 'websocket',
        // A page stays open for hours: keep trying, a few seconds apart, until the server is back.
        maxReconnectAttempts: Number.POSITIVE_INFINITY,
        reconnectDelay: 500,
        maxReconnectDelay: 4000,
      },
    });
    // The session in the URL shows as opening until the list has loaded, so that a prompt typed
    // right after a reload is not sent to a new session.
    const initial = sessionFromHash();
    this.state = {
      clientID,
      sessions: [],
      busy: {},
      currentID: initial,
      chat: undefined,
      opening: initial !== undefined,
      providers: undefined,
      scripted: new Set(),
      model: localStorage.getItem(MODEL_KEY) ?? '',
      listConnection: 'connecting',
      toolsConnection: 'closed',
      notice: undefined,
    };
    this.client.clientTools.on('state', (s) => this.set({ toolsConnection: s }));
  }

  getState = (): AppState => this.state;

  subscribe = (listener: () => void): (() => void) => {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  };

  private set(change: Partial<AppState>): void {
    this.state = { ...this.state, ...change };
    for (const l of [...this.listeners]) l();
  }

  /** Loads providers and sessions, opens the session named in the URL (or the latest). */
  async start(): Promise<void> {
    window.addEventListener('hashchange', () => {
      const id = sessionFromHash();
      if (id && id !== this.state.currentID) this.open(id);
    });
    void this.loadProviders();
    await this.followSessions();
  }

  private async loadProviders(): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        const [providers, config] = await Promise.all([this.client.providers(), this.client.config()]);
        const models = providers.all.flatMap((p) => Object.keys(p.models).map((m) => `${p.id}/${m}`));
        const model = models.includes(this.state.model) ? this.state.model : config.model;
        this.set({ providers, model, scripted: playsScript(config) });
        return;
      } catch {
        await sleep(Math.min(500 * 2 ** attempt, 4000));
      }
    }
  }

  setModel(model: string): void {
    localStorage.setItem(MODEL_KEY, model);
    this.set({ model });
  }

  // ---- the session list ---------------------------------------------------------------------

  // Follows /event for the list and the busy badges. A reconnection resumes after the last event
  // seen; when the server cannot replay the gap (or at the first connection) the list is loaded.
  private async followSessions(): Promise<void> {
    let first = true;
    let lastEventID: string | undefined;
    for (let attempt = 0; ; ) {
      try {
        for await (const event of this.client.events({ lastEventID })) {
          if (event.id !== undefined) lastEventID = event.id;
          switch (event.type) {
            case 'server.connected':
              if (event.properties.resumed !== true) await this.reloadSessions();
              attempt = 0;
              this.set({ listConnection: 'connected' });
              if (first) {
                first = false;
                const initial = sessionFromHash() ?? this.state.sessions[0]?.id;
                const known = initial !== undefined && this.state.sessions.some((s) => s.id === initial);
                if (!this.chosen) void this.show(known ? initial : undefined);
              }
              break;
            case 'session.created':
            case 'session.updated':
              this.upsert(event.properties.info);
              break;
            case 'session.deleted':
              this.removed(event.properties.info.id);
              break;
            case 'session.status': {
              const { sessionID, status } = event.properties;
              const busy = { ...this.state.busy };
              if (status.type === 'idle') delete busy[sessionID];
              else busy[sessionID] = status.type;
              this.set({ busy });
              break;
            }
            default:
              break;
          }
        }
      } catch {
        // dropped or refused: retry below
      }
      this.set({ listConnection: 'reconnecting' });
      await sleep(Math.min(500 * 2 ** attempt++, 4000));
    }
  }

  private async reloadSessions(): Promise<void> {
    const [sessions, status] = await Promise.all([this.client.session.list(), this.client.session.status()]);
    const busy: Record<string, SessionStatus['type']> = {};
    for (const [id, s] of Object.entries(status)) busy[id] = s.type;
    this.set({ sessions: sessions.filter((s) => !s.parentID), busy, notice: undefined });
  }

  private upsert(info: Session): void {
    if (info.parentID) return;  // subagent sessions show inside their parent's tool card
    const rest = this.state.sessions.filter((s) => s.id !== info.id);
    const sessions = [info, ...rest].sort((a, b) => b.time.updated - a.time.updated);
    this.set({ sessions });
  }

  private removed(id: string): void {
    this.set({ sessions: this.state.sessions.filter((s) => s.id !== id) });
    if (this.state.currentID === id) void this.show(this.state.sessions[0]?.id);
  }

  // ---- the open chat ------------------------------------------------------------------------

  /** Opens a session (undefined: none) for the person. */
  open(sessionID: string | undefined): Promise<void> {
    this.chosen = true;
    return this.show(sessionID);
  }

  // Later calls win over earlier ones still opening.
  private show(sessionID: string | undefined): Promise<void> {
    if (sessionID !== undefined && sessionID === this.wanted && sessionID === this.state.currentID) return this.queue;
    this.wanted = sessionID;
    this.set({ currentID: sessionID, chat: undefined, opening: sessionID !== undefined });
    history.replaceState(null, '', sessionID ? `#/session/${sessionID}` : location.pathname);
    this.queue = this.queue.then(() => this.switchTo(sessionID));
    return this.queue;
  }

  private async switchTo(sessionID: string | undefined): Promise<void> {
    if (this.wanted !== sessionID) return;
    if (this.chat?.sessionID === sessionID) return;
    await this.closeChat();
    if (!sessionID) return;
    try {
      const chat = await this.client.chat({ sessionID, clientTools: browserTools });
      if (this.wanted !== sessionID) {
        await chat.close();
        return;
      }
      this.chat = chat;
      this.chatOff = [chat.subscribe((s) => this.set({ chat: s }))];
      this.set({ chat: chat.getState(), opening: false, notice: undefined });
    } catch (error) {
      if (this.wanted === sessionID) this.set({ opening: false, notice: `Could not open the session: ${message(error)}` });
    }
  }

  private async closeChat(): Promise<void> {
    const chat = this.chat;
    if (!chat) return;
    this.chat = undefined;
    for (const off of this.chatOff) off();
    this.chatOff = [];
    await chat.close();
  }

  /**
   * Starts a new conversation. The session itself is created by the first message, so that it
   * can be named after it (the server has no rename).
   */
  newSession(): Promise<void> {
    return this.open(undefined);
  }

  private async createSession(firstMessage: string): Promise<string | undefined> {
    const line = firstMessage.split('\n')[0]!.trim();
    const title = line.length > 60 ? `${line.slice(0, 59)}…` : line;
    try {
      const session = await this.client.session.create({ title });
      this.upsert(session);
      await this.open(session.id);
      return session.id;
    } catch (error) {
      this.set({ notice: `Could not create a session: ${message(error)}` });
      return undefined;
    }
  }

  async deleteSession(id: string): Promise<void> {
    try {
      await this.client.session.delete(id);
      this.removed(id);
    } catch (error) {
      this.set({ notice: `Could not delete the session: ${message(error)}` });
    }
  }

  /** Sends a prompt in the open chat, opening a new session first when none is open. */
  async send(text: string): Promise<boolean> {
    if (!this.state.currentID && !(await this.createSession(text))) return false;
    await this.queue;
    const chat = this.chat;
    if (!chat) return false;
    return chat.send({ text, model: this.state.model || undefined });
  }

  async stop(): Promise<void> {
    await this.chat?.stop();
  }

  replyPermission(id: string, reply: 'once' | 'always' | 'reject', note?: string): Promise<boolean> {
    return this.chat?.replyPermission(id, reply, note) ?? Promise.resolve(false);
  }
}
