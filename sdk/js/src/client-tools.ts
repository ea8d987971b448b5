import { Emitter } from './emitter.js';
import { SwitchboardError, errorMessage } from './errors.js';
import { HttpClient, errorFromResponse, type HttpOptions } from './http.js';
import { readSSE } from './sse.js';
import type {
  ClientToolRequest,
  ClientToolResponse,
  JSONObject,
  JSONSchema,
  ToolInfo,
} from './types.js';
import { ClientCredentials, isPlainObject, sleep, webSocketURL } from './util.js';

export type Transport = 'sse' | 'websocket';

/**
 * The manager's connection: `closed` before connect() and after disconnect() or a failed
 * reconnection, `connecting` during connect(), `connected` while requests can arrive,
 * `reconnecting` between a dropped connection and the next successful attempt.
 */
export type ConnectionState = 'connecting' | 'connected' | 'reconnecting' | 'closed';

/** The part of the platform WebSocket the SDK uses; the browser's, Node 22's, or the `ws` package's. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code?: number; reason?: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
}
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** What a handler learns about the call it answers. */
export interface ClientToolContext {
  sessionID: string;
  messageID: string;
  /** The model's tool call id (seed 003 calls it `toolCallId`; both are set). */
  callID: string;
  toolCallId: string;
  /** The server's id for this delivery; results are bound to it. */
  requestID: string;
  /** The tool's name as registered (without the `client_{clientID}_` prefix). */
  toolName: string;
  /**
   * Aborts when the server cancels the call (the turn was aborted, the server's timeout passed),
   * when this client's `timeout` passes, or on disconnect(). `signal.reason` says which.
   */
  signal: AbortSignal;
  /**
   * Reports progress: it reaches the tool part (`title`, `metadata`) and the event stream, and
   * extends the server's deadline. Resolves to false when it could not be delivered.
   */
  progress(update: { title?: string; metadata?: JSONObject }): Promise<boolean>;
}

/**
 * A handler's return value: a string (the output), `{title?, output, metadata?, attachments?}`,
 * or any other JSON value (sent as its JSON text). Throwing sends an error result with the message.
 */
export type ClientToolHandler = (input: JSONObject, context: ClientToolContext) => unknown;

export interface ClientToolDefinition {
  description: string;
  /** JSON Schema of the input object; default `{type: "object"}`. */
  parameters?: JSONSchema;
}

/**
 * A call of an interactive tool, waiting for a person. Listed in `pendingClientTools[toolName]`
 * until it is submitted, cancelled, or ended by the server (signal aborts).
 */
export interface InteractiveToolCall {
  readonly toolCallId: string;
  readonly toolName: string;
  readonly args: JSONObject;
  readonly requestID: string;
  readonly sessionID: string;
  readonly messageID: string;
  /** Aborts when the server gives up on the call (abort, timeout); the call leaves the list then. */
  readonly signal: AbortSignal;
  /**
   * Answers the call (same forms as a handler's return value). Resolves to true once the server
   * accepted it, false when the call had already ended. Never rejects.
   */
  submit(result: unknown): Promise<boolean>;
  /** Answers with an error; the model reads `reason` (default "The user cancelled this tool call"). */
  cancel(reason?: string): Promise<boolean>;
}

/** Interactive calls waiting for a person, by tool name. A new object after every change. */
export type PendingClientTools = Readonly<Record<string, readonly InteractiveToolCall[]>>;

export interface ClientToolsOptions extends HttpOptions {
  /** ms a handler may run before its signal aborts and an error result is sent. Default 30000. */
  timeout?: number;
  /** How requests arrive. Default 'sse'. */
  transport?: Transport;
  /** Reconnection attempts after a connection drops, before giving up. Default 5. */
  maxReconnectAttempts?: number;
  /** Delay before the first reconnection attempt, doubled for each next one. Default 1000 ms. */
  reconnectDelay?: number;
  /** Cap of the reconnection delay. Default 30000 ms. */
  maxReconnectDelay?: number;
  /** ms an attempt to open the stream or WebSocket may take. Default 10000. */
  connectTimeout?: number;
  /**
   * SSE only: ms without a byte (the server pings every `clientTools.keepaliveInterval`, 30 s by
   * default) after which the stream is taken for dead and reopened. Default 75000; 0 turns it off.
   */
  idleTimeout?: number;
  /** WebSocket constructor; default `globalThis.WebSocket` (browsers, Node 22+, Node 20 with --experimental-websocket). */
  WebSocket?: WebSocketConstructor;
  /**
   * The client token the server issued to this clientID earlier (a program that keeps its id
   * across runs keeps its token too). Without it, the first connection gets one.
   */
  clientToken?: string;
  /** Called when the server issues this client's token, to keep it (see `clientToken`). */
  onClientToken?: (token: string) => void;
}

