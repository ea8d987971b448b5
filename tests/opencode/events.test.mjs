// The event streams as OpenCode's clients read them: /event (V1 `event.subscribe`) and
// /global/event (V2 `global.event`), frames with ids, sessionID in every session event's
// properties, and a reconnect with Last-Event-ID that gets exactly what it missed.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { CASE, must, scriptedConfig, serverFor, v1, v2, waitFor } from './harness.mjs';

// Events whose properties name their session in OpenCode's schema.
const SESSION_EVENTS = new Set(['session.created', 'session.updated', 'session.deleted', 'session.status', 'session.idle',
  'session.error', 'message.updated', 'message.removed', 'message.part.updated', 'message.part.removed',
  'message.part.delta', 'permission.asked', 'permission.replied', 'question.asked', 'question.replied',
  'question.rejected', 'todo.updated']);

// A raw reader of an SSE stream: `frames` fills with {id, data} as they come; close() ends it.
function openStream(url, headers = {}) {
  const controller = new AbortController();
  const stream = { frames: [], closed: false, close: () => controller.abort() };
  stream.ready = (async () => {
    const res = await fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: controller.signal });
    assert.equal(res.status, 200);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    (async () => {
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          buffer += value;
          const chunks = buffer.split('\n\n');
          buffer = chunks.pop();
          for (const chunk of chunks) {
            let id;
            let data;
            for (const line of chunk.split('\n')) {
              if (line.startsWith('id: ')) id = line.slice(4);
              else if (line.startsWith('data: ')) data = JSON.parse(line.slice(6));
            }
            if (data) stream.frames.push({ id, data });
          }
        }
      } catch {
        // aborted
      }
      stream.closed = true;
    })();
  })();
  return stream;
}

const typeOf = (f) => f.data.payload?.type ?? f.data.type;
const idle = (sessionID) => (f) => typeOf(f) === 'session.idle' && (f.data.payload ?? f.data).properties.sessionID === sessionID;

async function promptAndWait(server, stream, text = 'hi') {
  const c = v1(server);
  const session = must(await c.session.create({ body: {} }), 'session.create');
  must(await c.session.prompt({ path: { id: session.id }, body: { parts: [{ type: 'text', text }] } }), 'session.prompt');
  if (stream) await waitFor(() => stream.frames.some(idle(session.id)), 'session.idle on the stream');
  return session;
}

