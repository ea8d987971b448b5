/** The codes the server puts in `{"error": {"code", "message"}}` (docs/api.md, "Errors"). */
export type ServerErrorCode =
  | 'INVALID_REQUEST'
  | 'UNAUTHORIZED'
  | 'FORBIDDEN'
  | 'NOT_FOUND'
  | 'CONFLICT'
  | 'TOO_LARGE'
  | 'RATE_LIMITED'
  | 'INTERNAL_ERROR'
  | 'UNAVAILABLE'
  | 'TIMEOUT';

/**
 * Codes the SDK adds for failures that have no server answer: the network failed, the server
 * answered something that is not Switchboard's JSON, the caller aborted, or reconnection gave up.
 */
export type ClientErrorCode = 'NETWORK_ERROR' | 'BAD_RESPONSE' | 'ABORTED' | 'RECONNECT_FAILED';

export type ErrorCode = ServerErrorCode | ClientErrorCode;

/**
 * Every error the SDK throws or emits. `status` is the HTTP status (0 when there was no HTTP
 * answer), `code` the server's code or one of the SDK's own, `message` the server's message.
 */
export class SwitchboardError extends Error {
  override readonly name = 'SwitchboardError';
  readonly code: ErrorCode;
  readonly status: number;

  constructor(code: ErrorCode, message: string, status = 0, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.status = status;
  }

  /** True for failures worth trying again later: no connection, 5xx, 429. */
  get retryable(): boolean {
    return (
      this.code === 'NETWORK_ERROR' ||
      this.code === 'UNAVAILABLE' ||
      this.code === 'RATE_LIMITED' ||
      this.status >= 500
    );
  }
}

/** The message of anything thrown, for results the model reads. */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  if (typeof error === 'string') return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

export function isAbortError(error: unknown): boolean {
  return (
    (error instanceof Error || (typeof error === 'object' && error !== null && 'name' in error)) &&
    ((error as { name?: string }).name === 'AbortError' ||
      (error as { name?: string }).name === 'TimeoutError' ||
      (error instanceof SwitchboardError && error.code === 'ABORTED'))
  );
}
