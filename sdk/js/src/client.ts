import { createChat, type Chat, type ChatOptions } from './chat.js';
import {
  ClientToolsManager,
  type ClientToolDefinition,
  type ClientToolHandler,
  type ClientToolsOptions,
} from './client-tools.js';
import { SwitchboardError } from './errors.js';
import { HttpClient, errorFromResponse, type HttpOptions } from './http.js';
import { readSSE } from './sse.js';
import type {
  AgentInfo,
  MessageWithParts,
  PermissionReply,
  PermissionRequest,
  PermissionRule,
  ProviderList,
  QuestionRequest,
  ServerConfig,
  ServerEvent,
  Session,
  SessionStatus,
  ToolInfo,
} from './types.js';
import { ClientCredentials, randomID } from './util.js';

export interface SwitchboardClientOptions extends HttpOptions {
  /** Names this program to the server (its client tools get `client_{clientID}_` ids). Default: random. */
  clientID?: string;
  /** Options of the `clientTools` manager (transport, timeout, reconnection, WebSocket). */
  clientTools?: Omit<ClientToolsOptions, keyof HttpOptions | 'clientToken' | 'onClientToken'>;
  /**
   * The token the server issued to `clientID` earlier. The server issues it on the id's first
   * use (a session created for it, a registration, a connection); later uses must present it.
   */
  clientToken?: string;
  /** Called when the server issues the token, to keep it for the next run (see `clientToken`). */
  onClientToken?: (token: string) => void;
  /**
   * `true` (default): sessions this client creates belong to it (only its tools are offered
   * there; only it answers their permission asks). `false`: they belong to no client, so any
   * client may attach tools (the web page: every tab of the person's browser).
   */
  ownSessions?: boolean;
}

export interface CreateSessionInput {
  title?: string;
  /** Rules added to the agent's and the config's: `[{permission, pattern, action}]`. */
  permission?: PermissionRule[];
  parentID?: string;
}

/** A prompt: text (or text parts) and optional model, agent and per-tool switches. */
export interface PromptInput {
  text?: string;
  parts?: { type: 'text'; text: string }[];
  /** `"PROVIDER/MODEL"` or `{providerID, modelID}`; default the server's default model. */
  model?: string | { providerID: string; modelID: string };
  /** `build` (default) or `plan`, or an agent from the config. */
  agent?: string;
  /** Turn tools off (or on) for this prompt by id. */
  tools?: Record<string, boolean>;
}

/** A client tool given with its handler, as `startSession({tools})` and `chat({clientTools})` take it. */
export interface ClientToolSpec extends ClientToolDefinition {
  handler: ClientToolHandler | 'interactive';
}

export interface StartSessionOptions extends CreateSessionInput {
  /**
   * `true` (default): connect the `clientTools` manager, with whatever was registered on it, to
   * the new session. An object: register these tools first, then connect. `false`: no client tools.
   */
  tools?: boolean | Record<string, ClientToolSpec>;
}

/** What startSession() returns (seed 000). */
export interface SessionHandle {
  session: Session;
  /** Runs one turn and resolves with the last assistant message and its parts. */
  prompt(input: string | PromptInput, options?: { signal?: AbortSignal }): Promise<MessageWithParts>;
  /** Starts a turn and resolves at once; follow it on `events()`. */
  promptAsync(input: string | PromptInput): Promise<void>;
  /** Aborts the running turn; true when one was running. */
  abort(): Promise<boolean>;
  /** Disconnects the client tools (the session stays on the server). */
  close(): Promise<void>;
}

function promptBody(input: string | PromptInput): Record<string, unknown> {
  const p = typeof input === 'string' ? { text: input } : input;
  const body: Record<string, unknown> = {
    parts: p.parts ?? [{ type: 'text', text: p.text ?? '' }],
  };
  if (p.model !== undefined) body.model = p.model;
  if (p.agent !== undefined) body.agent = p.agent;
  if (p.tools !== undefined) body.tools = p.tools;
  return body;
}

function segment(id: string): string {
  return encodeURIComponent(id);
}

/** `/session` routes. */
export class SessionAPI {
  constructor(
    private readonly http: HttpClient,
    private readonly clientID: string,
    private readonly credentials: ClientCredentials,
    private readonly own: boolean = true,
  ) {}