export interface ClientToolsEvents {
  /** The connection state changed. */
  state: [state: ConnectionState, previous: ConnectionState];
  /** Something failed that no call returns: a result that could not be delivered, reconnection giving up (code RECONNECT_FAILED). */
  error: [error: SwitchboardError];
  /** A request arrived (replays of a request already being handled are not repeated). */
  request: [request: ClientToolRequest];
  /** The server cancelled a request. */
  cancel: [requestID: string, reason: string];
  /** A reconnection attempt is scheduled: its number (from 1) and its delay. */
  reconnect: [attempt: number, delayMs: number];
  /** The interactive calls waiting for a person changed. */
  pending: [pending: PendingClientTools];
}

const NAME = /^[A-Za-z0-9_-]{1,128}$/;
const RECENT_LIMIT = 1024;

interface Tool {
  definition: ClientToolDefinition;
  handler: ClientToolHandler | 'interactive';
}

interface ActiveCall {
  request: ClientToolRequest;
  controller: AbortController;
  timer?: ReturnType<typeof setTimeout>;
  interactive?: InteractiveToolCall;
}

// A finished call: the response (undefined when the server ended it) and the link it last went out on.
interface Finished {
  response?: ClientToolResponse;
  sentOn?: number;
}

interface Outgoing {
  response: ClientToolResponse;
  resolve: (delivered: boolean) => void;
}

interface Link {
  id: number;
  transport: Transport;
  close(): void;
  socket?: WebSocketLike;
}

/**
 * Registers tools that run in this program and answers the server's requests for them over SSE
 * or WebSocket (seed 000's ClientToolsManager, with seed 003's interactive tools).
 *
 * Not thread-bound, single-threaded like any JS object: use it from one event loop.
 */
export class ClientToolsManager extends Emitter<ClientToolsEvents> {
  readonly clientID: string;
  readonly baseURL: string;
  private readonly http: HttpClient;
  private readonly options: Required<
    Pick<
      ClientToolsOptions,
      | 'timeout'
      | 'transport'
      | 'maxReconnectAttempts'
      | 'reconnectDelay'
      | 'maxReconnectDelay'
      | 'connectTimeout'
      | 'idleTimeout'
    >
  >;
  private readonly WebSocketImpl?: WebSocketConstructor;
  private readonly credentials: ClientCredentials;
  private readonly tools = new Map<string, Tool>();
  private readonly calls = new Map<string, ActiveCall>();
  private readonly recent = new Map<string, Finished>();
  private readonly outbox = new Map<string, Outgoing>();
  private pending: PendingClientTools = Object.freeze({});
  private currentState: ConnectionState = 'closed';
  private sessionID: string | undefined;
  private link: Link | undefined;
  private nextLinkID = 0;
  private lastEventID: string | undefined;
  private lifetime = new AbortController();
  private retryTimer: ReturnType<typeof setTimeout> | undefined;

  /** `credentials` (internal): shared with the SwitchboardClient whose sessions this client owns. */
  constructor(
    clientID: string,
    baseURL: string,
    options: ClientToolsOptions = {},
    credentials?: ClientCredentials,
  ) {
    super();
    this.credentials = credentials ?? new ClientCredentials(options.clientToken, options.onClientToken);
    if (!NAME.test(clientID))
      throw new TypeError(`clientID must be 1-128 letters, digits, '_' or '-', got "${clientID}"`);
    this.clientID = clientID;
    this.http = new HttpClient(baseURL, options);
    this.baseURL = this.http.baseURL;
    this.options = {
      timeout: options.timeout ?? 30000,
      transport: options.transport ?? 'sse',
      maxReconnectAttempts: options.maxReconnectAttempts ?? 5,
      reconnectDelay: options.reconnectDelay ?? 1000,
      maxReconnectDelay: options.maxReconnectDelay ?? 30000,
      connectTimeout: options.connectTimeout ?? 10000,
      idleTimeout: options.idleTimeout ?? 75000,
    };
    if (options.transport && options.transport !== 'sse' && options.transport !== 'websocket')
      throw new TypeError(`transport must be "sse" or "websocket", got "${options.transport}"`);
    this.WebSocketImpl = options.WebSocket;
    this.lifetime.abort();
  }

