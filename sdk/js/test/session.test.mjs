// SwitchboardClient against the real server with its scripted model: sessions, full turns that
// call client tools, the typed event stream, abort, permission replies, typed errors.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { SwitchboardClient, SwitchboardError } from '@switchboard/sdk';

import { gate, noWebSocket, startServer } from './support.mjs';

let server;
let askServer;
before(async () => {
  [server, askServer] = await Promise.all([
    startServer({}),
    // client tools need a person's permission here
    startServer({ permission: { client_tools: 'ask' } }),
  ]);
});
after(async () => {
  await Promise.all([server?.stop(), askServer?.stop()]);
});

let n = 0;
const newClient = (srv = server, options = {}) =>
  new SwitchboardClient(srv.url, { clientID: `js-session-${++n}`, ...options });

const timeTool = {
  description: 'Get the current local time on the client machine',
  parameters: {
    type: 'object',
    properties: { timezone: { type: 'string', description: "Timezone (e.g. 'America/New_York')" } },
  },
};

function toolParts(messages) {
  return messages.flatMap((m) => m.parts).filter((p) => p.type === 'tool');
}
function textOf(message) {
  return message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
}

test('sessions can be created, listed, read and deleted; errors carry the server code', async () => {
  const client = newClient();
  assert.deepEqual((await client.health()).healthy, true);
  const s = await client.session.create({ title: 'sdk test' });
  assert.match(s.id, /^ses_/);
  assert.equal(s.title, 'sdk test');
  assert.equal(s.clientID, client.clientID);
  assert.equal((await client.session.get(s.id)).id, s.id);
  assert.ok((await client.session.list()).some((x) => x.id === s.id));
  assert.equal(await client.session.delete(s.id), true);
  await assert.rejects(client.session.get(s.id), (e) => {
    assert.ok(e instanceof SwitchboardError);
    assert.equal(e.code, 'NOT_FOUND');
    assert.equal(e.status, 404);
    return true;
  });
  await assert.rejects(
    client.session.prompt('ses_missing', { parts: [] }),
    (e) => e.code === 'INVALID_REQUEST' && e.status === 400 && /parts is required/.test(e.message),
  );
});

for (const transport of ['sse', 'websocket']) {
  test(`startSession: the scripted model calls a client tool registered by the SDK (${transport})`, { skip: transport === 'websocket' && noWebSocket }, async () => {
    const client = newClient(server, { clientTools: { transport } });
    let context;
    const { session, prompt, close } = await client.startSession({
      title: 'time',
      tools: {
        get_local_time: {
          ...timeTool,
          handler: async (input, ctx) => {
            context = ctx;
            return { title: `Local time (${input.timezone})`, output: '12:34 in ' + input.timezone };
          },
        },
      },
    });
    try {
      const offered = await client.tools({ sessionID: session.id });
      const id = client.clientTools.toolID('get_local_time');
      assert.ok(offered.some((t) => t.id === id), 'the model is offered the client tool');

      const reply = await prompt(`/call ${id} {"timezone": "Europe/Paris"}`);
      assert.equal(reply.info.role, 'assistant');
      assert.equal(reply.info.sessionID, session.id);
      assert.match(textOf(reply), /12:34 in Europe\/Paris/);
      assert.equal(context.sessionID, session.id);
      assert.equal(context.toolName, 'get_local_time');

      const parts = toolParts(await client.session.messages(session.id));
      assert.equal(parts.length, 1);
      assert.equal(parts[0].tool, id);
      assert.equal(parts[0].state.status, 'completed');
      assert.equal(parts[0].state.output, '12:34 in Europe/Paris');
      assert.equal(parts[0].state.title, 'Local time (Europe/Paris)');
      assert.equal(parts[0].callID, context.callID);
    } finally {
      await close();
    }
    assert.equal(client.clientTools.state, 'closed');
  });
}

