// What chat.test.mjs and ws.test.mjs share: a Switchboard server started for a describe block,
// the chat object an app would have (an AbstractChat from the `ai` package with a framework-free
// ChatState), a fetch and a WebSocket that record what went over the wire (so a failure can show
// the chunk sequence the server sent), and small readers of the server's own session API.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

import { AbstractChat } from 'ai';
import WebSocket from 'ws';

import { CASE, HOOK, delay, scriptedConfig, serverFor, startServer, stopServer, waitFor, within } from '../support/server.mjs';

export { CASE, HOOK, delay, scriptedConfig, serverFor, startServer, stopServer, waitFor, within };

// ---- the server ------------------------------------------------------------------------------

// A long text for the slow answers (stop, resume): 40 words.
export const LONG_TEXT = Array.from({ length: 40 }, (_, i) => `word${i + 1}`).join(' ');

// The app's own tool of the client-tool flows (the model is offered it by this name).
export const LOCATION_TOOLS = {
  getLocation: { description: 'The city the user is in', inputSchema: { type: 'object', properties: {} } },
};

// The scripts of the flows both transports play.
export const FLOWS = {
  text: () => scriptedConfig([{ text: 'hello there' }]),
  // The model calls getLocation; the next step reads its output.
  clientTool: () => scriptedConfig([{ toolCalls: [{ tool: 'getLocation', input: {} }] }, { text: 'It is {{lastToolOutput}}' }]),
  // The model runs `command` with bash (permission `action`: allow, ask), then says `then`.
  bash: (command, action, then = 'ran: {{lastToolOutput}}') =>
    scriptedConfig([{ toolCalls: [{ tool: 'bash', input: { command, description: 'run it' } }] }, { text: then }], {
      permission: { bash: action },
    }),
  slow: (chunkDelayMs) => scriptedConfig([{ text: LONG_TEXT, chunkDelayMs }]),
};

// ---- the chat an app has ---------------------------------------------------------------------

// The state a UI framework would keep (what @ai-sdk/react's ChatState does, minus rendering).
export class PlainChatState {
  constructor() {
    this.messages = [];
    this.status = 'ready';
    this.error = undefined;
  }

  pushMessage(message) {
    this.messages = this.messages.concat(message);
  }

  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }

  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), this.snapshot(message), ...this.messages.slice(index + 1)];
  }

  snapshot(thing) {
    return structuredClone(thing);
  }
}

export class Chat extends AbstractChat {
  // `messages`: the chat's history to start from (an app that reloaded its page).
  constructor({ messages, ...options }) {
    const state = new PlainChatState();
    if (messages) state.messages = structuredClone(messages);
    super({ ...options, state });
    this.errors = [];
    const onError = options.onError;
    this.onError = (e) => {
      this.errors.push(e);
      onError?.(e);
    };
  }
}

// The chat is ready and saw no error (`chat.show()` describes it).
export function assertReady(chat) {
  assert.equal(chat.status, 'ready', `the chat is not ready:\n${chat.show()}`);
  assert.equal(chat.error, undefined, chat.show());
  assert.deepEqual(chat.errors.map((e) => e.message), [], chat.show());
}

export const newChatId = (what) => `chat-${what}-${randomUUID().slice(0, 8)}`;

export function assistantMessages(chat) {
  return chat.messages.filter((m) => m.role === 'assistant');
}

export function lastAssistant(chat) {
  const list = assistantMessages(chat);
  return list[list.length - 1];
}

export function partsOfType(message, type) {
  return (message?.parts ?? []).filter((p) => (typeof type === 'function' ? type(p) : p.type === type));
}

export const isToolPart = (p) => p.type === 'dynamic-tool' || p.type.startsWith('tool-');

export function textOf(message) {
  return partsOfType(message, 'text').map((p) => p.text).join('');
}

// The session behind a chat: the `data-session` part the server puts in its answers.
export function sessionOf(chat) {
  for (const m of chat.messages) {
    for (const p of m.parts) if (p.type === 'data-session' && p.data?.sessionID) return p.data.sessionID;
  }
  return undefined;
}