  get state(): ConnectionState {
    return this.currentState;
  }

  get transport(): Transport {
    return this.options.transport;
  }

  /** The token the server issued to this clientID (undefined until the first connection). */
  get clientToken(): string | undefined {
    return this.credentials.token;
  }

  /** The full id the server gives this client's tool `name`. */
  toolID(name: string): string {
    return `client_${this.clientID}_${name}`;
  }

  /** The names of the registered tools. */
  get toolNames(): string[] {
    return [...this.tools.keys()];
  }

  /** Interactive calls waiting for a person, by tool name (seed 003's `pendingClientTools`). */
  get pendingClientTools(): PendingClientTools {
    return this.pending;
  }

  /**
   * Adds a tool. `handler` runs for each call, or is `'interactive'` for calls a person answers
   * (they appear in `pendingClientTools`). While connected, the server learns of it at once and
   * a failure (an invalid schema, a name another client owns) rejects with its error.
   */
  async register(
    name: string,
    definition: ClientToolDefinition,
    handler: ClientToolHandler | 'interactive',
  ): Promise<void> {
    if (!NAME.test(name))
      throw new TypeError(`tool name must be 1-128 letters, digits, '_' or '-', got "${name}"`);
    if (typeof handler !== 'function' && handler !== 'interactive')
      throw new TypeError(`the handler of ${name} must be a function or 'interactive'`);
    const previous = this.tools.get(name);
    const tool: Tool = { definition, handler };
    this.tools.set(name, tool);
    if (this.currentState === 'closed') return;
    try {
      await this.sendRegistration([[name, tool]]);
    } catch (error) {
      const e = error as SwitchboardError;
      // While reconnecting, the next attempt registers every tool anyway.
      if (this.currentState !== 'connected' && e.retryable) return;
      if (this.tools.get(name) === tool) {
        if (previous) this.tools.set(name, previous);
        else this.tools.delete(name);
      }
      throw error;
    }
  }

  /** Removes a tool; while connected the server drops it at once (its waiting calls fail). */
  async unregister(name: string): Promise<void> {
    if (!this.tools.delete(name)) return;
    if (this.currentState === 'closed') return;
    try {
      await this.http.json(
        'DELETE',
        '/client-tools/unregister',
        { clientID: this.clientID, sessionID: this.sessionID, toolIDs: [name] },
        { timeout: this.options.connectTimeout, headers: this.credentials.headers() },
      );
    } catch (error) {
      if (this.currentState === 'connected' || !(error as SwitchboardError).retryable) throw error;
    }
  }

  /**
   * Registers every tool (for `sessionID` only, when given) and opens the request stream.
   * Rejects with the server's error, or NETWORK_ERROR, when the first connection fails; after
   * that, dropped connections are retried with backoff (see `reconnect` and `error` events).
   */
  async connect(sessionID?: string): Promise<void> {
    if (this.currentState !== 'closed')
      throw new Error(`connect() while ${this.currentState}: call disconnect() first`);
    this.sessionID = sessionID;
    this.lifetime = new AbortController();
    this.lastEventID = undefined;
    this.setState('connecting');
    try {
      await this.establish(this.lifetime.signal);
    } catch (error) {
      this.lifetime.abort();
      this.link?.close();
      this.link = undefined;
      if (this.currentState !== 'closed') this.setState('closed');
      throw error;
    }
    if (this.lifetime.signal.aborted) return;
    this.setState('connected');
    this.afterConnected();
  }

  // The link may have dropped between opening and now; then reconnection takes over.
  private afterConnected(): void {
    if (!this.link) {
      this.setState('reconnecting');
      void this.reconnect(this.lifetime.signal);
      return;
    }
    this.flushOutbox();
  }