test('events resume after the last id: exactly the missed events, then resumed: false for an id too old', async () => {
  const client = newClient();
  const read = async (options, until) => {
    const controller = new AbortController();
    const seen = [];
    for await (const event of client.events({ ...options, signal: controller.signal })) {
      seen.push(event);
      if (until(event, seen)) break;
    }
    controller.abort();
    return seen;
  };
  const first = await read({}, (e) => e.type === 'server.connected');
  assert.deepEqual(first[0].properties, {});
  const witness = client.events();
  assert.equal((await witness.next()).value.type, 'server.connected');  // live before the changes
  const witnessed = [];
  const s1 = await client.session.create({ title: 'one' });
  const s2 = await client.session.create({ title: 'two' });
  for await (const e of witness) {
    witnessed.push(e);
    if (e.type === 'session.created' && e.properties.sessionID === s2.id) break;
  }
  const created = witnessed.filter((e) => e.type === 'session.created');
  assert.equal(created[0].properties.sessionID, s1.id);
  const [a, b] = created.map((e) => BigInt(e.id));
  assert.equal(b, a + 1n);
  // From the id before s1's creation: both creations again, in order, then live.
  const resumed = await read({ lastEventID: String(a - 1n) }, (e, seen) => seen.length === 3);
  assert.deepEqual(resumed[0].properties, { resumed: true });
  assert.deepEqual(resumed.slice(1).map((e) => e.id), created.map((e) => e.id));
  const stale = await read({ lastEventID: '1' }, (e) => e.type === 'server.connected');
  assert.deepEqual(stale[0].properties, { resumed: false });
});

test('promptAsync and the typed event stream follow a turn to idle', async () => {
  const client = newClient();
  const { session, promptAsync, close } = await client.startSession({
    tools: { add: { description: 'adds', handler: (i) => String(i.a + i.b) } },
  });
  const controller = new AbortController();
  const seen = [];
  const stream = (async () => {
    for await (const event of client.events({ signal: controller.signal })) {
      seen.push(event);
      if (event.type === 'session.idle' && event.properties.sessionID === session.id) return;
    }
  })();
  try {
    // Wait for the stream to be live before starting the turn.
    while (!seen.some((e) => e.type === 'server.connected')) await new Promise((r) => setTimeout(r, 10));
    await promptAsync(`/call ${client.clientTools.toolID('add')} {"a": 2, "b": 3}`);
    await stream;
    const types = seen.map((e) => e.type);
    assert.ok(types.includes('client-tool.executing'), types.join());
    assert.ok(types.includes('client-tool.completed'), types.join());
    const busy = seen.find((e) => e.type === 'session.status' && e.properties.sessionID === session.id);
    assert.equal(busy.properties.status.type, 'busy');
    const done = seen.filter(
      (e) => e.type === 'message.part.updated' && e.properties.part.type === 'tool' && e.properties.part.state.status === 'completed',
    );
    assert.equal(done.length, 1);
    assert.equal(done[0].properties.part.state.output, '5');
  } finally {
    controller.abort();
    await close();
  }
});

