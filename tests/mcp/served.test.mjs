// The connected clients' tools served over MCP (/client-tools/mcp, docs/mcp.md part 2), driven
// by the real npm MCP clients pinned in package-lock.json: @modelcontextprotocol/sdk 1.32.2
// (legacy, 2025-11-25: initialize + Mcp-Session-Id) and @modelcontextprotocol/client 2.4.0
// (2026-07-28: server/discover, per-request _meta). The test starts `switchboard serve` itself
// (SWITCHBOARD_BIN) and plays the application that registers the tools with plain fetch:
// POST /client-tools/register, the SSE stream GET /client-tools/pending/{clientID}, and
// POST /client-tools/result and /client-tools/progress (docs/api.md).
//
//   SWITCHBOARD_BIN=build/asan/switchboard node --test tests/mcp/served.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startServer, within } from '../support/server.mjs';

import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';

const MCP_PATH = '/client-tools/mcp';
const TOKEN_HEADER = 'X-Switchboard-Client-Token';
// How long the server keeps a dropped client's tools and calls (short: the disconnect case).
const RECONNECT_GRACE_MS = 300;

// Every case ends by itself: a hang is a failure, not a stuck run.
const CASE = { timeout: 30000 };
const HOOK = { timeout: 60000 };

const delay = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the server ------------------------------------------------------------------------------

let server;

// Resolves when `pred()` is truthy (checked every 50 ms); rejects naming `what` after `ms`.
function waitFor(pred, what, ms = 10000) {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const check = () => {
      let v;
      try {
        v = pred();
      } catch (e) {
        return reject(e);
      }
      if (v) return resolve(v);
      if (Date.now() - started > ms) return reject(new Error(`timed out after ${ms} ms waiting for ${what}`));
      setTimeout(check, 50);
    };
    check();
  });
}


// An HTTP answer read whole: {status, headers, body (parsed JSON, else the text), text}.
async function answer(res) {
  const text = await res.text();
  let body;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = text;
  }
  return { status: res.status, headers: res.headers, body, text };
}

// ---- the application that registers tools (the client-tool client), with plain fetch ------------

class ToolClient {
  constructor(clientID) {
    this.clientID = clientID;
    this.token = undefined;
    this.requests = []; // tool-request payloads, in arrival order
    this.cancels = []; // tool-cancel payloads
    this.controller = undefined;
    this.streamEnded = false;
  }

  toolID(name) {
    return `client_${this.clientID}_${name}`;
  }

  headers() {
    const h = { 'Content-Type': 'application/json' };
    if (this.token) h[TOKEN_HEADER] = this.token;
    return h;
  }

  async post(path, body) {
    const res = await fetch(server.url + path, {
      method: 'POST',
      headers: this.headers(),
      body: JSON.stringify(body),
    });
    return answer(res);
  }

  // tools: [{id, description, parameters}]; sessionID binds them to one session.
  async register(tools, sessionID) {
    const body = { clientID: this.clientID, tools };
    if (sessionID) body.sessionID = sessionID;
    const r = await this.post('/client-tools/register', body);
    assert.equal(r.status, 200, `register: ${JSON.stringify(r.body)}`);
    this.token ??= r.body.clientToken ?? r.headers.get(TOKEN_HEADER) ?? undefined;
    assert.ok(this.token, 'the first registration issues a client token');
    return r.body.registered;
  }

  // Opens the request stream; resolves once the server has attached it (headers arrived).
  async connect() {
    this.controller = new AbortController();
    const headers = { Accept: 'text/event-stream' };
    if (this.token) headers[TOKEN_HEADER] = this.token;
    const res = await fetch(`${server.url}/client-tools/pending/${encodeURIComponent(this.clientID)}`, {
      headers,
      signal: this.controller.signal,
    });
    if (res.status !== 200) assert.fail(`pending stream: ${res.status} ${await res.text()}`);
    this.token ??= res.headers.get(TOKEN_HEADER) ?? undefined;
    this.streamEnded = false;
    this.reading = this.read(res.body);
  }

