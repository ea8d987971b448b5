// `opencode run --attach URL` with -s, -c, --fork and --format json: the CLI continues and
// forks Switchboard's sessions.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { CASE, jsonLines, must, runAttached, serverFor, v1 } from './harness.mjs';

const RUN = { timeout: 60000 };

describe('opencode run --attach: sessions', () => {
  // It says the user's text back, a moment later: the CLI subscribes to events as it sends the
  // prompt, and an instant answer can be over before its subscription is.
  const echo = Array.from({ length: 40 }, () => ({ delayMs: 300, text: 'Echo: {{lastUserText}}' }));
  const h = serverFor(before, after, { provider: { sb: { type: 'scripted', script: echo } }, model: 'sb/default' });
  const texts = async (id) =>
    must(await v1(h.server).session.messages({ path: { id } }), 'messages').map((m) => m.parts.filter((p) => p.type === 'text').map((p) => p.text).join(''));

  // What the CLI prints races its exit: with --attach it exits when the prompt's answer arrives,
  // and the last events may still be on their way (see the issue 19 report). The sessions it
  // used are read back from the server instead.
  const newest = async () => must(await v1(h.server).session.list(), 'list')[0];

  it('-s ID continues that session, --format json prints its events', RUN, async () => {
    const s = must(await v1(h.server).session.create({ body: {} }), 'create');
    const r = await runAttached(h.server, ['-s', s.id, '--format', 'json', 'first-words']);
    assert.equal(r.code, 0, r.stderr);
    const lines = jsonLines(r.stdout);
    assert.ok(lines.length > 0, r.stdout);
    assert.ok(lines.every((l) => l.sessionID === s.id && l.part?.sessionID === s.id), r.stdout);
    assert.deepEqual(await texts(s.id), ['first-words', 'Echo: first-words']);
  });

  it('-c continues the last session', RUN, async () => {
    const first = await runAttached(h.server, ['start-here']);
    assert.equal(first.code, 0, first.stderr);
    const id = (await newest()).id;
    const r = await runAttached(h.server, ['-c', 'and-go-on']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal((await newest()).id, id, 'no new session');
    assert.deepEqual(await texts(id), ['start-here', 'Echo: start-here', 'and-go-on', 'Echo: and-go-on']);
  });

  it('--fork -s ID and -c --fork answer in a copy, the source unchanged', RUN, async () => {
    const s = must(await v1(h.server).session.create({ body: { title: 'source' } }), 'create');
    must(await v1(h.server).session.prompt({ path: { id: s.id }, body: { parts: [{ type: 'text', text: 'original' }] } }), 'prompt');
    const r = await runAttached(h.server, ['--fork', '-s', s.id, 'in-the-fork']);
    assert.equal(r.code, 0, r.stderr);
    const fork = await newest();
    assert.equal(fork.title, 'source (fork #1)');
    assert.deepEqual(await texts(fork.id), ['original', 'Echo: original', 'in-the-fork', 'Echo: in-the-fork']);
    assert.deepEqual(await texts(s.id), ['original', 'Echo: original']);

    const c = await runAttached(h.server, ['-c', '--fork', 'fork-of-the-last']);
    assert.equal(c.code, 0, c.stderr);
    const lastFork = await newest();
    assert.equal(lastFork.title, 'source (fork #2)', 'a fork of the last session, the first fork');
    assert.deepEqual(await texts(lastFork.id), ['original', 'Echo: original', 'in-the-fork', 'Echo: in-the-fork', 'fork-of-the-last', 'Echo: fork-of-the-last']);
    assert.equal((await texts(fork.id)).length, 4, 'the forked session is unchanged');
  });

  it('-s with an unknown session fails', CASE, async () => {
    const r = await runAttached(h.server, ['-s', 'ses_unknown', 'hello']);
    assert.notEqual(r.code, 0);
  });
});