// The chat as a user sees it, for assertion messages.
export function showChat(chat) {
  const parts = (m) =>
    m.parts.map((p) => {
      if (p.type === 'text' || p.type === 'reasoning') return `${p.type}(${p.state}) ${JSON.stringify(p.text)}`;
      if (isToolPart(p)) {
        const extra = { input: p.input, output: p.output, errorText: p.errorText, approval: p.approval, providerExecuted: p.providerExecuted };
        return `${p.type}${p.toolName ? `[${p.toolName}]` : ''}(${p.state}) ${JSON.stringify(extra)}`;
      }
      if (p.type.startsWith('data-')) return `${p.type} ${JSON.stringify(p.data)}`;
      return p.type;
    });
  const lines = [`chat status=${chat.status}${chat.error ? ` error=${chat.error.message}` : ''}`];
  for (const m of chat.messages) lines.push(`  ${m.role} ${m.id}: ${parts(m).join(' | ')}`);
  return lines.join('\n');
}

// Until the chat shows the first words of its answer (fails at once if the chat errs).
export async function untilFirstText(chat, ms = 10000) {
  await waitFor(
    () => {
      if (chat.status === 'error') throw new Error(`the chat failed before any text:\n${chat.show ? chat.show() : showChat(chat)}`);
      return textOf(lastAssistant(chat)).length > 0;
    },
    'the first text delta',
    ms,
    () => (chat.show ? chat.show() : showChat(chat)),
  );
}

// Until the chat is `ready` again after its requests (and any automatic follow-up) ended.
export async function settled(chat, what = 'the chat to be ready', ms = 15000) {
  await delay(20);
  await waitFor(() => chat.status === 'ready' || chat.status === 'error', what, ms, () => showChat(chat));
  await waitFor(() => chat.activeResponse === undefined, `${what} (no active response)`, ms, () => showChat(chat));
}

// ---- what went over the wire ---------------------------------------------------------------------

// Parses SSE text lines into `rec` (`chunks`: the UI message chunks, `done`: `[DONE]` seen).
function sseLineInto(rec, line) {
  rec.lines.push(line);
  if (!line.startsWith('data:')) return;
  const data = line.slice(5).trim();
  if (data === '[DONE]') {
    rec.done = true;
    return;
  }
  try {
    rec.chunks.push(JSON.parse(data));
  } catch {
    rec.chunks.push({ type: '(unparsable)', raw: data });
  }
}

function sseParser(rec) {
  const decoder = new TextDecoder();
  let buf = '';
  return (bytes) => {
    buf += decoder.decode(bytes, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      sseLineInto(rec, buf.slice(0, i).replace(/\r$/, ''));
      buf = buf.slice(i + 1);
    }
  };
}