  /**
   * Ends every call in progress (handlers' signals abort; the server gets an error result
   * "Client disconnected" and interactive calls leave `pendingClientTools`), unregisters the
   * tools, and closes the connection. Never rejects; waits at most about 2 s for the server.
   */
  async disconnect(): Promise<void> {
    if (this.currentState === 'closed') return;
    // Answer the calls in progress while the connection is still there to carry the answers.
    const ending: Promise<boolean>[] = [];
    for (const call of [...this.calls.values()]) {
      call.controller.abort(domException('Client disconnected', 'AbortError'));
      ending.push(this.finish(call, { status: 'error', error: 'Client disconnected' }, true));
    }
    if (ending.length) {
      const waited = new AbortController();
      await Promise.race([Promise.allSettled(ending), sleep(2000, waited.signal)]);
      waited.abort();
    }
    this.setState('closed');
    this.lifetime.abort();
    clearTimeout(this.retryTimer);
    if (this.tools.size > 0)
      await this.http
        .json(
          'DELETE',
          '/client-tools/unregister',
          { clientID: this.clientID, sessionID: this.sessionID },
          { timeout: 2000, headers: this.credentials.headers() },
        )
        .catch(() => {});
    this.link?.close();
    this.link = undefined;
    this.dropOutbox();
  }

  // ---- connection -----------------------------------------------------------------------------

  private setState(state: ConnectionState): void {
    const previous = this.currentState;
    if (previous === state) return;
    this.currentState = state;
    this.emit('state', state, previous);
  }

  private definitions(entries: Iterable<[string, Tool]>): object[] {
    const out: object[] = [];
    for (const [name, tool] of entries) {
      const def: Record<string, unknown> = {
        id: name,
        description: tool.definition.description,
        parameters: tool.definition.parameters ?? { type: 'object', properties: {} },
      };
      if (tool.handler === 'interactive') def.interactive = true;
      out.push(def);
    }
    return out;
  }

  private async sendRegistration(entries: Iterable<[string, Tool]>, signal?: AbortSignal) {
    const tools = this.definitions(entries);
    if (tools.length === 0) return;
    const answer = await this.http.json<{ registered: string[]; clientToken?: string }>(
      'POST',
      '/client-tools/register',
      { clientID: this.clientID, sessionID: this.sessionID, tools },
      { signal, timeout: this.options.connectTimeout, headers: this.credentials.headers() },
    );
    this.credentials.take(answer?.clientToken);
  }

  // Registers the tools and opens a link; resolves once requests can arrive.
  private async establish(lifetime: AbortSignal): Promise<void> {
    const attempt = this.attemptSignal(lifetime);
    try {
      if (this.currentState === 'reconnecting' && this.tools.size > 0) {
        const known = await this.http
          .json<ToolInfo[]>('GET', `/client-tools/tools/${encodeURIComponent(this.clientID)}`, undefined, {
            signal: attempt.signal,
          })
          .catch(() => undefined);
        if (known && known.length === 0) await this.serverForgot(attempt.signal);
      }
      await this.sendRegistration(this.tools.entries(), attempt.signal);
    } catch (error) {
      throw attempt.signal.aborted && !lifetime.aborted
        ? new SwitchboardError('NETWORK_ERROR', `registering tools: ${attempt.signal.reason?.message}`)
        : error;
    } finally {
      attempt.done();
    }
    const link =
      this.options.transport === 'websocket'
        ? await this.openWebSocket(lifetime)
        : await this.openSSE(lifetime);
    if (lifetime.aborted) {
      link.close();
      throw new SwitchboardError('ABORTED', 'disconnected while connecting');
    }
    this.link = link;
  }

  // The server no longer knows this client's tools: the reconnect grace passed (it failed every
  // call of this client with "Client disconnected"), or it restarted, keeping only the calls of
  // session turns that wait through a restart. Each running call is reported as still in
  // progress: those the server no longer has (or that cannot be asked about) end here too, the
  // others run on. Every pending request is asked for again (no Last-Event-ID); a kept call's is
  // recognised as running.
  private async serverForgot(signal: AbortSignal): Promise<void> {
    this.lastEventID = undefined;
    await Promise.all(
      [...this.calls.values()].map(async (call) => {
        const kept = await this.http
          .json(
            'POST',
            '/client-tools/progress',
            { requestID: call.request.requestID, clientID: this.clientID },
            { signal, timeout: this.options.connectTimeout, headers: this.credentials.headers() },
          )
          .then(
            () => true,
            () => false,
          );
        if (kept || this.calls.get(call.request.requestID) !== call) return;
        call.controller.abort(
          domException('The server ended this call while the client was disconnected', 'AbortError'),
        );
        void this.finish(call, undefined, false);
      }),
    );
  }

