// Revert, unrevert and diff of OpenCode's V1 API with the real @opencode-ai/sdk V1 client: the
// files that `write` and `edit` changed are put back and taken back, the messages stay listed
// until the next prompt deletes them, a revert survives a restart, bad input is refused.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { CASE, HOOK, must, serverFor, startServer, stopServer, v1, waitFor } from './harness.mjs';

// The echo model answers `/call TOOL {json}` by calling that tool, then reports its result.
const config = { provider: { sb: { type: 'scripted' } }, model: 'sb/default', permission: { edit: 'allow', bash: 'ask' } };
const call = (tool, input) => `/call ${tool} ${JSON.stringify(input)}`;

// The status of a request made with the V1 client (bodies and queries as given, wrong or not).
const status = async (answer) => (await answer).response.status;

// The type of every /event frame from now on (`.types`), until `.close()`.
function watchEvents(server) {
  const ac = new AbortController();
  const seen = { types: [], frames: [], close: () => ac.abort() };
  (async () => {
    const res = await fetch(server.url + '/event', { signal: ac.signal });
    const decoder = new TextDecoder();
    let buf = '';
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk, { stream: true });
      let at;
      while ((at = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, at);
        buf = buf.slice(at + 2);
        const data = frame.split('\n').find((l) => l.startsWith('data: '));
        if (!data) continue;
        const e = JSON.parse(data.slice(6));
        seen.types.push(e.type);
        seen.frames.push(e);
      }
    }
  })().catch(() => {});
  return seen;
}

// Three turns: write a.txt, edit it, write b.txt (`dir`/a.txt, ...: each case has files of its
// own). Returns the session and each turn's user message.
async function threeTurns(server, dir) {
  const c = v1(server);
  const s = must(await c.session.create({ body: {} }), 'create');
  const prompts = [
    call('write', { filePath: `${dir}/a.txt`, content: 'one\n' }),
    call('edit', { filePath: `${dir}/a.txt`, oldString: 'one', newString: 'two' }),
    call('write', { filePath: `${dir}/b.txt`, content: 'bee\n' }),
  ];
  const users = [];
  for (const text of prompts) {
    const answer = must(await c.session.prompt({ path: { id: s.id }, body: { parts: [{ type: 'text', text }] } }), 'prompt');
    assert.equal(answer.info.error, undefined, JSON.stringify(answer.info.error));
    const list = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    users.push(list.filter((m) => m.info.role === 'user').at(-1).info.id);
  }
  return { c, s, users };
}

const read = (server, name) => (existsSync(join(server.work, name)) ? readFileSync(join(server.work, name), 'utf8') : undefined);