test('abort() cancels a running client tool: its signal fires and the part ends in error', async () => {
  const client = newClient();
  const started = gate();
  const aborted = gate();
  const { session, promptAsync, abort, close } = await client.startSession({
    tools: {
      wait_forever: {
        description: 'waits',
        handler: (_i, ctx) =>
          new Promise((_, reject) => {
            started.open();
            ctx.signal.addEventListener('abort', () => {
              aborted.open(ctx.signal.reason);
              reject(ctx.signal.reason);
            });
          }),
      },
    },
  });
  try {
    await promptAsync(`/call ${client.clientTools.toolID('wait_forever')} {}`);
    await started.promise;
    assert.equal(await abort(), true);
    const reason = await aborted.promise;
    assert.equal(reason.name, 'AbortError');
    assert.match(reason.message, /Cancelled by the server/);
    let parts;
    for (let i = 0; i < 100; i++) {
      parts = toolParts(await client.session.messages(session.id));
      if (parts[0]?.state.status === 'error') break;
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(parts[0].state.status, 'error');
  } finally {
    await close();
  }
});

test('permission asks for client tools are answered with permission.reply', async () => {
  const client = newClient(askServer);
  let runs = 0;
  const { session, promptAsync, close } = await client.startSession({
    tools: { ping: { description: 'pings', handler: () => `pong ${++runs}` } },
  });
  const controller = new AbortController();
  const id = client.clientTools.toolID('ping');
  try {
    const events = client.events({ signal: controller.signal });
    assert.equal((await events.next()).value.type, 'server.connected');
    const next = async (type) => {
      for (;;) {
        const { value, done } = await events.next();
        if (done) throw new Error(`stream ended before ${type}`);
        if (value.type === type && value.properties.sessionID === session.id) return value;
      }
    };

    await promptAsync(`/call ${id} {}`);
    const asked = await next('permission.asked');
    assert.equal(asked.properties.permission, 'client_tools');
    assert.deepEqual(asked.properties.patterns, [id]);
    assert.ok((await client.permission.list()).some((p) => p.id === asked.properties.id));
    assert.equal(await client.permission.reply(asked.properties.id, 'once'), true);
    await next('session.idle');
    assert.equal(runs, 1);

    await promptAsync(`/call ${id} {}`);
    const again = await next('permission.asked');
    await client.permission.reply(again.properties.id, 'reject', 'not now, thanks');
    await next('session.idle');
    assert.equal(runs, 1, 'a rejected call does not run');
    const parts = toolParts(await client.session.messages(session.id));
    assert.equal(parts.at(-1).state.status, 'error');
    assert.match(parts.at(-1).state.error, /not now, thanks/);

    await assert.rejects(
      client.permission.reply(again.properties.id, 'once'),
      (e) => e instanceof SwitchboardError && e.code === 'NOT_FOUND',
    );
  } finally {
    controller.abort();
    await close();
  }
});

// A turn that waits for a client tool outlives a server restart (docs/api.md, "A restart keeps
// what a turn waits for"): the manager reconnects to the new process, finds that the call is still
// pending there, keeps its handler running (not run twice), and its answer reaches the turn.
test('a turn waiting for an SDK client tool goes on after the server restarts', async () => {
  const srv = await startServer({});
  const client = new SwitchboardClient(srv.url, { clientID: `js-session-${++n}` });
  let runs = 0;
  const started = gate();
  const release = gate();
  const { session, promptAsync, close } = await client.startSession({
    tools: {
      confirm: {
        description: 'asks a person',
        handler: async (_input, ctx) => {
          const run = ++runs;
          started.open();
          // The person answers after the restart.
          await Promise.race([
            release.promise,
            new Promise((_, reject) =>
              ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)),
            ),
          ]);
          return `confirmed on run ${run}`;
        },
      },
    },
  });
  const states = [];
  client.clientTools.on('state', (state) => states.push(state));
  try {
    await promptAsync(`/call ${client.clientTools.toolID('confirm')} {}`);
    await started.promise;
    await srv.restart();
    for (let i = 0; i < 300 && states.at(-1) !== 'connected'; i++)
      await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(states.slice(-2), ['reconnecting', 'connected']);
    release.open();
    let parts = [];
    for (let i = 0; i < 300 && parts[0]?.state.status !== 'completed'; i++) {
      await new Promise((r) => setTimeout(r, 50));
      parts = toolParts(await client.session.messages(session.id));
    }
    assert.equal(parts.length, 1);
    assert.equal(parts[0].state.status, 'completed', JSON.stringify(parts[0]));
    assert.equal(parts[0].state.output, 'confirmed on run 1');
    assert.equal(runs, 1, 'the handler ran again');
    const messages = await client.session.messages(session.id);
    assert.equal(messages.at(-1).info.role, 'assistant');
    assert.equal(messages.at(-1).info.error, undefined, JSON.stringify(messages.at(-1).info));
  } finally {
    await close();
    await srv.stop();
  }
});