  /** A session of this client (see `ownSessions`): only its tools are offered there. */
  async create(input: CreateSessionInput = {}): Promise<Session> {
    if (!this.own) return this.http.json('POST', '/session', { ...input });
    const created = await this.http.json<Session & { clientToken?: string }>(
      'POST',
      '/session',
      { ...input, clientID: this.clientID },
      { headers: this.credentials.headers() },
    );
    const { clientToken, ...session } = created;
    this.credentials.take(clientToken);
    return session;
  }
  /** Most recently updated first. */
  list(): Promise<Session[]> {
    return this.http.json('GET', '/session');
  }
  get(sessionID: string): Promise<Session> {
    return this.http.json('GET', `/session/${segment(sessionID)}`);
  }
  /** Deletes the session (a running turn is aborted first). */
  async delete(sessionID: string): Promise<boolean> {
    return this.http.json('DELETE', `/session/${segment(sessionID)}`);
  }
  /** Every message of the session with its parts, in order. */
  messages(sessionID: string): Promise<MessageWithParts[]> {
    return this.http.json('GET', `/session/${segment(sessionID)}/message`);
  }
  /**
   * Runs one turn and resolves with the last assistant message and its parts. Rejects with
   * CONFLICT while the session is busy. A turn that fails at the model resolves: the message's
   * `info.error` says why.
   */
  prompt(
    sessionID: string,
    input: string | PromptInput,
    options: { signal?: AbortSignal } = {},
  ): Promise<MessageWithParts> {
    return this.http.json('POST', `/session/${segment(sessionID)}/message`, promptBody(input), options);
  }
  /** Starts a turn and resolves as soon as the server accepted it. */
  async promptAsync(sessionID: string, input: string | PromptInput): Promise<void> {
    await this.http.json('POST', `/session/${segment(sessionID)}/prompt_async`, promptBody(input));
  }
  /** Aborts the running turn; true when one was running. */
  abort(sessionID: string): Promise<boolean> {
    return this.http.json('POST', `/session/${segment(sessionID)}/abort`);
  }
  /** Sessions that are not idle, by id. */
  status(): Promise<Record<string, SessionStatus>> {
    return this.http.json('GET', '/session/status');
  }
}

/** `/permission` routes: asks waiting for a person. */
export class PermissionAPI {
  constructor(
    private readonly http: HttpClient,
    private readonly clientID: string,
    private readonly credentials: ClientCredentials,
  ) {}
  list(): Promise<PermissionRequest[]> {
    return this.http.json('GET', '/permission');
  }
  /** `once`, `always` (for the rest of the session), or `reject` (with `message`, guidance the model reads). */
  reply(permissionID: string, reply: PermissionReply, message?: string): Promise<boolean> {
    // Named, so that the asks of this client's own sessions are accepted (only the owner answers those).
    const body: Record<string, unknown> = { reply, clientID: this.clientID };
    if (message !== undefined) body.message = message;
    return this.http.json('POST', `/permission/${segment(permissionID)}/reply`, body, {
      headers: this.credentials.headers(),
    });
  }
}

/** `/question` routes: questions of the `question` tool. */
export class QuestionAPI {
  constructor(
    private readonly http: HttpClient,
    private readonly clientID: string,
    private readonly credentials: ClientCredentials,
  ) {}
  list(): Promise<QuestionRequest[]> {
    return this.http.json('GET', '/question');
  }
  /** One list of chosen labels per question. */
  reply(questionID: string, answers: string[][]): Promise<boolean> {
    // Named, like permission replies: only the owner answers the questions of its own sessions.
    const body = { answers, clientID: this.clientID };
    return this.http.json('POST', `/question/${segment(questionID)}/reply`, body, {
      headers: this.credentials.headers(),
    });
  }
  reject(questionID: string): Promise<boolean> {
    const body = { clientID: this.clientID };
    return this.http.json('POST', `/question/${segment(questionID)}/reject`, body, {
      headers: this.credentials.headers(),
    });
  }
}

/**
 * A Switchboard server as a program sees it: sessions, the event stream, permission and question
 * replies, and (`clientTools`) the tools this program runs for the model.
 */
export class SwitchboardClient {
  readonly baseURL: string;
  readonly clientID: string;
  readonly session: SessionAPI;
  readonly permission: PermissionAPI;
  readonly question: QuestionAPI;
  private readonly http: HttpClient;
  private readonly options: SwitchboardClientOptions;
  private manager: ClientToolsManager | undefined;
  private readonly credentials: ClientCredentials;

  constructor(baseURL = 'http://127.0.0.1:4096', options: SwitchboardClientOptions = {}) {
    this.http = new HttpClient(baseURL, options);
    this.baseURL = this.http.baseURL;
    this.options = options;
    this.clientID = options.clientID ?? randomID('js');
    this.credentials = new ClientCredentials(options.clientToken, options.onClientToken);
    this.session = new SessionAPI(this.http, this.clientID, this.credentials, options.ownSessions !== false);
    this.permission = new PermissionAPI(this.http, this.clientID, this.credentials);
    this.question = new QuestionAPI(this.http, this.clientID, this.credentials);
  }

  /** The manager of this client's tools (created on first use, with `options.clientTools`). */
  get clientTools(): ClientToolsManager {
    this.manager ??= this.newClientTools(this.clientID);
    return this.manager;
  }

