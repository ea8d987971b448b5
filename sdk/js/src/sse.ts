/** One Server-Sent Events frame. `id` is set when the frame carried an `id:` line. */
export interface SSEFrame {
  id?: string;
  event: string;
  data: string;
}

/**
 * Reads SSE frames from a fetch body (the WHATWG event-stream format: `field: value` lines, a
 * blank line ends a frame, `:` starts a comment). A fetch reader rather than EventSource, because
 * EventSource cannot send headers such as Last-Event-ID on the first connection, nor report the
 * HTTP status of a refused one.
 *
 * `onActivity` is called for every chunk of bytes, comments and pings included, so a caller can
 * tell a silent dead connection from a quiet live one.
 */
export async function* readSSE(
  body: ReadableStream<Uint8Array>,
  onActivity?: () => void,
): AsyncGenerator<SSEFrame> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let event = '';
  let data: string[] = [];
  let id: string | undefined;
  let sawData = false;
  try {
    for (let ended = false; !ended; ) {
      const { done, value } = await reader.read();
      if (done) {
        // A CR held back as a possible half of CRLF ends its line after all.
        ended = true;
        buffer += decoder.decode();
      } else {
        onActivity?.();
        buffer += decoder.decode(value, { stream: true });
      }
      let start = 0;
      for (;;) {
        const nl = nextLineEnd(buffer, start);
        if (nl < 0) break;
        const line = buffer.slice(start, nl);
        // A CR at the very end may be the first half of CRLF: wait for the next chunk.
        if (!ended && buffer[nl] === '\r' && nl + 1 === buffer.length) break;
        start = nl + (buffer[nl] === '\r' && buffer[nl + 1] === '\n' ? 2 : 1);
        if (line === '') {
          if (sawData || event) {
            const frame: SSEFrame = { event: event || 'message', data: data.join('\n') };
            if (id !== undefined) frame.id = id;
            yield frame;
          }
          event = '';
          data = [];
          id = undefined;
          sawData = false;
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'data') {
          data.push(value);
          sawData = true;
        } else if (field === 'event') {
          event = value;
        } else if (field === 'id' && !value.includes('\0')) {
          id = value;
        }
      }
      buffer = buffer.slice(start);
    }
  } finally {
    reader.cancel().catch(() => {});
    try {
      reader.releaseLock();
    } catch {
      // Already released by the cancel.
    }
  }
}

function nextLineEnd(text: string, from: number): number {
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 10 || c === 13) return i;
  }
  return -1;
}