  async read(body) {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of body) {
        buffer += decoder.decode(chunk, { stream: true }).replace(/\r\n?/g, '\n');
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let event = 'message';
          const data = [];
          for (const line of frame.split('\n')) {
            if (line.startsWith(':')) continue;
            const colon = line.indexOf(':');
            const field = colon < 0 ? line : line.slice(0, colon);
            let value = colon < 0 ? '' : line.slice(colon + 1);
            if (value.startsWith(' ')) value = value.slice(1);
            if (field === 'event') event = value;
            else if (field === 'data') data.push(value);
          }
          this.onFrame(event, data.join('\n'));
        }
      }
    } catch {
      // aborted by disconnect(), or the server closed it
    } finally {
      this.streamEnded = true;
    }
  }

  onFrame(event, data) {
    if (event === 'tool-request') this.requests.push(JSON.parse(data));
    else if (event === 'tool-cancel') this.cancels.push(JSON.parse(data));
  }

  // The next request for `tool` (a full id) not yet taken.
  async nextRequest(tool, ms = 10000) {
    const r = await waitFor(
      () => this.requests.find((q) => q.tool === tool && !q.taken),
      `a tool-request for ${tool} at client ${this.clientID}`,
      ms,
    );
    r.taken = true;
    return r;
  }

  cancelOf(requestID, ms = 10000) {
    return waitFor(
      () => this.cancels.find((c) => c.requestID === requestID),
      `a tool-cancel for ${requestID} at client ${this.clientID} (cancels seen: ${JSON.stringify(this.cancels)})`,
      ms,
    );
  }

  async result(requestID, result) {
    const r = await this.post('/client-tools/result', { requestID, clientID: this.clientID, result });
    assert.equal(r.status, 200, `result: ${JSON.stringify(r.body)}`);
  }

  async progress(requestID, title, metadata) {
    const body = { requestID, clientID: this.clientID, title };
    if (metadata) body.metadata = metadata;
    const r = await this.post('/client-tools/progress', body);
    assert.equal(r.status, 200, `progress: ${JSON.stringify(r.body)}`);
  }

  async disconnect() {
    this.controller?.abort();
    await this.reading;
  }
}

const WEATHER = {
  id: 'weather',
  description: 'The weather in a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
};
const SLOW = { id: 'slow', description: 'Reports progress, then answers', parameters: { type: 'object' } };
const SECRET = { id: 'secret', description: 'Only for one session', parameters: { type: 'object' } };

// ---- the MCP hosts ---------------------------------------------------------------------------

// An MCP host (kind 'v1' or 'v2') connected to `path`. onToolsChanged: the host's list_changed
// handler. The host's fetch is recorded: `gets` holds the statuses of its GET requests.
async function connectHost(kind, { path = MCP_PATH, headers = {}, onToolsChanged } = {}) {
  const url = new URL(server.url + path);
  const gets = [];
  const posts = [];
  const recordingFetch = async (input, init) => {
    const res = await fetch(input, init);
    const method = (init?.method ?? 'GET').toUpperCase();
    if (method === 'GET') gets.push(res.status);
    else if (method === 'POST') posts.push(res.status);
    return res;
  };
  const info = { name: `served-test-${kind}`, version: '1.0.0' };
  if (kind === 'v1') {
    const client = new ClientV1(info, { capabilities: {} });
    if (onToolsChanged)
      client.setNotificationHandler(ToolListChangedNotificationSchema, () => onToolsChanged());
    const transport = new TransportV1(url, { requestInit: { headers }, fetch: recordingFetch });
    await client.connect(transport);
    // v1: callTool(params, resultSchema, options).
    const call = (params, opts) => client.callTool(params, undefined, opts);
    return { kind, client, transport, gets, posts, call, close: () => client.close() };
  }
  const options = { versionNegotiation: { mode: 'auto' } };
  if (onToolsChanged)
    options.listChanged = {
      tools: { debounceMs: 0, onChanged: (error, tools) => onToolsChanged(error, tools) },
    };
  const client = new ClientV2(info, options);
  const transport = new TransportV2(url, { requestInit: { headers }, fetch: recordingFetch });
  await client.connect(transport);
  // v2: callTool(params, options).
  const call = (params, opts) => client.callTool(params, opts);
  return { kind, client, transport, gets, posts, call, close: () => client.close() };
}

