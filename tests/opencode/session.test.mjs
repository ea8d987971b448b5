// The session operations of OpenCode's V1 API, driven by the real @opencode-ai/sdk V1 and V2
// clients: update, children, one message, ?limit, noReply, fork, the V1 permission reply, shell.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { CASE, HOOK, must, serverFor, startServer, stopServer, v1, v2, waitFor } from './harness.mjs';

// The echo model (a scripted provider without a script): it says the user's text back and
// answers `/call TOOL {json}` by calling that tool.
const config = { provider: { sb: { type: 'scripted' } }, model: 'sb/default', permission: { bash: 'ask' } };

const bashCall = (command) => `/call bash ${JSON.stringify({ command, description: 'test' })}`;

async function raw(server, method, path, body) {
  const res = await fetch(server.url + path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json().catch(() => null) };
}

describe('session operations with the V1 and V2 clients', () => {
  const h = serverFor(before, after, config);
  const create = async (body = {}) => must(await v1(h.server).session.create({ body }), 'create');

  it('noReply stores the user message and runs no turn', CASE, async () => {
    const c = v1(h.server);
    const s = await create();
    const m = must(await c.session.prompt({ path: { id: s.id }, body: { noReply: true, parts: [{ type: 'text', text: 'just a note' }] } }), 'prompt');
    assert.equal(m.info.role, 'user');
    assert.equal(m.parts[0].text, 'just a note');
    const list = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    assert.deepEqual(list.map((x) => x.info.role), ['user']);
    // prompt_async with noReply: 204, the message is stored, nothing runs.
    const r = await c.session.promptAsync({ path: { id: s.id }, body: { noReply: true, parts: [{ type: 'text', text: 'another' }] } });
    assert.equal(r.response.status, 204);
    const after2 = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    assert.deepEqual(after2.map((x) => x.info.role), ['user', 'user']);
    assert.deepEqual(must(await c.session.status(), 'status'), {});
    // The next prompt is answered with both notes in the history.
    const answer = must(await c.session.prompt({ path: { id: s.id }, body: { parts: [{ type: 'text', text: 'now answer' }] } }), 'prompt');
    assert.equal(answer.info.role, 'assistant');
  });

  it('lists the newest N messages with ?limit, reads one message, and refuses bad input', CASE, async () => {
    const c = v1(h.server);
    const s = await create();
    for (const text of ['one', 'two'])
      must(await c.session.prompt({ path: { id: s.id }, body: { parts: [{ type: 'text', text }] } }), 'prompt');
    const all = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    assert.equal(all.length, 4);
    const last2 = must(await c.session.messages({ path: { id: s.id }, query: { limit: 2 } }), 'messages');
    assert.deepEqual(last2.map((m) => m.info.id), all.slice(2).map((m) => m.info.id));
    const zero = must(await c.session.messages({ path: { id: s.id }, query: { limit: 0 } }), 'messages');
    assert.equal(zero.length, 4, 'limit=0 lists all, as OpenCode');
    for (const bad of ['-1', 'x', '1.5']) {
      const r = await raw(h.server, 'GET', `/session/${s.id}/message?limit=${bad}`);
      assert.equal(r.status, 400, bad);
      assert.match(r.body.error.message, /limit/);
    }

    const one = must(await c.session.message({ path: { id: s.id, messageID: all[1].info.id } }), 'message');
    assert.deepEqual(one, all[1]);
    const v2one = must(await v2(h.server).session.message({ sessionID: s.id, messageID: all[0].info.id }), 'v2 message');
    assert.equal(v2one.parts[0].text, 'one');
    const other = await create();
    assert.equal((await c.session.message({ path: { id: other.id, messageID: all[1].info.id } })).response.status, 404, 'a message of another session');
    assert.equal((await c.session.message({ path: { id: s.id, messageID: 'msg_unknown' } })).response.status, 404);
    assert.equal((await c.session.message({ path: { id: 'ses_unknown', messageID: all[1].info.id } })).response.status, 404);
  });

  it('updates the title and archive time (V1 and V2) and publishes session.updated', CASE, async () => {
    const s = await create();
    const events = [];
    const ac = new AbortController();
    const sub = await v1(h.server).event.subscribe({ signal: ac.signal });
    const reading = (async () => {
      for await (const e of sub.stream) events.push(e);
    })().catch(() => {});
    const updated = must(await v1(h.server).session.update({ path: { id: s.id }, body: { title: 'renamed' } }), 'update');
    assert.equal(updated.title, 'renamed');
    assert.equal(updated.time.updated, s.time.updated, 'a new title does not move the session up the list');
    const archived = must(await v2(h.server).session.update({ sessionID: s.id, time: { archived: 1234 } }), 'v2 update');
    assert.equal(archived.time.archived, 1234);
    assert.equal(archived.title, 'renamed');
    const got = must(await v1(h.server).session.get({ path: { id: s.id } }), 'get');
    assert.equal(got.title, 'renamed');
    assert.equal(got.time.archived, 1234);
    await waitFor(() => events.some((e) => e.type === 'session.updated' && e.properties.info.title === 'renamed'), 'session.updated');
    ac.abort();
    await reading;

    assert.equal((await raw(h.server, 'PATCH', `/session/${s.id}`, { title: 5 })).status, 400);
    assert.match((await raw(h.server, 'PATCH', `/session/${s.id}`, { time: { archived: 'x' } })).body.error.message, /time\.archived/);
    assert.equal((await raw(h.server, 'PATCH', '/session/ses_unknown', { title: 'x' })).status, 404);
  });

  it('forks up to a message with new ids, and the fork answers prompts of its own', CASE, async () => {
    const c = v1(h.server);
    const s = await create({ title: 'origin' });
    for (const text of ['first', 'second'])
      must(await c.session.prompt({ path: { id: s.id }, body: { parts: [{ type: 'text', text }] } }), 'prompt');
    const all = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    const fork = must(await c.session.fork({ path: { id: s.id }, body: { messageID: all[2].info.id } }), 'fork');
    assert.equal(fork.title, 'origin (fork #1)');
    assert.equal(fork.parentID, undefined, 'a fork is no child (as OpenCode)');
    const copied = must(await c.session.messages({ path: { id: fork.id } }), 'fork messages');
    assert.deepEqual(copied.map((m) => m.parts.find((p) => p.type === 'text')?.text), ['first', 'Echo: first']);
    for (const m of copied) {
      assert.equal(m.info.sessionID, fork.id);
      assert.ok(!all.some((o) => o.info.id === m.info.id), 'new message ids');
      for (const p of m.parts) assert.equal(p.messageID, m.info.id);
    }
    assert.equal(copied[1].info.parentID, copied[0].info.id, 'the answer points at the copied question');

    const answer = must(await c.session.prompt({ path: { id: fork.id }, body: { parts: [{ type: 'text', text: 'in the fork' }] } }), 'prompt fork');
    assert.match(answer.parts.find((p) => p.type === 'text').text, /in the fork/);
    assert.equal(must(await c.session.messages({ path: { id: s.id } }), 'messages').length, 4, 'the source is unchanged');

    const whole = must(await v2(h.server).session.fork({ sessionID: fork.id }), 'v2 fork');
    assert.equal(whole.title, 'origin (fork #2)');
    assert.equal(must(await c.session.messages({ path: { id: whole.id } }), 'messages').length, 4);

    assert.equal((await c.session.fork({ path: { id: s.id }, body: { messageID: 'msg_unknown' } })).response.status, 404);
    // A long title forks (its number was read with a regex that recursed per character).
    const long = await create({ title: `${'t'.repeat(300000)} (fork #41)` });
    const longFork = must(await c.session.fork({ path: { id: long.id }, body: {} }), 'fork of a long title');
    assert.equal(longFork.title, `${'t'.repeat(300000)} (fork #42)`);
    assert.equal((await c.session.fork({ path: { id: 'ses_unknown' } })).response.status, 404);
    assert.equal((await raw(h.server, 'POST', `/session/${s.id}/fork`, { messageID: 5 })).status, 400);
  });

  it('lists the task tool\'s sub-sessions as children', CASE, async () => {
    const c = v1(h.server);
    const s = await create();
    const input = { description: 'sub work', prompt: 'hello child', subagent_type: 'plan' };
    must(await c.session.prompt({ path: { id: s.id }, body: { parts: [{ type: 'text', text: `/call task ${JSON.stringify(input)}` }] } }), 'prompt');
    const children = must(await c.session.children({ path: { id: s.id } }), 'children');
    assert.equal(children.length, 1);
    assert.equal(children[0].parentID, s.id);
    assert.deepEqual(must(await v2(h.server).session.children({ sessionID: children[0].id }), 'v2 children'), []);
    assert.equal((await c.session.children({ path: { id: 'ses_unknown' } })).response.status, 404);
  });

  it('answers a permission ask through the V1 route, only in its own session', CASE, async () => {
    const c = v1(h.server);
    const s = await create();
    const other = await create();
    await c.session.promptAsync({ path: { id: s.id }, body: { parts: [{ type: 'text', text: bashCall('echo approved-run') }] } });
    const ask = await waitFor(async () => must(await v2(h.server).permission.list(), "permissions").find((p) => p.sessionID === s.id), 'the ask');
    const wrong = await c.postSessionIdPermissionsPermissionId({ path: { id: other.id, permissionID: ask.id }, body: { response: 'once' } });
    assert.equal(wrong.response.status, 404, 'an ask of another session');
    const bad = await raw(h.server, 'POST', `/session/${s.id}/permissions/${ask.id}`, { response: 'maybe' });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error.message, /response/);
    assert.equal(must(await c.postSessionIdPermissionsPermissionId({ path: { id: s.id, permissionID: ask.id }, body: { response: 'once' } }), 'respond'), true);
    await waitFor(async () => {
      const list = must(await c.session.messages({ path: { id: s.id } }), 'messages');
      return list.some((m) => m.parts.some((p) => p.type === 'tool' && p.state.status === 'completed' && /approved-run/.test(p.state.output)));
    }, 'the approved call to complete');
    const again = await c.postSessionIdPermissionsPermissionId({ path: { id: s.id, permissionID: ask.id }, body: { response: 'once' } });
    assert.equal(again.response.status, 404, 'answered already');
    // The V2 client's permission.respond is the same route.
    assert.equal((await v2(h.server).permission.respond({ sessionID: s.id, permissionID: 'per_unknown', response: 'reject' })).response.status, 404);
  });

  it('runs a shell command as the user: stored, seen by the model, 409 while busy', CASE, async () => {
    const c = v1(h.server);
    const s = await create();
    const r = must(await c.session.shell({ path: { id: s.id }, body: { agent: 'build', command: 'echo from-shell; exit 3' } }), 'shell');
    assert.equal(r.info.role, 'assistant');
    const tool = r.parts.find((p) => p.type === 'tool');
    assert.equal(tool.tool, 'bash');
    assert.equal(tool.state.status, 'completed', 'an ask rule does not ask the user about their own command');
    assert.match(tool.state.output, /from-shell/);
    assert.deepEqual(tool.state.input, { command: 'echo from-shell; exit 3' });
    const list = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    assert.deepEqual(list.map((m) => m.info.role), ['user', 'assistant']);
    assert.equal(list[1].info.parentID, list[0].info.id);

    const v2r = must(await v2(h.server).session.shell({ sessionID: s.id, agent: 'build', command: 'pwd' }), 'v2 shell');
    assert.equal(v2r.parts[0].state.output.trim(), h.server.work);

    // Busy: a turn waits for a permission answer.
    await c.session.promptAsync({ path: { id: s.id }, body: { parts: [{ type: 'text', text: bashCall('echo waiting') }] } });
    const ask = await waitFor(async () => must(await v2(h.server).permission.list(), "permissions").find((p) => p.sessionID === s.id), 'the ask');
    assert.equal((await c.session.shell({ path: { id: s.id }, body: { agent: 'build', command: 'true' } })).response.status, 409);
    must(await c.postSessionIdPermissionsPermissionId({ path: { id: s.id, permissionID: ask.id }, body: { response: 'reject' } }), 'reject');

    const denied = await create({ permission: [{ permission: 'bash', pattern: '*', action: 'deny' }] });
    const d = must(await c.session.shell({ path: { id: denied.id }, body: { agent: 'build', command: 'echo no' } }), 'denied shell');
    assert.equal(d.parts[0].state.status, 'error', 'a deny rule holds for the user\'s command too');

    assert.equal((await raw(h.server, 'POST', `/session/${s.id}/shell`, { command: 'true' })).status, 400, 'agent is required');
    assert.equal((await raw(h.server, 'POST', `/session/${s.id}/shell`, { agent: 'nope', command: 'true' })).status, 400);
    assert.equal((await raw(h.server, 'POST', '/session/ses_unknown/shell', { agent: 'build', command: 'true' })).status, 404);
  });

  it('deletes a message or a part, edits a part; share and unshare as OpenCode without sharing', CASE, async () => {
    const c = v1(h.server);
    const s = await create();
    must(await c.session.prompt({ path: { id: s.id }, body: { parts: [{ type: 'text', text: 'keep me' }] } }), 'prompt');
    let list = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    const user = list[0];
    const part = { ...user.parts[0], text: 'edited' };
    const patched = await raw(h.server, 'PATCH', `/session/${s.id}/message/${user.info.id}/part/${part.id}`, part);
    assert.equal(patched.status, 200);
    assert.equal(patched.body.text, 'edited');
    assert.equal((await raw(h.server, 'PATCH', `/session/${s.id}/message/${user.info.id}/part/${part.id}`, { ...part, id: 'prt_other' })).status, 400);
    const assistant = list[1];
    const text = assistant.parts.find((p) => p.type === 'text');
    assert.equal((await raw(h.server, 'DELETE', `/session/${s.id}/message/${assistant.info.id}/part/${text.id}`)).body, true);
    list = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    assert.equal(list[0].parts[0].text, 'edited');
    assert.ok(!list[1].parts.some((p) => p.id === text.id));
    assert.equal(must(await v2(h.server).session.deleteMessage({ sessionID: s.id, messageID: assistant.info.id }), "delete"), true);
    assert.equal(must(await c.session.messages({ path: { id: s.id } }), 'messages').length, 1);
    assert.equal((await raw(h.server, 'DELETE', `/session/${s.id}/message/${assistant.info.id}`)).status, 404);

    assert.equal((await c.session.share({ path: { id: s.id } })).response.status, 500);
    assert.equal(must(await c.session.unshare({ path: { id: s.id } }), 'unshare').id, s.id);
  });
});

