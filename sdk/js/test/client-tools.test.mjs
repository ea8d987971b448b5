// ClientToolsManager against the real server, over SSE and over WebSocket.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { ClientToolsManager, SwitchboardError } from '@switchboard/sdk';

import { call, delay, eventLog, execute, gate, noWebSocket, startServer } from './support.mjs';

let server;
before(async () => {
  server = await startServer({ clientTools: { reconnectGrace: 2000 } });
});
after(async () => {
  await server?.stop();
});

let clients = 0;
function manager(transport, options = {}) {
  return new ClientToolsManager(`js-${transport}-${++clients}`, server.url, {
    transport,
    ...options,
  });
}

const echoDef = {
  description: 'Echoes its text',
  parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
};

for (const transport of ['sse', 'websocket']) {
  describe(`client tools over ${transport}`, { skip: transport === 'websocket' && noWebSocket }, () => {
    test('a registered tool answers the server with its result and sees the call context', async () => {
      const m = manager(transport);
      const states = [];
      m.on('state', (s) => states.push(s));
      let seen;
      await m.register('echo', echoDef, async (input, ctx) => {
        seen = { input, ctx };
        return { title: 'Echo', output: `echo: ${input.text}`, metadata: { length: input.text.length } };
      });
      await m.connect();
      try {
        assert.equal(m.state, 'connected');
        const r = await execute(server, m.toolID('echo'), { text: 'hi' }, {
          sessionID: 'ses_x',
          messageID: 'msg_x',
          callID: 'call_x',
        });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.deepEqual(r.body, {
          status: 'success',
          title: 'Echo',
          output: 'echo: hi',
          metadata: { length: 2 },
        });
        assert.deepEqual(seen.input, { text: 'hi' });
        assert.equal(seen.ctx.sessionID, 'ses_x');
        assert.equal(seen.ctx.messageID, 'msg_x');
        assert.equal(seen.ctx.callID, 'call_x');
        assert.equal(seen.ctx.toolCallId, 'call_x');
        assert.equal(seen.ctx.toolName, 'echo');
        assert.match(seen.ctx.requestID, /^req_/);
        assert.equal(seen.ctx.signal.aborted, false);
      } finally {
        await m.disconnect();
      }
      assert.deepEqual(states, ['connecting', 'connected', 'closed']);
      const tools = await call(server, 'GET', `/client-tools/tools/${m.clientID}`);
      assert.deepEqual(tools.body, [], 'disconnect() unregisters the tools');
    });

    test('a string result is the output; other values are sent as JSON', async () => {
      const m = manager(transport);
      await m.register('plain', { description: 'd' }, () => 'just text');
      await m.register('object', { description: 'd' }, () => ({ lat: 1.5, lng: 2 }));
      await m.connect();
      try {
        const a = await execute(server, m.toolID('plain'));
        assert.deepEqual(a.body, { status: 'success', title: '', output: 'just text', metadata: {} });
        const b = await execute(server, m.toolID('object'));
        assert.equal(b.body.output, '{"lat":1.5,"lng":2}');
      } finally {
        await m.disconnect();
      }
    });

    test('a handler that throws sends an error result with its message', async () => {
      const m = manager(transport);
      await m.register('broken', { description: 'd' }, async () => {
        throw new Error('disk on fire');
      });
      await m.connect();
      try {
        const r = await execute(server, m.toolID('broken'));
        assert.equal(r.status, 200);
        assert.deepEqual(r.body, { status: 'error', error: 'disk on fire' });
      } finally {
        await m.disconnect();
      }
    });

    test('a request for a tool the client has no handler for answers "No client handler"', async () => {
      const m = manager(transport);
      await m.register('known', { description: 'd' }, () => 'ok');
      await m.connect();
      try {
        // Registered for this client by someone else with its token (an earlier run of the app, say).
        const reg = await call(
          server,
          'POST',
          '/client-tools/register',
          { clientID: m.clientID, tools: [{ id: 'ghost', description: 'not in this program' }] },
          { 'X-Switchboard-Client-Token': m.clientToken },
        );
        assert.equal(reg.status, 200);
        const r = await execute(server, m.toolID('ghost'));
        assert.deepEqual(r.body, { status: 'error', error: 'No client handler for tool: ghost' });
      } finally {
        await m.disconnect();
      }
    });

    test("the server's cancel aborts the handler's signal", async () => {
      const m = manager(transport);
      const aborted = gate();
      await m.register('slow', { description: 'd' }, (_input, ctx) => {
        return new Promise((_, reject) => {
          ctx.signal.addEventListener('abort', () => {
            aborted.open(ctx.signal.reason);
            reject(ctx.signal.reason);
          });
        });
      });
      const cancels = [];
      m.on('cancel', (id, reason) => cancels.push(reason));
      await m.connect();
      try {
        const r = await execute(server, m.toolID('slow'), {}, { timeout: 300 });
        assert.equal(r.status, 504);
        assert.equal(r.body.error.code, 'TIMEOUT');
        const reason = await aborted.promise;
        assert.equal(reason.name, 'AbortError');
        assert.match(reason.message, /Cancelled by the server: timeout/);
        assert.deepEqual(cancels, ['timeout']);
      } finally {
        await m.disconnect();
      }
    });

    test('the per-call timeout aborts the signal and sends a timeout error', async () => {
      const m = manager(transport, { timeout: 200 });
      let reason;
      await m.register('stuck', { description: 'd' }, (_input, ctx) =>
        new Promise((resolve) => {
          ctx.signal.addEventListener('abort', () => {
            reason = ctx.signal.reason;
            // Too late: the timeout already answered.
            setTimeout(() => resolve('late'), 10);
          });
        }),
      );
      await m.connect();
      try {
        const r = await execute(server, m.toolID('stuck'), {}, { timeout: 5000 });
        assert.deepEqual(r.body, { status: 'error', error: 'Client tool stuck timed out after 200ms' });
        assert.equal(reason.name, 'TimeoutError');
      } finally {
        await m.disconnect();
      }
    });

    test('progress reaches the event stream and extends the deadline', async () => {
      const m = manager(transport);
      await m.register('long', { description: 'd' }, async (_input, ctx) => {
        for (let i = 1; i <= 5; i++) {
          await delay(500);
          assert.equal(await ctx.progress({ title: `step ${i}`, metadata: { step: i } }), true);
        }
        return 'finished';
      });
      await m.connect();
      const events = await eventLog(server);
      try {
        // 2.5 s of work against a 2 s timeout: only the progress reports keep the call alive.
        // A report every 0.5 s leaves 1.5 s for each to arrive (the suite runs under ASan on
        // two shared cores; 0.3 s against 1 s once timed out there).
        const r = await execute(server, m.toolID('long'), {}, { timeout: 2000 });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.output, 'finished');
        const last = await events.next(
          (e) => e.type === 'client-tool.progress' && e.properties.clientID === m.clientID && e.properties.metadata.step === 5,
          'the last progress event',
        );
        assert.equal(last.properties.title, 'step 5');
      } finally {
        events.close();
        await m.disconnect();
      }
    });

    test('registering and unregistering while connected reach the server at once', async () => {
      const m = manager(transport);
      await m.register('first', { description: 'd' }, () => '1');
      await m.connect();
      try {
        await m.register('second', { description: 'second tool' }, () => '2');
        let tools = await call(server, 'GET', `/client-tools/tools/${m.clientID}`);
        assert.deepEqual(tools.body.map((t) => t.id).sort(), [m.toolID('first'), m.toolID('second')]);
        assert.equal((await execute(server, m.toolID('second'))).body.output, '2');
        await m.unregister('first');
        tools = await call(server, 'GET', `/client-tools/tools/${m.clientID}`);
        assert.deepEqual(tools.body.map((t) => t.id), [m.toolID('second')]);
        assert.equal((await execute(server, m.toolID('first'))).status, 404);
      } finally {
        await m.disconnect();
      }
    });

    test("a bad registration rejects with the server's code and message", async () => {
      const m = manager(transport);
      await m.connect();
      try {
        await assert.rejects(
          m.register('bad', { description: 'd', parameters: { type: 'string' } }, () => ''),
          (e) => {
            assert.ok(e instanceof SwitchboardError);
            assert.equal(e.code, 'INVALID_REQUEST');
            assert.equal(e.status, 400);
            assert.match(e.message, /tools\[0\]\.parameters/);
            return true;
          },
        );
        assert.deepEqual(m.toolNames, [], 'the rejected tool is not kept');
      } finally {
        await m.disconnect();
      }
    });

    test('disconnect() aborts running handlers and the call fails with "Client disconnected"', async () => {
      const m = manager(transport);
      const started = gate();
      let reason;
      await m.register('hang', { description: 'd' }, (_input, ctx) => {
        started.open();
        return new Promise((resolve) => {
          ctx.signal.addEventListener('abort', () => {
            reason = ctx.signal.reason;
            resolve('too late');
          });
        });
      });
      await m.connect();
      const pending = execute(server, m.toolID('hang'));
      await started.promise;
      await m.disconnect();
      const r = await pending;
      assert.deepEqual(r.body, { status: 'error', error: 'Client disconnected' });
      assert.equal(reason.name, 'AbortError');
      assert.equal(m.state, 'closed');
    });

    test('connect() to a server that is not there rejects with NETWORK_ERROR', async () => {
      const m = new ClientToolsManager('js-nowhere', 'http://127.0.0.1:9', { transport, connectTimeout: 2000 });
      await m.register('t', { description: 'd' }, () => '');
      await assert.rejects(m.connect(), (e) => e instanceof SwitchboardError && e.code === 'NETWORK_ERROR');
      assert.equal(m.state, 'closed');
    });
  });
}