  private attemptSignal(lifetime: AbortSignal): { signal: AbortSignal; done: () => void } {
    const controller = new AbortController();
    const onAbort = () => controller.abort(domException('disconnected', 'AbortError'));
    lifetime.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(
      () =>
        controller.abort(
          domException(`no answer within ${this.options.connectTimeout} ms`, 'TimeoutError'),
        ),
      this.options.connectTimeout,
    );
    return {
      signal: controller.signal,
      done: () => {
        clearTimeout(timer);
        lifetime.removeEventListener('abort', onAbort);
      },
    };
  }

  private async openSSE(lifetime: AbortSignal): Promise<Link> {
    const controller = new AbortController();
    const stop = () => controller.abort();
    lifetime.addEventListener('abort', stop, { once: true });
    const attempt = this.attemptSignal(lifetime);
    attempt.signal.addEventListener('abort', stop, { once: true });
    const headers: Record<string, string> = {
      Accept: 'text/event-stream',
      ...this.credentials.headers(),
    };
    if (this.lastEventID !== undefined) headers['Last-Event-ID'] = this.lastEventID;
    let response: Response;
    try {
      response = await this.http.raw(`/client-tools/pending/${encodeURIComponent(this.clientID)}`, {
        method: 'GET',
        headers,
        signal: controller.signal,
        cache: 'no-store',
      });
    } catch (error) {
      throw attempt.signal.aborted && !lifetime.aborted
        ? new SwitchboardError('NETWORK_ERROR', `opening the request stream: ${attempt.signal.reason?.message}`)
        : error;
    } finally {
      attempt.signal.removeEventListener('abort', stop);
      attempt.done();
    }
    if (!response.ok) {
      lifetime.removeEventListener('abort', stop);
      throw await errorFromResponse(response);
    }
    if (!response.body) {
      lifetime.removeEventListener('abort', stop);
      throw new SwitchboardError('BAD_RESPONSE', 'the request stream has no body');
    }
    this.credentials.take(response.headers.get('X-Switchboard-Client-Token'));
    const link: Link = { id: ++this.nextLinkID, transport: 'sse', close: stop };
    void this.readSSELink(link, response.body, controller).finally(() =>
      lifetime.removeEventListener('abort', stop),
    );
    return link;
  }

  private async readSSELink(
    link: Link,
    body: ReadableStream<Uint8Array>,
    controller: AbortController,
  ): Promise<void> {
    let idle: ReturnType<typeof setTimeout> | undefined;
    const idleTimeout = this.options.idleTimeout;
    const activity = () => {
      if (idleTimeout <= 0) return;
      clearTimeout(idle);
      idle = setTimeout(() => controller.abort(), idleTimeout);
    };
    activity();
    try {
      for await (const frame of readSSE(body, activity)) {
        if (frame.event === 'tool-request') {
          const request = parseJSON(frame.data) as ClientToolRequest | undefined;
          if (!request || typeof request.requestID !== 'string') continue;
          if (frame.id !== undefined) this.lastEventID = frame.id;
          this.onRequest(request, link);
        } else if (frame.event === 'tool-cancel') {
          const cancel = parseJSON(frame.data) as { requestID?: string; reason?: string } | undefined;
          if (cancel && typeof cancel.requestID === 'string')
            this.onCancel(cancel.requestID, cancel.reason ?? 'cancelled');
        }
      }
    } catch {
      // The stream broke (network, idle timeout, close): reconnection follows.
    } finally {
      clearTimeout(idle);
    }
    this.onLinkLost(link);
  }