function textOf(result) {
  return (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

// ---- raw JSON-RPC over HTTP ------------------------------------------------------------------

async function rpc(body, headers = {}, method = 'POST', path = MCP_PATH) {
  const res = await fetch(server.url + path, {
    method,
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      ...headers,
    },
    body: method === 'POST' ? (typeof body === 'string' ? body : JSON.stringify(body)) : undefined,
  });
  return answer(res);
}

const MODERN_META = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': {},
  'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
};

async function rawInitialize() {
  const r = await rpc({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
  });
  assert.equal(r.status, 200, r.text);
  const session = r.headers.get('mcp-session-id');
  assert.ok(session, 'initialize answers with an Mcp-Session-Id');
  return session;
}

const legacyHeaders = (session) => ({ 'Mcp-Session-Id': session, 'MCP-Protocol-Version': '2025-11-25' });

// ---- the cases -------------------------------------------------------------------------------

before(async () => {
  server = await startServer({ clientTools: { reconnectGrace: RECONNECT_GRACE_MS } });
}, HOOK);

after(async () => {
  if (!server) return;
  if (server.child.exitCode === null && server.child.signalCode === null) await server.stop();
  server.remove();
}, HOOK);

for (const kind of ['v1', 'v2']) {
  describe(`MCP host ${kind === 'v1' ? '@modelcontextprotocol/sdk 1.32.2 (2025-11-25)' : '@modelcontextprotocol/client 2.4.0 (2026-07-28)'}`, () => {
    const app = new ToolClient(`app_${kind}`);
    let host;

    before(async () => {
      await app.register([WEATHER, SLOW]);
      // A session-bound tool: for one session's model only, never among the open tools.
      const ses = await fetch(`${server.url}/session`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ title: `bound ${kind}` }),
      });
      const sesBody = await ses.text();
      assert.equal(ses.status, 200, sesBody);
      const sessionID = JSON.parse(sesBody).id;
      await app.register([SECRET], sessionID);
      await app.connect();
      host = await connectHost(kind);
    }, HOOK);

    after(async () => {
      await host?.close().catch(() => {});
      await app.disconnect();
    }, HOOK);

    test('connects in its own era', CASE, () => {
      if (kind === 'v1') {
        assert.equal(host.transport.sessionId?.startsWith('mcp'), true, `session id ${host.transport.sessionId}`);
        assert.equal(host.transport.protocolVersion, '2025-11-25');
      } else {
        assert.equal(host.client.getProtocolEra(), 'modern');
        assert.equal(host.client.getNegotiatedProtocolVersion(), '2026-07-28');
      }
      assert.equal(host.client.getServerVersion()?.name, 'switchboard-client-tools');
      assert.equal(host.client.getServerCapabilities()?.tools?.listChanged, true);
    });

    test('tools/list shows the open tools, not the session-bound one', CASE, async () => {
      const { tools } = await host.client.listTools();
      const names = tools.map((t) => t.name);
      const weather = tools.find((t) => t.name === app.toolID('weather'));
      assert.ok(weather, `weather in ${JSON.stringify(names)}`);
      assert.equal(weather.description, WEATHER.description);
      assert.deepEqual(weather.inputSchema.properties, WEATHER.parameters.properties);
      assert.deepEqual(weather.inputSchema.required, ['city']);
      assert.ok(names.includes(app.toolID('slow')), JSON.stringify(names));
      assert.ok(!names.includes(app.toolID('secret')), `session-bound tool listed: ${JSON.stringify(names)}`);
    });

    test('tools/call returns the client output as text content', CASE, async () => {
      const call = host.client.callTool({ name: app.toolID('weather'), arguments: { city: 'Paris' } });
      const req = await app.nextRequest(app.toolID('weather'));
      assert.deepEqual(req.input, { city: 'Paris' });
      await app.result(req.requestID, { status: 'success', title: 'Weather', output: 'sunny in Paris', metadata: {} });
      const result = await within(call, 10000, 'callTool');
      assert.ok(!result.isError, JSON.stringify(result));
      assert.deepEqual(result.content, [{ type: 'text', text: 'sunny in Paris' }]);
    });

    test('a client error becomes isError with its message', CASE, async () => {
      const call = host.client.callTool({ name: app.toolID('weather'), arguments: { city: 'Atlantis' } });
      const req = await app.nextRequest(app.toolID('weather'));
      await app.result(req.requestID, { status: 'error', error: 'no such city: Atlantis' });
      const result = await within(call, 10000, 'callTool');
      assert.equal(result.isError, true, JSON.stringify(result));
      assert.match(textOf(result), /no such city: Atlantis/);
    });

    test('arguments that fail the schema: isError naming the property, nothing reaches the client', CASE, async () => {
      const before = app.requests.length;
      const result = await within(
        host.client.callTool({ name: app.toolID('weather'), arguments: { city: 42 } }),
        10000,
        'callTool',
      );
      assert.equal(result.isError, true, JSON.stringify(result));
      assert.match(textOf(result), /city/);
      await delay(200);
      assert.equal(app.requests.length, before, 'the invalid call reached the client');
    });

    test('progress: 3 reports arrive as onprogress 1, 2, 3 with their titles', CASE, async () => {
      const seen = [];
      const call = host.call({ name: app.toolID('slow'), arguments: {} }, { onprogress: (p) => seen.push(p) });
      const req = await app.nextRequest(app.toolID('slow'));
      const titles = ['step one', 'step two', 'step three'];
      for (const [i, title] of titles.entries()) {
        await app.progress(req.requestID, title, { step: i + 1 });
        await waitFor(() => seen.length > i, `progress notification ${i + 1} (seen ${JSON.stringify(seen)})`, 5000)
          .catch(() => {});
      }
      await app.result(req.requestID, { status: 'success', output: 'done' });
      const result = await within(call, 10000, 'callTool');
      assert.equal(textOf(result), 'done');
      assert.deepEqual(
        seen.map((p) => ({ progress: p.progress, message: p.message })),
        titles.map((message, i) => ({ progress: i + 1, message })),
      );
    });

    for (const withProgress of [false, true]) {
      test(`cancel: aborting callTool${withProgress ? ' (a progress stream)' : ''} sends the client a tool-cancel`, CASE, async (t) => {
        const abort = new AbortController();
        const options = { signal: abort.signal };
        if (withProgress) options.onprogress = () => {};
        const call = host.call({ name: app.toolID('slow'), arguments: {} }, options);
        const outcome = call.then(
          (r) => ({ resolved: r }),
          (e) => ({ rejected: e }),
        );
        const req = await app.nextRequest(app.toolID('slow'));
        abort.abort(new Error('the user stopped it'));
        const ended = await within(outcome, 5000, 'the aborted callTool');
        assert.ok(ended.rejected, `callTool resolved after abort: ${JSON.stringify(ended.resolved)}`);
        const cancel = await app.cancelOf(req.requestID);
        assert.equal(typeof cancel.reason, 'string');
        t.diagnostic(`tool-cancel reason: ${cancel.reason}`);
        // The call is over on the server: a late result is refused (404/409), not delivered.
        const late = await app.post('/client-tools/result', {
          requestID: req.requestID,
          clientID: app.clientID,
          result: { status: 'success', output: 'too late' },
        });
        assert.ok([404, 409].includes(late.status), `late result: ${late.status} ${JSON.stringify(late.body)}`);
      });
    }

    test('the client disconnecting mid-call gives the host an error result, not a hang', CASE, async (t) => {
      const gone = new ToolClient(`gone_${kind}`);
      await gone.register([{ id: 'stall', description: 'Never answers', parameters: { type: 'object' } }]);
      await gone.connect();
      const call = host.client.callTool({ name: gone.toolID('stall'), arguments: {} });
      const outcome = call.then(
        (r) => ({ resolved: r }),
        (e) => ({ rejected: e }),
      );
      await gone.nextRequest(gone.toolID('stall'));
      await gone.disconnect();
      const ended = await within(outcome, RECONNECT_GRACE_MS + 10000, 'callTool after the client disconnected');
      assert.ok(ended.resolved, `callTool threw instead of an error result: ${ended.rejected}`);
      assert.equal(ended.resolved.isError, true, JSON.stringify(ended.resolved));
      assert.match(textOf(ended.resolved), /disconnect/i);
      t.diagnostic(`host result: ${textOf(ended.resolved)}`);
    });

    test('list_changed: registering a tool while connected fires the host handler', CASE, async () => {
      const changes = [];
      const watcher = await connectHost(kind, {
        onToolsChanged: (error, tools) => changes.push({ error, tools }),
      });
      try {
        if (kind === 'v1') {
          // The v1 transport opens the GET stream itself after notifications/initialized.
          await waitFor(() => watcher.gets.length > 0, 'the v1 host to open its GET stream');
          assert.equal(watcher.gets[0], 200, `GET stream answered ${watcher.gets[0]}`);
        } else {
          // The v2 client opens subscriptions/listen by itself when listChanged is configured
          // (connect() waits for the acknowledgement).
          assert.ok(watcher.client.autoOpenedSubscription, 'v2 opened no subscriptions/listen by itself');
          assert.equal(watcher.client.autoOpenedSubscription.honoredFilter.toolsListChanged, true);
        }
        await delay(100); // the stream is attached on the server
        const late = new ToolClient(`late_${kind}`);
        await late.register([{ id: 'added', description: 'Registered later', parameters: { type: 'object' } }]);
        await waitFor(() => changes.length > 0, 'the host list_changed handler');
        if (kind === 'v2') {
          // v2 refreshes the list itself and hands it over.
          const change = changes.find((c) => c.tools) ?? changes[0];
          assert.equal(change.error, null, String(change.error));
          assert.ok(change.tools.some((t) => t.name === late.toolID('added')), JSON.stringify(change.tools));
        } else {
          const { tools } = await watcher.client.listTools();
          assert.ok(tools.some((t) => t.name === late.toolID('added')));
        }
        // Removing tools is a change too.
        const before = changes.length;
        const r = await fetch(`${server.url}/client-tools/unregister`, {
          method: 'DELETE',
          headers: late.headers(),
          body: JSON.stringify({ clientID: late.clientID }),
        });
        assert.equal(r.status, 200, await r.text());
        await waitFor(() => changes.length > before, 'list_changed after unregister');
      } finally {
        await watcher.close().catch(() => {});
      }
    });

    test('?clientID= with the client token lists only that client tools', CASE, async () => {
      const other = new ToolClient(`other_${kind}`);
      await other.register([{ id: 'mine', description: 'Only mine', parameters: { type: 'object' } }]);
      const own = await connectHost(kind, {
        path: `${MCP_PATH}?clientID=${other.clientID}`,
        headers: { [TOKEN_HEADER]: other.token },
      });
      try {
        const { tools } = await own.client.listTools();
        assert.deepEqual(tools.map((t) => t.name), [other.toolID('mine')]);
        // The open list has it too, beside the others.
        const { tools: open } = await host.client.listTools();
        assert.ok(open.some((t) => t.name === other.toolID('mine')));
        assert.ok(open.some((t) => t.name === app.toolID('weather')));
        // Another client's tool cannot be called through this endpoint.
        const call = await own.client
          .callTool({ name: app.toolID('weather'), arguments: { city: 'Oslo' } })
          .then((r) => ({ resolved: r }), (e) => ({ rejected: e }));
        assert.ok(
          call.rejected ? /Unknown tool/.test(call.rejected.message) : call.resolved.isError,
          `calling another client's tool: ${JSON.stringify(call)}`,
        );
      } finally {
        await own.close().catch(() => {});
      }
    });

    for (const token of ['wrong', undefined]) {
      test(`?clientID= with ${token ? 'a wrong' : 'no'} token: the 401 surfaces as a connect error`, CASE, async () => {
        const headers = token ? { [TOKEN_HEADER]: 'sbct_not_the_token' } : {};
        const attempt = connectHost(kind, { path: `${MCP_PATH}?clientID=${app.clientID}`, headers });
        const ended = await within(
          attempt.then((h) => ({ host: h }), (e) => ({ error: e })),
          10000,
          'connect with a bad token',
        );
        if (ended.host) {
          await ended.host.close().catch(() => {});
          assert.fail(`connected with ${token ? 'a wrong' : 'no'} token; POST statuses ${ended.host.posts}`);
        }
        assert.match(String(ended.error?.message ?? ended.error), /401|unauthori[sz]ed/i);
      });
    }

    if (kind === 'v1') {
      test('terminateSession (DELETE) ends the session: its id then gets 404', CASE, async () => {
        const h = await connectHost('v1');
        const session = h.transport.sessionId;
        await h.transport.terminateSession();
        await h.close();
        const r = await rpc({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} }, legacyHeaders(session));
        assert.equal(r.status, 404, r.text);
      });
    }
  });
}

