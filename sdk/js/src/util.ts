/** Resolves after `ms`, or at once (to false) when `signal` aborts first. True when the time passed. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** An id unique enough to name a client: letters, digits and '-' as the server requires. */
export function randomID(prefix: string): string {
  const c = globalThis.crypto;
  const tail =
    c && typeof c.randomUUID === 'function'
      ? c.randomUUID().replace(/-/g, '').slice(0, 16)
      : Math.random().toString(36).slice(2, 12) + Date.now().toString(36);
  return `${prefix}-${tail}`;
}

/** The WebSocket URL for an http(s) base URL. */
export function webSocketURL(baseURL: string, path: string): string {
  return baseURL.replace(/^http(s?):\/\//i, 'ws$1://') + path;
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A client's token (the server issues one on a clientID's first use; later uses must present
 * it): sent with every request that acts as the client, replaced when the server issues one.
 */
export class ClientCredentials {
  constructor(
    public token: string | undefined,
    private readonly onIssued?: (token: string) => void,
  ) {}

  /** The header that carries the token, when there is one. */
  headers(): Record<string, string> {
    return this.token ? { 'X-Switchboard-Client-Token': this.token } : {};
  }

  /** Keeps a token the server issued (a register answer, a stream's header, a WebSocket message). */
  take(token: unknown): void {
    if (typeof token !== 'string' || token === '' || token === this.token) return;
    this.token = token;
    this.onIssued?.(token);
  }
}
