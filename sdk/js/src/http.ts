import { SwitchboardError, errorMessage, type ErrorCode } from './errors.js';

export type FetchFunction = typeof fetch;

/** Options shared by everything that talks HTTP to the server. */
export interface HttpOptions {
  /** A fetch implementation; default `globalThis.fetch` (Node 18+, every browser). */
  fetch?: FetchFunction;
  /** Extra headers on every request (e.g. an `Authorization` header for a proxy in front). */
  headers?: Record<string, string>;
  /**
   * The server's password (`server.password`): sent as `Authorization: Bearer` on every request
   * and as the `token` query parameter of WebSockets (which cannot send headers).
   */
  password?: string;
}

/**
 * JSON over fetch against one server. Every failure becomes a SwitchboardError: the server's
 * `{error: {code, message}}` with its status, or NETWORK_ERROR / BAD_RESPONSE / ABORTED.
 */
export class HttpClient {
  readonly baseURL: string;
  readonly password: string | undefined;
  private readonly fetchImpl: FetchFunction;
  private readonly headers: Record<string, string>;

  constructor(baseURL: string, options: HttpOptions = {}) {
    this.baseURL = baseURL.replace(/\/+$/, '');
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== 'function')
      throw new TypeError('no fetch: pass options.fetch (Node 18+ and browsers have a global one)');
    // Called unbound, a browser's fetch throws "Illegal invocation".
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.headers = { ...options.headers };
    this.password = options.password;
    if (options.password !== undefined && !Object.keys(this.headers).some((h) => /^authorization$/i.test(h)))
      this.headers.Authorization = `Bearer ${options.password}`;
  }

  url(path: string): string {
    return this.baseURL + path;
  }

  /**
   * Sends a request and returns the parsed JSON body (undefined for 204). With `timeout`, a
   * request that gets no whole answer in time fails with NETWORK_ERROR (retryable).
   */
  async json<T>(
    method: string,
    path: string,
    body?: unknown,
    options: { signal?: AbortSignal; timeout?: number; headers?: Record<string, string> } = {},
  ): Promise<T> {
    const headers: Record<string, string> = {
      ...this.headers,
      ...options.headers,
      Accept: 'application/json',
    };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const deadline = options.timeout === undefined ? undefined : new AbortController();
    const timer = deadline && setTimeout(() => deadline.abort(), options.timeout);
    const stop = () => deadline?.abort();
    options.signal?.addEventListener('abort', stop, { once: true });
    try {
      const response = await this.raw(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: deadline ? deadline.signal : options.signal,
      });
      if (!response.ok) throw await errorFromResponse(response);
      if (response.status === 204) return undefined as T;
      const text = await readText(response);
      if (text === '') return undefined as T;
      try {
        return JSON.parse(text) as T;
      } catch {
        throw new SwitchboardError(
          'BAD_RESPONSE',
          `${method} ${path}: the server answered ${response.status} with a body that is not JSON: ${text.slice(0, 200)}`,
          response.status,
        );
      }
    } catch (error) {
      if (deadline?.signal.aborted && !options.signal?.aborted)
        throw new SwitchboardError(
          'NETWORK_ERROR',
          `${method} ${this.url(path)}: no answer within ${options.timeout} ms`,
          0,
          { cause: error },
        );
      throw error;
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', stop);
    }
  }

  /** fetch with the common headers; network failures become NETWORK_ERROR, aborts ABORTED. */
  async raw(path: string, init: RequestInit): Promise<Response> {
    const headers = { ...this.headers, ...(init.headers as Record<string, string> | undefined) };
    try {
      return await this.fetchImpl(this.url(path), { ...init, headers });
    } catch (error) {
      throw fetchFailure(error, `${init.method ?? 'GET'} ${this.url(path)}`);
    }
  }
}

async function readText(response: Response): Promise<string> {
  try {
    return await response.text();
  } catch (error) {
    throw fetchFailure(error, `reading the answer of ${response.url}`);
  }
}

export function fetchFailure(error: unknown, what: string): SwitchboardError {
  if (error instanceof SwitchboardError) return error;
  const name = (error as { name?: string } | null)?.name;
  if (name === 'AbortError' || name === 'TimeoutError')
    return new SwitchboardError('ABORTED', `${what}: aborted`, 0, { cause: error });
  const cause = (error as { cause?: unknown } | null)?.cause;
  const detail = cause ? `${errorMessage(error)} (${errorMessage(cause)})` : errorMessage(error);
  return new SwitchboardError('NETWORK_ERROR', `${what}: ${detail}`, 0, { cause: error });
}

/** Turns a non-2xx answer into a SwitchboardError carrying the server's code and message. */
export async function errorFromResponse(response: Response): Promise<SwitchboardError> {
  let text = '';
  try {
    text = await response.text();
  } catch {
    // The status alone still says what happened.
  }
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string } };
    if (body && typeof body.error === 'object' && body.error && typeof body.error.code === 'string')
      return new SwitchboardError(
        body.error.code as ErrorCode,
        body.error.message ?? body.error.code,
        response.status,
      );
  } catch {
    // Not Switchboard's JSON (a proxy's error page, say): report what arrived.
  }
  return new SwitchboardError(
    response.status >= 500 ? 'INTERNAL_ERROR' : 'BAD_RESPONSE',
    `HTTP ${response.status}${text ? `: ${text.slice(0, 200)}` : ''}`,
    response.status,
  );
}