  private openWebSocket(lifetime: AbortSignal): Promise<Link> {
    const WS =
      this.WebSocketImpl ??
      (globalThis as unknown as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WS)
      return Promise.reject(
        new TypeError(
          'no WebSocket: pass options.WebSocket, run Node 22+, or run Node 20 with --experimental-websocket',
        ),
      );
    // A WebSocket cannot send headers: the tokens go in the query (over wss:// in production).
    const query = new URLSearchParams();
    if (this.credentials.token) query.set('clientToken', this.credentials.token);
    if (this.http.password !== undefined) query.set('token', this.http.password);
    const search = query.toString();
    const url = webSocketURL(
      this.baseURL,
      `/client-tools/ws/${encodeURIComponent(this.clientID)}${search ? `?${search}` : ''}`,
    );
    return new Promise<Link>((resolve, reject) => {
      let socket: WebSocketLike;
      try {
        socket = new WS(url);
      } catch (error) {
        reject(new SwitchboardError('NETWORK_ERROR', `WebSocket ${url}: ${errorMessage(error)}`));
        return;
      }
      const link: Link = {
        id: ++this.nextLinkID,
        transport: 'websocket',
        socket,
        close: () => {
          try {
            socket.close(1000, 'client disconnect');
          } catch {
            // Closing a socket that never opened may throw; it is gone either way.
          }
        },
      };
      const attempt = this.attemptSignal(lifetime);
      let settled = false;
      const giveUp = () => {
        settled = true;
        link.close();
        reject(
          new SwitchboardError('NETWORK_ERROR', `WebSocket ${url}: ${attempt.signal.reason?.message}`),
        );
      };
      attempt.signal.addEventListener('abort', giveUp, { once: true });
      // Without a token this connection is the id's first use: the server's first message
      // carries the token, and the link counts as open once it is kept (so that what follows,
      // a registration say, can send it).
      const awaitingToken = !this.credentials.token;
      const ready = () => {
        if (settled) return;
        settled = true;
        attempt.signal.removeEventListener('abort', giveUp);
        attempt.done();
        resolve(link);
      };
      socket.onopen = () => {
        if (!awaitingToken) return ready();
        // A server with client tokens off sends none: go on after a moment.
        setTimeout(ready, 1000);
      };
      socket.onerror = () => {
        // The close event that follows says the rest.
      };
      socket.onclose = (event) => {
        if (!settled) {
          settled = true;
          attempt.signal.removeEventListener('abort', giveUp);
          attempt.done();
          reject(
            new SwitchboardError(
              'NETWORK_ERROR',
              `WebSocket ${url} closed before it opened (code ${event?.code ?? '?'})`,
            ),
          );
          return;
        }
        this.onLinkLost(link);
      };
      socket.onmessage = (event) => {
        const text = typeof event.data === 'string' ? event.data : String(event.data);
        const msg = parseJSON(text) as Record<string, unknown> | undefined;
        if (!msg) return;
        if (msg.type === 'credentials') {
          this.credentials.take(msg.clientToken);
          if (awaitingToken) ready();
        } else if (msg.type === 'request' && isPlainObject(msg.request)) {
          this.onRequest(msg.request as unknown as ClientToolRequest, link);
        } else if (msg.type === 'cancel' && typeof msg.requestID === 'string') {
          this.onCancel(msg.requestID, typeof msg.reason === 'string' ? msg.reason : 'cancelled');
        } else if (msg.type === 'error') {
          const code = typeof msg.code === 'string' ? msg.code : 'INTERNAL_ERROR';
          // A result or progress for a call that already ended: nothing is lost.
          if (msg.requestID && (code === 'CONFLICT' || code === 'NOT_FOUND')) return;
          this.emit(
            'error',
            new SwitchboardError(code as SwitchboardError['code'], String(msg.error ?? code)),
          );
        }
      };
    });
  }

  private onLinkLost(link: Link): void {
    if (this.link !== link) return;
    this.link = undefined;
    // While connecting, connect() or the reconnection loop notices the missing link.
    if (this.currentState !== 'connected') return;
    this.setState('reconnecting');
    void this.reconnect(this.lifetime.signal);
  }

  private async reconnect(lifetime: AbortSignal): Promise<void> {
    const { maxReconnectAttempts, reconnectDelay, maxReconnectDelay } = this.options;
    let lastError: unknown = new SwitchboardError('NETWORK_ERROR', 'the connection dropped');
    for (let attempt = 0; attempt < maxReconnectAttempts; attempt++) {
      const delay = Math.min(reconnectDelay * 2 ** attempt, maxReconnectDelay);
      this.emit('reconnect', attempt + 1, delay);
      if (!(await sleep(delay, lifetime))) return;
      try {
        await this.establish(lifetime);
      } catch (error) {
        if (lifetime.aborted) return;
        lastError = error;
        if (error instanceof SwitchboardError && !error.retryable) break;
        continue;
      }
      if (lifetime.aborted) return;
      if (!this.link) continue;
      this.setState('connected');
      this.flushOutbox();
      return;
    }
    if (lifetime.aborted) return;
    this.setState('closed');
    this.lifetime.abort();
    for (const call of [...this.calls.values()]) {
      call.controller.abort(domException('Connection lost', 'AbortError'));
      void this.finish(call, undefined, false);
    }
    this.dropOutbox();
    this.emit(
      'error',
      new SwitchboardError(
        'RECONNECT_FAILED',
        `gave up reconnecting client ${this.clientID} after ${maxReconnectAttempts} attempts: ${errorMessage(lastError)}`,
        lastError instanceof SwitchboardError ? lastError.status : 0,
        { cause: lastError },
      ),
    );
  }

