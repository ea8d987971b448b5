// Bad networks: the client's connection is cut (a proxy between the SDK and the server drops it)
// or the server restarts while requests are in flight. Each request is answered exactly once
// after reconnection, or fails cleanly when the server's reconnect grace passes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { ClientToolsManager } from '@switchboard/sdk';

import { call, delay, execute, gate, noWebSocket, startProxy, startServer, waitFor } from './support.mjs';

let server;
let proxy;
before(async () => {
  server = await startServer({ clientTools: { reconnectGrace: 10000 } });
  proxy = await startProxy(server.port);
});
after(async () => {
  await proxy?.close();
  await server?.stop();
});

let n = 0;
function watch(m) {
  const log = { states: [], delays: [], errors: [] };
  m.on('state', (s) => log.states.push(s));
  m.on('reconnect', (_attempt, ms) => log.delays.push(ms));
  m.on('error', (e) => log.errors.push(e));
  return log;
}

for (const transport of ['sse', 'websocket']) {
  describe(`connection cut (${transport})`, { skip: transport === 'websocket' && noWebSocket }, () => {
    test('a call in flight when the connection drops is answered once after reconnection', async () => {
      const m = new ClientToolsManager(`js-cut-${transport}-${++n}`, proxy.url, { transport });
      const log = watch(m);
      const started = gate();
      const release = gate();
      let runs = 0;
      await m.register('work', { description: 'd' }, async () => {
        runs++;
        started.open();
        await release.promise;
        return 'worked through the outage';
      });
      await m.connect();
      proxy.heads.length = 0;
      try {
        const pending = execute(server, m.toolID('work'), {}, { timeout: 20000 });
        await started.promise;
        proxy.down();
        await waitFor(() => m.state === 'reconnecting', 'reconnecting');
        release.open(); // finishes while the connection is down: the answer must wait
        await delay(100);
        proxy.up();
        const r = await pending;
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.equal(r.body.output, 'worked through the outage');
        await waitFor(() => m.state === 'connected', 'connected again');
        assert.equal(runs, 1, 'the handler ran once');
        assert.deepEqual(log.states, ['connecting', 'connected', 'reconnecting', 'connected']);
        assert.equal(log.delays[0], 1000, 'the first retry waits 1 s');
        assert.deepEqual(log.errors, []);
        if (transport === 'sse') {
          const reopened = proxy.heads.filter((h) => h.startsWith('GET /client-tools/pending/'));
          assert.equal(reopened.length, 1, proxy.heads.join('\n---\n'));
          assert.match(reopened[0], /\r\nLast-Event-ID: \d+/i, 'the stream resumes after the last event');
        }
      } finally {
        release.open();
        await m.disconnect();
      }
    });

    test('a request sent while the connection is down is answered once after reconnection', async () => {
      const m = new ClientToolsManager(`js-down-${transport}-${++n}`, proxy.url, { transport });
      const log = watch(m);
      let runs = 0;
      await m.register('later', { description: 'd' }, () => `run ${++runs}`);
      await m.connect();
      try {
        // Answered before the outage, so the SSE stream has a Last-Event-ID to resume from.
        assert.equal((await execute(server, m.toolID('later'))).body.output, 'run 1');
        proxy.down();
        await waitFor(() => m.state === 'reconnecting', 'reconnecting');
        const pending = execute(server, m.toolID('later'), {}, { timeout: 20000 });
        await delay(300);
        proxy.up();
        const r = await pending;
        assert.equal(r.body.output, 'run 2');
        await delay(200);
        assert.equal(runs, 2, 'each request ran once');
        assert.deepEqual(log.errors, []);
      } finally {
        proxy.up();
        await m.disconnect();
      }
    });
  });
}