// A fetch for the transport that records each request: {url, method, body, status, headers,
// chunks, done, ended, error}.
export function recordingFetch() {
  const requests = [];
  const fetchFn = async (url, init = {}) => {
    let body;
    try {
      body = init.body ? JSON.parse(init.body) : undefined;
    } catch {
      body = init.body;
    }
    const rec = { url: String(url), method: init.method ?? 'GET', body, status: 0, headers: undefined, chunks: [], lines: [], done: false, ended: false, error: undefined };
    requests.push(rec);
    const res = await fetch(url, init);
    rec.status = res.status;
    rec.headers = res.headers;
    if (!res.body || [204, 205, 304].includes(res.status)) {
      rec.ended = true;
      return res;
    }
    const parse = sseParser(rec);
    const body2 = res.body.pipeThrough(
      new TransformStream({
        transform(bytes, controller) {
          parse(bytes);
          controller.enqueue(bytes);
        },
        flush() {
          rec.ended = true;
        },
      }),
    );
    return new Response(body2, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  return {
    requests,
    fetch: fetchFn,
    posts: () => requests.filter((r) => r.method === 'POST'),
    show: () => requests.map((r) => `${r.method} ${r.url} -> ${r.status}${r.done ? ' [DONE]' : ''}\n    ${showChunks(r.chunks)}`).join('\n'),
  };
}

// A chunk sequence, compact: `start, text-delta "hello", ...`.
export function showChunks(chunks) {
  return chunks
    .map((c) => {
      const { type, ...rest } = c;
      if (type === 'text-delta' || type === 'reasoning-delta') return `${type} ${JSON.stringify(c.delta)}`;
      if (type === 'start-step' || type === 'finish-step' || type === 'text-start' || type === 'text-end') return type;
      return `${type} ${JSON.stringify(rest)}`;
    })
    .join(', ');
}

// A WebSocket class for WebSocketChatTransport's `webSocket` option that records every frame
// (`frames`: {dir: 'in' | 'out', frame}) and every socket it opened (`sockets`).
export function recordingWebSocket() {
  const sockets = [];
  const frames = [];
  class RecordingWebSocket extends WebSocket {
    constructor(url, protocols) {
      super(url, protocols);
      sockets.push(this);
      this.on('message', (data) => {
        let frame;
        try {
          frame = JSON.parse(data.toString());
        } catch {
          frame = { raw: data.toString() };
        }
        frames.push({ dir: 'in', frame });
      });
    }

    send(data, ...rest) {
      try {
        frames.push({ dir: 'out', frame: JSON.parse(data) });
      } catch {
        frames.push({ dir: 'out', frame: { raw: String(data) } });
      }
      return super.send(data, ...rest);
    }
  }
  return {
    sockets,
    frames,
    WebSocket: RecordingWebSocket,
    out: (type) => frames.filter((f) => f.dir === 'out' && (!type || f.frame.type === type)).map((f) => f.frame),
    in: (type) => frames.filter((f) => f.dir === 'in' && (!type || f.frame.type === type)).map((f) => f.frame),
    show: () =>
      frames
        .map((f) => {
          const fr = f.frame;
          if (f.dir === 'out') return `-> ${fr.type} ${JSON.stringify({ ...fr, messages: fr.messages ? `(${fr.messages.length} messages)` : undefined })}`;
          if (fr.type === 'chunk') return `<- chunk #${fr.sequence} ${showChunks([fr.chunk])}`;
          return `<- ${JSON.stringify(fr)}`;
        })
        .join('\n'),
  };
}

// ---- raw HTTP ------------------------------------------------------------------------------------

// An HTTP answer read whole: {status, headers, body (parsed JSON, else the text), text}.
export async function answer(res) {
  const text = await res.text();
  let body;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = text;
  }
  return { status: res.status, headers: res.headers, body, text };
}

export async function getJson(server, path) {
  const a = await answer(await within(fetch(server.url + path), 10000, `GET ${path}`));
  assert.equal(a.status, 200, `GET ${path}: ${a.status} ${a.text}`);
  return a.body;
}

// Reads an SSE response (a UI message stream) until `pred(rec)` holds (default: to its end).
// Resolves to `rec` = {status, headers, chunks, lines, done ([DONE] seen), ended}; `rec.rest()`
// reads on to the end.
export async function readStream(res, { until = () => false, what = 'the end of the UI message stream', ms = 15000 } = {}) {
  const rec = { status: res.status, headers: res.headers, chunks: [], lines: [], done: false, ended: !res.body };
  if (!res.body) return rec;
  const parse = sseParser(rec);
  const reader = res.body.getReader();
  const readUntil = (pred, label, limit) =>
    within(
      (async () => {
        while (!pred(rec)) {
          const { value, done } = await reader.read();
          if (done) {
            rec.ended = true;
            break;
          }
          parse(value);
        }
      })(),
      limit,
      label,
    );
  await readUntil((r) => r.ended || until(r), what, ms);
  rec.rest = () => readUntil((r) => r.ended, 'the rest of the UI message stream', 15000);
  return rec;
}

export function postChat(server, body, init = {}) {
  return fetch(`${server.url}/api/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...init,
  });
}

export const userMessage = (text, id = `u-${randomUUID().slice(0, 8)}`) => ({ id, role: 'user', parts: [{ type: 'text', text }] });

export const textDeltas = (chunks) => chunks.filter((c) => c.type === 'text-delta').map((c) => c.delta).join('');

export const sessionIdIn = (chunks) => chunks.find((c) => c.type === 'data-session')?.data?.sessionID;

// ---- the server's session API --------------------------------------------------------------------

export async function sessionStatus(server) {
  return getJson(server, '/session/status');
}

export async function storedMessages(server, sessionID) {
  return getJson(server, `/session/${sessionID}/message`);
}

export function showStored(list) {
  return list
    .map((m) => `  ${m.info.role} ${m.info.id}${m.info.error ? ` error=${JSON.stringify(m.info.error)}` : ''}: ${m.parts.map((p) => (p.type === 'text' ? `text ${JSON.stringify(p.text)}` : p.type === 'tool' ? `tool[${p.tool}](${p.state?.status}) ${JSON.stringify(p.state?.output ?? p.state?.error ?? '')}` : p.type)).join(' | ')}`)
    .join('\n');
}

// Until the session is idle (absent from GET /session/status).
export async function untilIdle(server, sessionID, ms = 2000) {
  let last;
  await waitFor(
    async () => {
      last = await sessionStatus(server);
      return !(sessionID in last);
    },
    `session ${sessionID} to be idle`,
    ms,
    () => `GET /session/status: ${JSON.stringify(last)}`,
  );
}


export const sameWords = (a, b) => a.split(/\s+/).filter(Boolean).join(' ') === b.split(/\s+/).filter(Boolean).join(' ');