  /** A separate manager under another client id (one per concurrent session, say). */
  newClientTools(clientID: string, options: Omit<ClientToolsOptions, keyof HttpOptions> = {}) {
    return new ClientToolsManager(
      clientID,
      this.baseURL,
      {
        fetch: this.options.fetch,
        headers: this.options.headers,
        password: this.options.password,
        ...this.options.clientTools,
        ...options,
      },
      // This client's own id shares the token with its sessions.
      clientID === this.clientID ? this.credentials : undefined,
    );
  }

  /** The token the server issued to `clientID` (undefined until its first use). */
  get clientToken(): string | undefined {
    return this.credentials.token;
  }

  /** The server's health; a server whose store does not answer fails it with a 503. */
  health(): Promise<{
    healthy: boolean;
    version: string;
    storage: { engine?: 'sqlite' | 'postgres'; ok: boolean; error?: string };
  }> {
    return this.http.json('GET', '/health');
  }

  /** The tools a session's model would be offered. */
  tools(options: { sessionID?: string; agent?: string } = {}): Promise<ToolInfo[]> {
    const q = new URLSearchParams();
    if (options.sessionID) q.set('sessionID', options.sessionID);
    if (options.agent) q.set('agent', options.agent);
    const query = q.toString();
    return this.http.json('GET', `/tool${query ? `?${query}` : ''}`);
  }

  /** The configured providers and their models (`GET /provider`). */
  providers(): Promise<ProviderList> {
    return this.http.json('GET', '/provider');
  }

  /** The effective configuration, with the default model in `model` (`GET /config`). */
  config(): Promise<ServerConfig> {
    return this.http.json('GET', '/config');
  }

  /** The agents a prompt may name (`GET /agent`). */
  agents(): Promise<AgentInfo[]> {
    return this.http.json('GET', '/agent');
  }

  /**
   * The server's event stream (`/event`), typed by `type`. The first event is `server.connected`.
   * Ends when the server closes the stream or `signal` aborts; rejects with NETWORK_ERROR when
   * the connection fails. Each event carries its `id`: reconnect with the last one as
   * `lastEventID` and the server sends what was missed first, saying so with `server.connected`
   * `{resumed: true}`; with `{resumed: false}` (too long away, or the server restarted) reload
   * state, e.g. `session.messages`.
   */
  async *events(
    options: { signal?: AbortSignal; lastEventID?: string } = {},
  ): AsyncGenerator<ServerEvent> {
    const { signal, lastEventID } = options;
    const headers: Record<string, string> = { Accept: 'text/event-stream' };
    if (lastEventID !== undefined) headers['Last-Event-ID'] = lastEventID;
    let response: Response;
    try {
      response = await this.http.raw('/event', {
        method: 'GET',
        headers,
        signal,
        cache: 'no-store',
      });
    } catch (error) {
      if (signal?.aborted) return;
      throw error;
    }
    if (!response.ok) throw await errorFromResponse(response);
    if (!response.body) throw new SwitchboardError('BAD_RESPONSE', '/event has no body');
    try {
      for await (const frame of readSSE(response.body)) {
        let event: ServerEvent;
        try {
          event = JSON.parse(frame.data) as ServerEvent;
        } catch {
          continue;
        }
        if (!event || typeof event.type !== 'string') continue;
        if (frame.id !== undefined) event.id = frame.id;
        yield event;
      }
    } catch (error) {
      if (signal?.aborted) return;
      throw new SwitchboardError('NETWORK_ERROR', `/event stream broke: ${String(error)}`, 0, {
        cause: error,
      });
    }
  }

  /**
   * Seed 003's chat on a session (new, or `options.sessionID`): messages, status, interactive
   * tool calls and permission asks as one observable state. Uses `clientTools`.
   */
  chat(options: ChatOptions = {}): Promise<Chat> {
    return createChat(this, options);
  }

  /**
   * Seed 000's one-call start: creates a session owned by this client, connects the client tools
   * to it, and returns `{session, prompt, close}`.
   */
  async startSession(options: StartSessionOptions = {}): Promise<SessionHandle> {
    const { tools = true, ...create } = options;
    const manager = this.clientTools;
    if (tools !== false && manager.state !== 'closed')
      throw new Error(
        `the client tools of ${this.clientID} are ${manager.state}: close the other session first`,
      );
    if (typeof tools === 'object')
      for (const [name, spec] of Object.entries(tools)) {
        const { handler, ...definition } = spec;
        await manager.register(name, definition, handler);
      }
    const session = await this.session.create(create);
    if (tools !== false) {
      try {
        await manager.connect(session.id);
      } catch (error) {
        await this.session.delete(session.id).catch(() => {});
        throw error;
      }
    }
    return {
      session,
      prompt: (input, promptOptions) => this.session.prompt(session.id, input, promptOptions),
      promptAsync: (input) => this.session.promptAsync(session.id, input),
      abort: () => this.session.abort(session.id),
      close: async () => {
        if (tools !== false) await manager.disconnect();
      },
    };
  }
}
