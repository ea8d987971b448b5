// The SDK and the server's access rules (docs/security.md): the client token is kept from the
// first use and sent after; a program without it cannot act as the same clientID; sessions are
// owned by their client; the server password reaches every route, stream and WebSocket.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { ClientToolsManager, SwitchboardClient, SwitchboardError } from '@switchboard/sdk';

import { call, execute, noWebSocket, startServer } from './support.mjs';

let n = 0;
const echoDef = {
  description: 'Echoes its text',
  parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
};

let server;
before(async () => {
  server = await startServer({});
});
after(async () => {
  await server?.stop();
});

async function rejectsWith(promise, code) {
  await assert.rejects(promise, (e) => e instanceof SwitchboardError && e.code === code);
}

for (const transport of ['sse', 'websocket']) {
  describe(`client tokens over ${transport}`, { skip: transport === 'websocket' && noWebSocket }, () => {
    test('the first connection gets the token; only a program with it can be the same client', async () => {
      const clientID = `js-token-${transport}-${++n}`;
      const issued = [];
      const first = new ClientToolsManager(clientID, server.url, {
        transport,
        onClientToken: (t) => issued.push(t),
      });
      await first.register('echo', echoDef, (input) => `echo: ${input.text}`);
      await first.connect();
      const token = first.clientToken;
      assert.match(token ?? '', /^sbct_[0-9a-f]{64}$/);
      assert.deepEqual(issued, [token]);
      const r = await execute(server, first.toolID('echo'), { text: 'hi' });
      assert.equal(r.body.output, 'echo: hi');
      await first.disconnect();

      // Another program under the same id, without the token: refused, nothing registered.
      const impostor = new ClientToolsManager(clientID, server.url, { transport, maxReconnectAttempts: 0 });
      await impostor.register('echo', echoDef, () => 'forged');
      await rejectsWith(impostor.connect(), 'UNAUTHORIZED');
      assert.deepEqual((await call(server, 'GET', `/client-tools/tools/${clientID}`)).body, []);

      // The same program on its next run, given its token: accepted, and no new token.
      const again = new ClientToolsManager(clientID, server.url, { transport, clientToken: token });
      await again.register('echo', echoDef, (input) => `again: ${input.text}`);
      await again.connect();
      try {
        assert.equal(again.clientToken, token);
        const r2 = await execute(server, again.toolID('echo'), { text: 'yo' });
        assert.equal(r2.body.output, 'again: yo');
      } finally {
        await again.disconnect();
      }
    });
  });
}

test('a client without tools gets its token from the WebSocket itself', { skip: noWebSocket }, async () => {
  const m = new ClientToolsManager(`js-bare-${++n}`, server.url, { transport: 'websocket' });
  await m.connect();
  try {
    for (let i = 0; i < 50 && !m.clientToken; i++) await new Promise((r) => setTimeout(r, 20));
    assert.match(m.clientToken ?? '', /^sbct_/);
    await m.register('late', echoDef, () => 'late');
    const r = await execute(server, m.toolID('late'), { text: 'x' });
    assert.equal(r.body.output, 'late');
  } finally {
    await m.disconnect();
  }
});

test("a session is its client's: the token from creating it opens the tools, an impostor is refused", async () => {
  const clientID = `js-owner-${++n}`;
  const client = new SwitchboardClient(server.url, { clientID });
  const handle = await client.startSession({
    tools: { echo: { ...echoDef, handler: (input) => `owned: ${input.text}` } },
  });
  try {
    assert.equal(handle.session.clientID, clientID);
    assert.equal('clientToken' in handle.session, false, 'the token is kept, not shown as a session field');
    assert.match(client.clientToken ?? '', /^sbct_/);
    assert.equal(client.clientTools.clientToken, client.clientToken, 'sessions and tools share it');
    const tools = await client.tools({ sessionID: handle.session.id });
    assert.ok(tools.some((t) => t.id === `client_${clientID}_echo`));

    const impostor = new SwitchboardClient(server.url, { clientID });
    await rejectsWith(impostor.session.create(), 'UNAUTHORIZED');
    const other = new SwitchboardClient(server.url);
    const refused = await call(server, 'POST', '/client-tools/register', {
      clientID: other.clientID,
      sessionID: handle.session.id,
      tools: [{ id: 'spy', description: 'd' }],
    });
    assert.equal(refused.status, 403);
    assert.equal(refused.body.error.code, 'FORBIDDEN');
  } finally {
    await handle.close();
  }
});

test('ownSessions: false creates sessions that belong to no client', async () => {
  const client = new SwitchboardClient(server.url, { ownSessions: false });
  const session = await client.session.create({ title: 'shared' });
  assert.equal(session.clientID ?? '', '');
  assert.equal(client.clientToken, undefined, 'no first use of the id yet');
});

describe('a server with a password', () => {
  let locked;
  before(async () => {
    locked = await startServer({ server: { password: 'pw-js' } });
  });
  after(async () => {
    await locked?.stop();
  });

  test('without it every call is UNAUTHORIZED', async () => {
    const client = new SwitchboardClient(locked.url);
    await rejectsWith(client.health(), 'UNAUTHORIZED');
    await rejectsWith(client.session.list(), 'UNAUTHORIZED');
  });

  for (const transport of ['sse', 'websocket']) {
    test(`with it sessions, events and tools over ${transport} work`, { skip: transport === 'websocket' && noWebSocket }, async () => {
      const client = new SwitchboardClient(locked.url, {
        password: 'pw-js',
        clientTools: { transport },
      });
      assert.equal((await client.health()).healthy, true);
      const abort = new AbortController();
      const events = client.events({ signal: abort.signal });
      const first = await events.next();
      assert.equal(first.value.type, 'server.connected');
      abort.abort();
      const handle = await client.startSession({
        tools: { echo: { ...echoDef, handler: (input) => `locked: ${input.text}` } },
      });
      try {
        const r = await call(
          locked,
          'POST',
          '/client-tools/execute',
          { tool: `client_${client.clientID}_echo`, input: { text: 'in' } },
          { Authorization: 'Bearer pw-js' },
        );
        assert.equal(r.body.output, 'locked: in');
      } finally {
        await handle.close();
      }
    });
  }
});