describe('raw HTTP', () => {
  test('malformed JSON: 400 with a JSON-RPC parse error (id null, -32700)', CASE, async () => {
    const r = await rpc('{"jsonrpc": "2.0", "id": 1, "method": ', { 'MCP-Protocol-Version': '2026-07-28' });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body?.jsonrpc, '2.0', r.text);
    assert.equal(r.body.id, null);
    assert.equal(r.body.error?.code, -32700, r.text);
  });

  test('a legacy request without Mcp-Session-Id: 400', CASE, async () => {
    const r = await rpc({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} }, {
      'MCP-Protocol-Version': '2025-11-25',
    });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body?.error?.code !== undefined, true, r.text);
  });

  test('an unknown session: 404', CASE, async () => {
    const r = await rpc({ jsonrpc: '2.0', id: 3, method: 'tools/list', params: {} }, legacyHeaders('mcp_no_such_session'));
    assert.equal(r.status, 404, r.text);
  });

  test('DELETE of the session: 202, then requests with it get 404', CASE, async () => {
    const session = await rawInitialize();
    const ok = await rpc({ jsonrpc: '2.0', id: 4, method: 'tools/list', params: {} }, legacyHeaders(session));
    assert.equal(ok.status, 200, ok.text);
    assert.ok(Array.isArray(ok.body?.result?.tools), ok.text);
    const del = await rpc(undefined, legacyHeaders(session), 'DELETE');
    assert.equal(del.status, 202, del.text);
    const after = await rpc({ jsonrpc: '2.0', id: 5, method: 'tools/list', params: {} }, legacyHeaders(session));
    assert.equal(after.status, 404, after.text);
    const again = await rpc(undefined, legacyHeaders(session), 'DELETE');
    assert.equal(again.status, 404, again.text);
  });

  test('GET without a session: 405', CASE, async () => {
    const r = await rpc(undefined, { Accept: 'text/event-stream' }, 'GET');
    assert.equal(r.status, 405, r.text);
    assert.match(r.headers.get('allow') ?? '', /POST/);
  });

  test('2026-07-28: MCP-Protocol-Version differing from the _meta version: 400', CASE, async () => {
    const r = await rpc(
      { jsonrpc: '2.0', id: 6, method: 'tools/list', params: { _meta: MODERN_META } },
      { 'MCP-Protocol-Version': '2025-11-25' },
    );
    assert.equal(r.status, 400, r.text);
    assert.equal(r.body?.id, 6, r.text);
    assert.ok(r.body?.error, r.text);
    // The same request with matching versions is served.
    const ok = await rpc(
      { jsonrpc: '2.0', id: 7, method: 'tools/list', params: { _meta: MODERN_META } },
      { 'MCP-Protocol-Version': '2026-07-28' },
    );
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.body?.result?.resultType, 'complete', ok.text);
  });

  test('?clientID= with a wrong token: 401', CASE, async () => {
    const c = new ToolClient('raw_auth');
    await c.register([{ id: 'x', description: 'x', parameters: { type: 'object' } }]);
    const body = { jsonrpc: '2.0', id: 8, method: 'tools/list', params: { _meta: MODERN_META } };
    const headers = { 'MCP-Protocol-Version': '2026-07-28' };
    const wrong = await rpc(body, { ...headers, [TOKEN_HEADER]: 'sbct_wrong' }, 'POST', `${MCP_PATH}?clientID=raw_auth`);
    assert.equal(wrong.status, 401, wrong.text);
    const right = await rpc(body, { ...headers, [TOKEN_HEADER]: c.token }, 'POST', `${MCP_PATH}?clientID=raw_auth`);
    assert.equal(right.status, 200, right.text);
    assert.deepEqual(right.body.result.tools.map((t) => t.name), ['client_raw_auth_x']);
  });
});

test('the server shuts down cleanly (exit 0, no sanitizer report)', CASE, async () => {
  const code = await server.stop();
  assert.doesNotMatch(server.logs, /ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:/, server.logs.slice(-8000));
  assert.equal(code, 0, `server exited with ${code}:\n${server.logs.slice(-8000)}`);
});