test('a request queued before the client connects is delivered on connect', async () => {
  // Register (tools exist) but no stream yet: connect() opens it after the request is queued.
  // That registration was the id's first use: the manager gets the token it was issued.
  const clientID = `js-queued-${++clients}`;
  const reg = await call(server, 'POST', '/client-tools/register', {
    clientID,
    tools: [{ id: 'later', description: 'd' }],
  });
  const m = new ClientToolsManager(clientID, server.url, { clientToken: reg.body.clientToken });
  await m.register('later', { description: 'd' }, () => 'delivered');
  const pending = execute(server, m.toolID('later'));
  await delay(100);
  await m.connect();
  try {
    assert.equal((await pending).body.output, 'delivered');
  } finally {
    await m.disconnect();
  }
});

test('bad constructor arguments are refused before anything is sent', () => {
  assert.throws(() => new ClientToolsManager('has space', 'http://x'), /clientID/);
  assert.throws(
    () => new ClientToolsManager('ok', 'http://x', { transport: 'carrier-pigeon' }),
    /transport/,
  );
  const m = new ClientToolsManager('ok', 'http://x');
  return assert.rejects(m.register('bad name', { description: '' }, () => ''), /tool name/);
});

test('no WebSocket constructor gives a clear error', async () => {
  const saved = globalThis.WebSocket;
  try {
    delete globalThis.WebSocket;
    assert.equal(globalThis.WebSocket, undefined);
    const m = new ClientToolsManager('js-nows', server.url, { transport: 'websocket' });
    await assert.rejects(m.connect(), /--experimental-websocket/);
  } finally {
    globalThis.WebSocket = saved;
  }
});
