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