describe('event streams', () => {
  const h = serverFor(before, after, () => scriptedConfig([{ text: 'hello from switchboard' }]));

  it('V1 event.subscribe: every event has an id, one more than the last, and names its session', CASE, async () => {
    const controller = new AbortController();
    const seen = [];
    const sub = await v1(h.server).event.subscribe({ signal: controller.signal, onSseEvent: (e) => seen.push(e) });
    const events = [];
    const reading = (async () => {
      for await (const e of sub.stream) events.push(e);
    })();
    await waitFor(() => events.length > 0, 'server.connected');
    const session = await promptAndWait(h.server);
    await waitFor(() => events.some((e) => e.type === 'session.idle' && e.properties.sessionID === session.id), 'session.idle');
    controller.abort();
    await reading.catch(() => {});

    assert.equal(events[0].type, 'server.connected');
    const mine = events.filter((e) => SESSION_EVENTS.has(e.type));
    assert.ok(mine.some((e) => e.type === 'session.created'));
    assert.ok(mine.some((e) => e.type === 'message.part.updated'));
    for (const e of mine) assert.equal(e.properties.sessionID, session.id, `${e.type} names its session`);
    const part = mine.find((e) => e.type === 'message.part.updated');
    assert.equal(typeof part.properties.time, 'number');
    // The user's text part has no time (the CLI prints text parts that have time.end).
    const userText = mine.find((e) => e.type === 'message.part.updated' && e.properties.part.text === 'hi');
    assert.ok(userText);
    assert.equal(userText.properties.part.time, undefined);
    const created = mine.find((e) => e.type === 'session.created').properties.info;
    assert.match(created.slug, /^[a-z]+-[a-z]+$/);
    assert.equal(created.projectID, 'global');
    assert.equal(typeof created.version, 'string');
    // Ids: on every bus event (not on server.connected), consecutive.
    const ids = seen.filter((e) => e.data?.type !== 'server.connected').map((e) => BigInt(e.id));
    assert.ok(ids.length >= mine.length);
    for (let i = 1; i < ids.length; i++) assert.equal(ids[i], ids[i - 1] + 1n);
  });

  it('V2 global.event: the same events wrapped as {directory, project, payload}', CASE, async () => {
    const controller = new AbortController();
    const sub = await v2(h.server).global.event({ signal: controller.signal });
    const events = [];
    const reading = (async () => {
      for await (const e of sub.stream) events.push(e);
    })();
    await waitFor(() => events.length > 0, 'server.connected');
    const session = await promptAndWait(h.server);
    await waitFor(() => events.some((e) => e.payload.type === 'session.idle' && e.payload.properties.sessionID === session.id), 'session.idle');
    controller.abort();
    await reading.catch(() => {});
    assert.equal(events[0].payload.type, 'server.connected');
    const mine = events.filter((e) => SESSION_EVENTS.has(e.payload.type));
    assert.ok(mine.length > 3);
    for (const e of mine) {
      assert.equal(e.directory, session.directory);
      assert.equal(e.project, 'global');
      assert.equal(e.payload.properties.sessionID, session.id);
    }
  });

  for (const path of ['/event', '/global/event']) {
    it(`${path}: a reconnect with Last-Event-ID gets exactly the frames it missed`, CASE, async () => {
      const witness = openStream(h.server.url + path); // reads everything, never drops
      const first = openStream(h.server.url + path);
      await Promise.all([witness.ready, first.ready]);
      await promptAndWait(h.server, first);
      const last = first.frames.at(-1).id;
      assert.ok(last);
      first.close();
      await waitFor(() => first.closed, 'the first stream to end');
      const missed = await promptAndWait(h.server, witness, 'while away');

      const again = openStream(h.server.url + path, { 'Last-Event-ID': last });
      await again.ready;
      await waitFor(() => again.frames.some(idle(missed.id)), 'the missed turn replayed');
      const after = await promptAndWait(h.server, again, 'back again');
      await waitFor(() => witness.frames.some(idle(after.id)), 'the witness to see it all');
      witness.close();
      again.close();

      const connected = again.frames[0];
      assert.equal(typeOf(connected), 'server.connected');
      assert.deepEqual((connected.data.payload ?? connected.data).properties, { resumed: true });
      const from = witness.frames.findIndex((f) => f.id === last);
      const expected = witness.frames.slice(from + 1).filter((f) => f.id !== undefined);
      const got = again.frames.slice(1);
      assert.deepEqual(got.map((f) => f.id), expected.map((f) => f.id));
      assert.deepEqual(got.map((f) => f.data), expected.map((f) => f.data));
    });
  }

  it('?lastEventID= resumes as the header does; an id that is not a number is no id', CASE, async () => {
    const s = openStream(h.server.url + '/event');
    await s.ready;
    await promptAndWait(h.server, s);
    s.close();
    const last = s.frames.at(-1).id;
    const byQuery = openStream(`${h.server.url}/event?lastEventID=${last}`);
    await byQuery.ready;
    await waitFor(() => byQuery.frames.length > 0, 'server.connected');
    assert.deepEqual(byQuery.frames[0].data.properties, { resumed: true });
    byQuery.close();
    for (const bad of ['abc', '-1', '1e3', '99999999999999999999999999', '']) {
      const r = openStream(h.server.url + '/event', { 'Last-Event-ID': bad });
      await r.ready;
      await waitFor(() => r.frames.length > 0, 'server.connected');
      assert.deepEqual(r.frames[0].data.properties, {}, `Last-Event-ID ${JSON.stringify(bad)}`);
      r.close();
    }
  });
});

describe('event replay buffer', () => {
  const h = serverFor(before, after, () => scriptedConfig([{ text: 'hello' }], { server: { eventReplayEvents: 3 } }));

  it('an id older than the buffer, or never handed out, gets resumed: false', CASE, async () => {
    const s = openStream(h.server.url + '/event');
    await s.ready;
    await promptAndWait(h.server, s);
    s.close();
    const firstID = s.frames.find((f) => f.id !== undefined).id;
    for (const id of [firstID, '1', String(BigInt(s.frames.at(-1).id) + 1000n)]) {
      const r = openStream(h.server.url + '/event', { 'Last-Event-ID': id });
      await r.ready;
      await waitFor(() => r.frames.length > 0, 'server.connected');
      assert.deepEqual(r.frames[0].data.properties, { resumed: false }, `id ${id}`);
      await new Promise((res) => setTimeout(res, 100));
      assert.equal(r.frames.length, 1, 'nothing replayed');
      r.close();
    }
  });
});