test('when the outage outlasts the grace, the call fails cleanly and the tools come back', async () => {
  const quick = await startServer({ clientTools: { reconnectGrace: 300 } });
  const quickProxy = await startProxy(quick.port);
  const m = new ClientToolsManager(`js-grace-${++n}`, quickProxy.url);
  const log = watch(m);
  const started = gate();
  const aborted = gate();
  let runs = 0;
  await m.register('work', { description: 'd' }, (_input, ctx) => {
    runs++;
    if (runs > 1) return 'a new call';
    started.open();
    return new Promise((resolve) =>
      ctx.signal.addEventListener('abort', () => {
        aborted.open(ctx.signal.reason);
        resolve('too late');
      }),
    );
  });
  await m.connect();
  try {
    const pending = execute(quick, m.toolID('work'), {}, { timeout: 20000 });
    await started.promise;
    quickProxy.down();
    const r = await pending;
    assert.equal(r.status, 503);
    assert.equal(r.body.error.code, 'UNAVAILABLE');
    assert.equal(r.body.error.message, 'Client disconnected');
    let tools = await call(quick, 'GET', `/client-tools/tools/${m.clientID}`);
    assert.deepEqual(tools.body, [], 'the server dropped the tools after the grace');

    quickProxy.up();
    // Back after the grace: the client learns that its call is over and aborts the handler.
    const reason = await aborted.promise;
    assert.equal(reason.name, 'AbortError');
    assert.match(reason.message, /ended this call while the client was disconnected/);
    await waitFor(() => m.state === 'connected', 'connected again');
    tools = await call(quick, 'GET', `/client-tools/tools/${m.clientID}`);
    assert.deepEqual(tools.body.map((t) => t.id), [m.toolID('work')], 're-registered');
    assert.equal((await execute(quick, m.toolID('work'))).body.output, 'a new call');
    assert.equal(runs, 2);
    assert.deepEqual(log.errors, []);
  } finally {
    await m.disconnect();
    await quickProxy.close();
    await quick.stop();
  }
});

test('reconnection backs off by doubling, then gives up with an error event', async () => {
  const m = new ClientToolsManager(`js-giveup-${++n}`, proxy.url, {
    maxReconnectAttempts: 4,
    reconnectDelay: 50,
    maxReconnectDelay: 150,
  });
  const log = watch(m);
  const started = gate();
  let reason;
  await m.register('hang', { description: 'd' }, (_i, ctx) => {
    started.open();
    return new Promise((resolve) =>
      ctx.signal.addEventListener('abort', () => {
        reason = ctx.signal.reason;
        resolve('');
      }),
    );
  });
  await m.connect();
  const pending = execute(server, m.toolID('hang'), {}, { timeout: 20000 });
  try {
    await started.promise;
    proxy.down();
    await waitFor(() => log.errors.length === 1, 'the error event');
    assert.equal(log.errors[0].code, 'RECONNECT_FAILED');
    assert.match(log.errors[0].message, /after 4 attempts/);
    assert.deepEqual(log.delays, [50, 100, 150, 150]);
    assert.equal(m.state, 'closed');
    assert.deepEqual(log.states, ['connecting', 'connected', 'reconnecting', 'closed']);
    assert.equal(reason.name, 'AbortError');
  } finally {
    proxy.up();
    await m.disconnect();
    await call(
      server,
      'DELETE',
      '/client-tools/unregister',
      { clientID: m.clientID },
      { 'X-Switchboard-Client-Token': m.clientToken },
    );
    await pending;
  }
});

test('after a server restart the client re-registers and answers new requests', async () => {
  const srv = await startServer({});
  const m = new ClientToolsManager(`js-restart-${++n}`, srv.url);
  const log = watch(m);
  let runs = 0;
  await m.register('count', { description: 'd' }, () => `run ${++runs}`);
  await m.connect();
  try {
    // Event ids 1 and 2 on the first server; the restarted one counts from 1 again.
    assert.equal((await execute(srv, m.toolID('count'))).body.output, 'run 1');
    assert.equal((await execute(srv, m.toolID('count'))).body.output, 'run 2');
    await srv.restart();
    await waitFor(() => log.states.at(-1) === 'connected' && log.states.includes('reconnecting'), 'reconnected', 15000);
    const r = await execute(srv, m.toolID('count'));
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.output, 'run 3');
    assert.deepEqual(log.errors, []);
  } finally {
    await m.disconnect();
    await srv.stop();
  }
});