describe('summarize and init (the TUI\'s /compact and /init)', () => {
  const h = serverFor(before, after, config);

  it('V1 summarize stores a compaction answered by a summary; V1 init runs the init command', CASE, async () => {
    const c = v1(h.server);
    const s = must(await c.session.create({ body: {} }), 'create');
    must(await c.session.prompt({ path: { id: s.id }, body: { parts: [{ type: 'text', text: 'remember the word tulip' }] } }), 'prompt');
    assert.equal(must(await c.session.summarize({ path: { id: s.id }, body: { providerID: 'sb', modelID: 'default' } }), 'summarize'), true);
    const list = must(await c.session.messages({ path: { id: s.id } }), 'messages');
    assert.deepEqual(list.map((m) => m.info.role), ['user', 'assistant', 'user', 'assistant']);
    assert.deepEqual(list[2].parts.map((p) => [p.type, p.auto]), [['compaction', false]]);
    assert.equal(list[3].info.summary, true);
    assert.equal(list[3].info.mode, 'compaction');
    // The echo model says back what it was asked: the request for a summary.
    assert.match(list[3].parts.find((p) => p.type === 'text').text, /Summarize our conversation/);

    // The V2 client's summarize (sessionID, providerID, modelID, auto).
    assert.equal(must(await v2(h.server).session.summarize({ sessionID: s.id, providerID: 'sb', modelID: 'default', auto: false }), 'v2 summarize'), true);

    const commands = must(await c.command.list(), 'commands');
    assert.ok(commands.some((x) => x.name === 'init'), JSON.stringify(commands));
    assert.equal(must(await c.session.init({ path: { id: s.id }, body: { providerID: 'sb', modelID: 'default', messageID: 'msg_fromtheclient' } }), 'init'), true);
    const last = must(await c.session.messages({ path: { id: s.id } }), 'messages').at(-2);
    assert.equal(last.info.role, 'user');
    assert.match(last.parts[0].text, /AGENTS\.md/);
    // The TUI's /init: the listed command, run through session.command (V2, as the TUI does).
    const ran = must(await v2(h.server).session.command({ sessionID: s.id, command: 'init', arguments: 'keep it short' }), 'v2 command init');
    assert.equal(ran.info.role, 'assistant');
    const asked = must(await c.session.messages({ path: { id: s.id } }), 'messages').at(-2);
    assert.match(asked.parts[0].text, /AGENTS\.md[\s\S]*keep it short$/);
  });
});

describe('fork after a restart', () => {
  it('forks a session the server stored before it stopped', HOOK, async () => {
    let server = await startServer(config);
    let id;
    try {
      const c = v1(server);
      id = must(await c.session.create({ body: {} }), 'create').id;
      must(await c.session.prompt({ path: { id }, body: { parts: [{ type: 'text', text: 'before restart' }] } }), 'prompt');
    } finally {
      await stopServer(server);
    }
    server = await startServer(config, server.work);
    try {
      const c = v1(server);
      const fork = must(await c.session.fork({ path: { id } }), 'fork');
      const copied = must(await c.session.messages({ path: { id: fork.id } }), 'messages');
      assert.equal(copied.length, 2);
      const answer = must(await c.session.prompt({ path: { id: fork.id }, body: { parts: [{ type: 'text', text: 'after restart' }] } }), 'prompt');
      assert.match(answer.parts.find((p) => p.type === 'text').text, /after restart/);
    } finally {
      await stopServer(server);
      server.remove();
    }
  });
});