describe('revert and unrevert with the V1 client', () => {
  const h = serverFor(before, after, config);

  it('puts the files back as before a message, keeps the messages listed, and unrevert takes it back', CASE, async () => {
    const { c, s, users } = await threeTurns(h.server, 't1');
    assert.equal(read(h.server, 't1/a.txt'), 'two\n');
    assert.equal(read(h.server, 't1/b.txt'), 'bee\n');
    const before = must(await c.session.messages({ path: { id: s.id } }), 'messages');

    const events = watchEvents(h.server);
    await waitFor(() => events.types.includes('server.connected'));
    const reverted = must(await c.session.revert({ path: { id: s.id }, body: { messageID: users[1] } }), 'revert');
    assert.equal(reverted.revert.messageID, users[1]);
    assert.match(reverted.revert.diff, /-two\n\+one/);
    assert.equal(read(h.server, 't1/a.txt'), 'one\n');
    assert.equal(read(h.server, 't1/b.txt'), undefined, 'b.txt was created after the point: removed');
    const listed = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    assert.deepEqual(listed.map((m) => m.info.id), before.map((m) => m.info.id), 'the messages stay stored and listed');
    assert.equal(must(await c.session.get({ path: { id: s.id } }), 'get').revert.messageID, users[1]);
    await waitFor(() => events.types.includes('session.updated'));
    assert.ok(events.types.includes('session.diff'));
    assert.equal(events.frames.filter((e) => e.type === 'file.edited').length, 2);

    // What each turn changed, and the whole session as its files are now (without what is undone).
    const first = must(await c.session.diff({ path: { id: s.id }, query: { messageID: users[0] } }), 'diff');
    assert.deepEqual(first.map((d) => [d.file, d.status, d.additions, d.deletions]), [['t1/a.txt', 'added', 1, 0]]);
    assert.match(first[0].patch, /\+one/);
    const second = must(await c.session.diff({ path: { id: s.id }, query: { messageID: users[1] } }), 'diff');
    assert.deepEqual(second.map((d) => [d.file, d.status]), [['t1/a.txt', 'modified']]);
    const whole = must(await c.session.diff({ path: { id: s.id } }), 'diff');
    assert.deepEqual(whole.map((d) => d.file), ['t1/a.txt']);

    // Someone changes a reverted file meanwhile: unrevert puts back what it held all the same.
    writeFileSync(join(h.server.work, 't1/a.txt'), 'changed by hand\n');
    const back = must(await c.session.unrevert({ path: { id: s.id } }), 'unrevert');
    assert.equal(back.revert, undefined);
    assert.equal(read(h.server, 't1/a.txt'), 'two\n');
    assert.equal(read(h.server, 't1/b.txt'), 'bee\n');
    // Nothing reverted: unrevert answers the session as it is.
    const again = must(await c.session.unrevert({ path: { id: s.id } }), 'unrevert');
    assert.equal(again.revert, undefined);
    events.close();
  });

  it('the next prompt deletes the reverted messages for good and leaves the files as reverted', CASE, async () => {
    const { c, s, users } = await threeTurns(h.server, 't2');
    must(await c.session.revert({ path: { id: s.id }, body: { messageID: users[1] } }), 'revert');
    const kept = must(await c.session.messages({ path: { id: s.id } }), 'messages').filter((m) => m.info.id < users[1]);
    const events = watchEvents(h.server);
    await waitFor(() => events.types.includes('server.connected'));
    must(await c.session.prompt({ path: { id: s.id }, body: { parts: [{ type: 'text', text: 'hello again' }] } }), 'prompt');
    const list = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    assert.deepEqual(list.slice(0, kept.length).map((m) => m.info.id), kept.map((m) => m.info.id));
    assert.ok(list.every((m) => m.info.id < users[1] || m.info.id > users[2]), 'the reverted turns are gone');
    assert.equal(list.length, kept.length + 2);
    assert.equal(must(await c.session.get({ path: { id: s.id } }), 'get').revert, undefined);
    assert.equal(read(h.server, 't2/a.txt'), 'one\n');
    assert.equal(read(h.server, 't2/b.txt'), undefined);
    await waitFor(() => events.frames.some((e) => e.type === 'message.removed' && e.properties.messageID === users[1]));
    // Gone for good: unrevert has nothing to take back.
    must(await c.session.unrevert({ path: { id: s.id } }), 'unrevert');
    assert.equal(read(h.server, 't2/a.txt'), 'one\n');
    events.close();
  });

  it('refuses bad input, an unknown session or message, and a revert while a turn runs', CASE, async () => {
    const { c, s, users } = await threeTurns(h.server, 't3');
    const other = must(await c.session.create({ body: {} }), 'create');
    const revert = (id, body) => status(c.session.revert({ path: { id }, body }));
    const cases = [
      [s.id, { messageID: 5 }, 400],
      [s.id, {}, 400],
      [s.id, { messageID: 'abc' }, 400],
      [s.id, { messageID: users[0], partID: 7 }, 400],
      [s.id, { messageID: 'msg_nope' }, 404],
      [other.id, { messageID: users[0] }, 404],
      [s.id, { messageID: users[0], partID: 'prt_nope' }, 404],
      ['ses_nope', { messageID: users[0] }, 404],
    ];
    for (const [id, body, expected] of cases) assert.equal(await revert(id, body), expected, `${id} ${JSON.stringify(body)}`);
    assert.equal(await status(c.session.unrevert({ path: { id: 'ses_nope' } })), 404);
    assert.equal(await status(c.session.diff({ path: { id: 'ses_nope' } })), 404);
    assert.equal(await status(c.session.diff({ path: { id: s.id }, query: { messageID: 'xx' } })), 400);
    assert.equal(await status(c.session.diff({ path: { id: s.id }, query: { messageID: 'msg_nope' } })), 404);
    assert.equal(read(h.server, 't3/a.txt'), 'two\n', 'nothing was reverted');

    // A turn that waits for a permission: the session is busy, revert and unrevert are 409.
    const r = await c.session.promptAsync({ path: { id: s.id }, body: { parts: [{ type: 'text', text: call('bash', { command: 'true', description: 'wait' }) }] } });
    assert.equal(r.response.status, 204);
    await waitFor(async () => must(await c.session.status(), 'status')[s.id] !== undefined);
    assert.equal(await revert(s.id, { messageID: users[0] }), 409);
    assert.equal(await status(c.session.unrevert({ path: { id: s.id } })), 409);
    must(await c.session.abort({ path: { id: s.id } }), 'abort');
    await waitFor(async () => must(await c.session.status(), 'status')[s.id] === undefined);
    assert.equal(read(h.server, 't3/a.txt'), 'two\n');
  });
});

describe('a revert across a restart', () => {
  it('is still there after the server restarts, and unrevert then puts the files back', { timeout: 60000 }, async () => {
    let server = await startServer(config);
    try {
      const { c, s, users } = await threeTurns(server, 't4');
      must(await c.session.revert({ path: { id: s.id }, body: { messageID: users[2] } }), 'revert');
      assert.equal(read(server, 't4/b.txt'), undefined);
      await stopServer(server);
      server = await startServer(config, server.work);
      const c2 = v1(server);
      assert.equal(must(await c2.session.get({ path: { id: s.id } }), 'get').revert.messageID, users[2]);
      must(await c2.session.unrevert({ path: { id: s.id } }), 'unrevert');
      assert.equal(read(server, 't4/b.txt'), 'bee\n');
      assert.equal(read(server, 't4/a.txt'), 'two\n');
    } finally {
      await stopServer(server).catch(() => {});
      server.remove();
    }
  });
});