  // ---- calls ----------------------------------------------------------------------------------

  private onRequest(request: ClientToolRequest, link: Link): void {
    if (this.calls.has(request.requestID)) return;  // a replay of a call still running
    const finished = this.recent.get(request.requestID);
    if (finished) {
      // A replay of a call already answered whose answer may have been lost with the old link.
      if (finished.response && finished.sentOn !== link.id) {
        this.queue(request.requestID, finished.response, () => {});
      }
      return;
    }
    this.emit('request', request);
    const prefix = `client_${this.clientID}_`;
    const name = request.tool.startsWith(prefix) ? request.tool.slice(prefix.length) : request.tool;
    const tool = this.tools.get(name);
    const call: ActiveCall = { request, controller: new AbortController() };
    this.calls.set(request.requestID, call);
    if (!tool) {
      void this.finish(call, { status: 'error', error: `No client handler for tool: ${name}` }, true);
      return;
    }
    if (tool.handler === 'interactive') {
      this.startInteractive(call, name);
      return;
    }
    call.timer = setTimeout(() => {
      const message = `Client tool ${name} timed out after ${this.options.timeout}ms`;
      call.controller.abort(domException(message, 'TimeoutError'));
      void this.finish(call, { status: 'error', error: message }, true);
    }, this.options.timeout);
    const context: ClientToolContext = {
      sessionID: request.sessionID,
      messageID: request.messageID,
      callID: request.callID,
      toolCallId: request.callID,
      requestID: request.requestID,
      toolName: name,
      signal: call.controller.signal,
      progress: (update) => this.sendProgress(call, update),
    };
    const handler = tool.handler;
    void (async () => {
      let response: ClientToolResponse;
      try {
        response = toResponse(await handler(request.input ?? {}, context));
      } catch (error) {
        response = { status: 'error', error: errorMessage(error) };
      }
      await this.finish(call, response, true);
    })();
  }

  private startInteractive(call: ActiveCall, name: string): void {
    const { request } = call;
    const entry: InteractiveToolCall = Object.freeze({
      toolCallId: request.callID,
      toolName: name,
      args: request.input ?? {},
      requestID: request.requestID,
      sessionID: request.sessionID,
      messageID: request.messageID,
      signal: call.controller.signal,
      submit: (result: unknown) => this.finish(call, toResponse(result), true),
      cancel: (reason?: string) =>
        this.finish(
          call,
          { status: 'error', error: reason || 'The user cancelled this tool call' },
          true,
        ),
    });
    call.interactive = entry;
    const list = this.pending[name] ?? [];
    this.setPending({ ...this.pending, [name]: Object.freeze([...list, entry]) });
  }

  private setPending(next: Record<string, readonly InteractiveToolCall[]>): void {
    this.pending = Object.freeze(next);
    this.emit('pending', this.pending);
  }

  private onCancel(requestID: string, reason: string): void {
    const call = this.calls.get(requestID);
    this.emit('cancel', requestID, reason);
    if (!call) return;
    call.controller.abort(domException(`Cancelled by the server: ${reason}`, 'AbortError'));
    void this.finish(call, undefined, false);
  }

  // Ends a call once: clears its timer, leaves the interactive list, sends `response` if given.
  // Resolves to whether the server accepted the response.
  private finish(
    call: ActiveCall,
    response: ClientToolResponse | undefined,
    send: boolean,
  ): Promise<boolean> {
    const id = call.request.requestID;
    if (this.calls.get(id) !== call) return Promise.resolve(false);
    this.calls.delete(id);
    clearTimeout(call.timer);
    this.remember(id, send ? { response } : {});
    if (call.interactive) {
      const name = call.interactive.toolName;
      const rest = (this.pending[name] ?? []).filter((c) => c !== call.interactive);
      const next: Record<string, readonly InteractiveToolCall[]> = { ...this.pending };
      if (rest.length) next[name] = Object.freeze(rest);
      else delete next[name];
      this.setPending(next);
    }
    if (!send || !response) return Promise.resolve(false);
    return new Promise((resolve) => this.queue(id, response, resolve));
  }

  private remember(id: string, finished: Finished): void {
    this.recent.set(id, finished);
    if (this.recent.size > RECENT_LIMIT) {
      const oldest = this.recent.keys().next().value;
      if (oldest !== undefined) this.recent.delete(oldest);
    }
  }

  // ---- results and progress -------------------------------------------------------------------

  private queue(id: string, response: ClientToolResponse, resolve: (ok: boolean) => void): void {
    const earlier = this.outbox.get(id);
    this.outbox.set(id, {
      response,
      resolve: (ok) => {
        earlier?.resolve(ok);
        resolve(ok);
      },
    });
    if (this.currentState === 'connected' && this.link) void this.send(id);
  }

  private flushOutbox(): void {
    for (const id of [...this.outbox.keys()]) void this.send(id);
  }

  private dropOutbox(): void {
    const waiting = [...this.outbox.values()];
    this.outbox.clear();
    for (const w of waiting) w.resolve(false);
  }

  // Sends one queued result over the live link; keeps it queued while the link is down.
  private async send(id: string): Promise<void> {
    const out = this.outbox.get(id);
    const link = this.link;
    if (!out || !link) return;
    if (link.transport === 'websocket') {
      if (!link.socket || link.socket.readyState !== 1) return;
      this.outbox.delete(id);
      link.socket.send(JSON.stringify({ type: 'result', requestID: id, result: out.response }));
      const finished = this.recent.get(id);
      if (finished) finished.sentOn = link.id;
      out.resolve(true);
      return;
    }
    try {
      await this.http.json(
        'POST',
        '/client-tools/result',
        { requestID: id, clientID: this.clientID, result: out.response },
        { timeout: this.options.connectTimeout, headers: this.credentials.headers() },
      );
      if (this.outbox.get(id) === out) this.outbox.delete(id);
      const finished = this.recent.get(id);
      if (finished) finished.sentOn = link.id;
      out.resolve(true);
    } catch (error) {
      const e = error as SwitchboardError;
      if (e.retryable && this.currentState !== 'closed') {
        // Kept for the next connection; while this one still looks alive, try again shortly.
        if (this.currentState === 'connected') {
          clearTimeout(this.retryTimer);
          this.retryTimer = setTimeout(() => this.flushOutbox(), this.options.reconnectDelay);
        }
        return;
      }
      if (this.outbox.get(id) === out) this.outbox.delete(id);
      // A 409 "already ended (answered...)" after a retry: an earlier attempt got through and
      // only its answer was lost.
      out.resolve(e.code === 'CONFLICT' && /already ended \(answered/.test(e.message));
      // 404/409: the call ended on the server (timeout, cancel, grace) before the answer arrived.
      if (e.code !== 'CONFLICT' && e.code !== 'NOT_FOUND') this.emit('error', e);
    }
  }

  private async sendProgress(
    call: ActiveCall,
    update: { title?: string; metadata?: JSONObject },
  ): Promise<boolean> {
    const id = call.request.requestID;
    if (this.calls.get(id) !== call || !this.link) return false;
    const body: Record<string, unknown> = { requestID: id };
    if (update?.title !== undefined) body.title = update.title;
    if (update?.metadata !== undefined) body.metadata = update.metadata;
    const link = this.link;
    if (link.transport === 'websocket') {
      if (!link.socket || link.socket.readyState !== 1) return false;
      link.socket.send(JSON.stringify({ type: 'progress', ...body }));
      return true;
    }
    try {
      await this.http.json(
        'POST',
        '/client-tools/progress',
        { ...body, clientID: this.clientID },
        { timeout: this.options.connectTimeout, headers: this.credentials.headers() },
      );
      return true;
    } catch {
      return false;
    }
  }
}

/** Turns a handler's return value into the result the server stores. */
export function toResponse(value: unknown): ClientToolResponse {
  if (typeof value === 'string') return { status: 'success', title: '', output: value };
  if (value === undefined || value === null) return { status: 'success', title: '', output: '' };
  if (isPlainObject(value) && typeof value.output === 'string') {
    const out: ClientToolResponse = {
      status: 'success',
      title: typeof value.title === 'string' ? value.title : '',
      output: value.output,
    };
    if (isPlainObject(value.metadata)) out.metadata = value.metadata;
    if (Array.isArray(value.attachments)) out.attachments = value.attachments;
    return out;
  }
  let output: string;
  try {
    output = JSON.stringify(value) ?? String(value);
  } catch {
    output = String(value);
  }
  return { status: 'success', title: '', output };
}

function parseJSON(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function domException(message: string, name: 'AbortError' | 'TimeoutError'): Error {
  return new DOMException(message, name);
}
