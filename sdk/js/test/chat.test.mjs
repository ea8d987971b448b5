// The Chat state model (seed 003) against the real server: interactive client tools answered by
// submit() and cancel(), the status a UI shows, messages kept current from the event stream.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { SwitchboardClient } from '@switchboard/sdk';

import { startServer } from './support.mjs';

let server;
before(async () => {
  server = await startServer({});
});
after(async () => {
  await server?.stop();
});

let n = 0;
const newClient = () => new SwitchboardClient(server.url, { clientID: `js-chat-${++n}` });

const confirmTool = {
  description: 'Asks the person to confirm an action',
  parameters: { type: 'object', properties: { action: { type: 'string' } }, required: ['action'] },
  handler: 'interactive',
};

function statuses(chat) {
  const seen = [chat.getState().status];
  chat.subscribe((s) => {
    if (seen.at(-1) !== s.status) seen.push(s.status);
  });
  return seen;
}

function toolPart(state) {
  return state.messages.flatMap((m) => m.parts).find((p) => p.type === 'tool');
}

function lastText(state) {
  const last = state.messages.at(-1);
  return last.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
}

test('an interactive call waits in pendingClientTools until submit(); status shows awaiting-input', async () => {
  const client = newClient();
  const chat = await client.chat({ clientTools: { confirm: confirmTool } });
  const seen = statuses(chat);
  try {
    assert.equal(chat.getState().status, 'idle');
    assert.equal(chat.getState().connection, 'connected');
    const id = client.clientTools.toolID('confirm');
    assert.equal(await chat.send(`/call ${id} {"action": "deploy"}`), true);

    // The request (over the client's WebSocket) and the part's update (over /event) travel on
    // different connections: either may arrive first, so wait for both.
    const waiting = await chat.until(
      (s) => s.pendingClientTools.confirm?.length === 1 && toolPart(s)?.state.status === 'running',
      { timeout: 10000 },
    );
    assert.equal(waiting.status, 'awaiting-input');
    const [call] = waiting.pendingClientTools.confirm;
    assert.equal(call.toolName, 'confirm');
    assert.deepEqual(call.args, { action: 'deploy' });
    assert.equal(call.sessionID, chat.sessionID);
    assert.equal(toolPart(waiting).callID, call.toolCallId);
    assert.equal(toolPart(waiting).state.status, 'running');

    assert.equal(await call.submit({ confirmed: true }), true);
    assert.equal(await call.submit({ confirmed: false }), false, 'a call is answered once');
    const done = await chat.until((s) => s.status === 'idle', { timeout: 10000 });
    assert.deepEqual(done.pendingClientTools, {});
    assert.equal(toolPart(done).state.status, 'completed');
    assert.equal(toolPart(done).state.output, '{"confirmed":true}');
    assert.match(lastText(done), /\{"confirmed":true\}/, 'the model read the result');
    // The person answered at once: the server's awaiting-input status (sent over /event when
    // the call was delivered) may arrive after submit() and show for a moment once more, so the
    // status is checked for its order, not for a single awaiting-input.
    assert.deepEqual(seen.slice(0, 3), ['idle', 'streaming', 'awaiting-input']);
    assert.deepEqual(seen.slice(-2), ['streaming', 'idle']);
    assert.ok(
      seen.slice(2, -1).every((s) => s === 'awaiting-input' || s === 'streaming'),
      `no other status while the call was open: ${seen.join(', ')}`,
    );
  } finally {
    await chat.close();
  }
});

test('cancel(reason) ends the call with the reason, and the model reads it', async () => {
  const client = newClient();
  const chat = await client.chat({ clientTools: { confirm: confirmTool } });
  try {
    await chat.send(`/call ${client.clientTools.toolID('confirm')} {"action": "delete everything"}`);
    const waiting = await chat.until((s) => s.pendingClientTools.confirm?.length === 1, { timeout: 10000 });
    assert.equal(await waiting.pendingClientTools.confirm[0].cancel('User chose not to delete'), true);
    const done = await chat.until((s) => s.status === 'idle', { timeout: 10000 });
    const part = toolPart(done);
    assert.equal(part.state.status, 'error');
    assert.equal(part.state.error, 'User chose not to delete');
    assert.match(lastText(done), /User chose not to delete/);
  } finally {
    await chat.close();
  }
});

test('stop() while a call waits for a person: the call leaves the list and its signal aborts', async () => {
  const client = newClient();
  const chat = await client.chat({ clientTools: { confirm: confirmTool } });
  try {
    await chat.send(`/call ${client.clientTools.toolID('confirm')} {"action": "wait"}`);
    const waiting = await chat.until((s) => s.pendingClientTools.confirm?.length === 1, { timeout: 10000 });
    const call = waiting.pendingClientTools.confirm[0];
    assert.equal(await chat.stop(), true);
    const after = await chat.until((s) => s.status !== 'awaiting-input' && s.status !== 'streaming', {
      timeout: 10000,
    });
    assert.deepEqual(after.pendingClientTools, {});
    assert.equal(call.signal.aborted, true);
    assert.equal(await call.submit('too late'), false);
    assert.equal(toolPart(after).state.status, 'error');
  } finally {
    await chat.close();
  }
});

test('text turns stream into messages; a send while busy fails into state.error', async () => {
  const client = newClient();
  const chat = await client.chat({ clientTools: { confirm: confirmTool } });
  try {
    assert.equal(await chat.send('hello there'), true);
    const done = await chat.until((s) => s.status === 'idle' && s.messages.length === 2, { timeout: 10000 });
    assert.equal(done.messages[0].info.role, 'user');
    assert.equal(done.messages[1].info.role, 'assistant');
    assert.match(lastText(done), /hello there/);

    // A turn waiting for a person keeps the session busy: another send is refused.
    await chat.send(`/call ${client.clientTools.toolID('confirm')} {"action": "x"}`);
    const waiting = await chat.until((s) => s.pendingClientTools.confirm?.length === 1, { timeout: 10000 });
    assert.equal(await chat.send('and another thing'), false);
    assert.equal(chat.getState().error.code, 'CONFLICT');
    assert.equal(chat.getState().status, 'awaiting-input', 'the running turn still decides the status');
    await waiting.pendingClientTools.confirm[0].submit('ok');
    await chat.until((s) => s.status === 'error', { timeout: 10000 });
    // The next successful send clears the error.
    await chat.send('again');
    await chat.until((s) => s.status === 'idle', { timeout: 10000 });
    assert.equal(chat.getState().error, undefined);
  } finally {
    await chat.close();
  }
});

test('a second chat on the same session sees the first one\'s messages', async () => {
  const client = newClient();
  const first = await client.chat({});
  await first.send('remember this');
  await first.until((s) => s.status === 'idle' && s.messages.length === 2, { timeout: 10000 });
  await first.close();
  const other = new SwitchboardClient(server.url, { clientID: `js-chat-${++n}` });
  const second = await other.chat({ sessionID: first.sessionID });
  try {
    const texts = second.getState().messages.map((m) => m.parts.filter((p) => p.type === 'text').map((p) => p.text).join(''));
    assert.match(texts.join('|'), /remember this/);
    assert.equal(second.getState().status, 'idle');
  } finally {
    await second.close();
  }
});

test('a permission ask shows in state.permissions and replyPermission() lets the turn go on', async () => {
  const client = newClient();
  const chat = await client.chat({
    permission: [{ permission: 'client_tools', pattern: '*', action: 'ask' }],
    clientTools: { lookup: { description: 'Looks a word up', handler: (input) => `found ${input.word}` } },
  });
  try {
    const id = client.clientTools.toolID('lookup');
    await chat.send(`/call ${id} {"word": "switchboard"}`);
    const asking = await chat.until((s) => s.permissions.length === 1, { timeout: 10000 });
    assert.equal(asking.status, 'awaiting-input');
    const [ask] = asking.permissions;
    assert.equal(ask.permission, 'client_tools');
    assert.deepEqual(ask.patterns, [id]);
    assert.equal(await chat.replyPermission(ask.id, 'once'), true);
    const done = await chat.until((s) => s.status === 'idle', { timeout: 10000 });
    assert.deepEqual(done.permissions, []);
    assert.equal(toolPart(done).state.output, 'found switchboard');
  } finally {
    await chat.close();
  }
});

test('a question of the question tool shows in state.questions until it is answered', async () => {
  const client = newClient();
  const chat = await client.chat({});
  try {
    const input = { questions: [{ question: 'Which colour?', header: 'Colour', options: [{ label: 'red' }, { label: 'blue' }] }] };
    await chat.send(`/call question ${JSON.stringify(input)}`);
    const asking = await chat.until((s) => s.questions.length === 1, { timeout: 10000 });
    assert.equal(asking.status, 'awaiting-input');
    assert.deepEqual(asking.questions[0].questions, input.questions);
    assert.equal(await client.question.reply(asking.questions[0].id, [['blue']]), true);
    const done = await chat.until((s) => s.status === 'idle', { timeout: 10000 });
    assert.deepEqual(done.questions, []);
    assert.match(toolPart(done).state.output, /"Which colour\?" = "blue"/);
  } finally {
    await chat.close();
  }
});

test("a question of the client's own session can be dismissed by it (the server checks the owner)", async () => {
  const client = newClient();
  const chat = await client.chat({});
  try {
    const input = { questions: [{ question: 'Go on?', options: [{ label: 'yes' }] }] };
    await chat.send(`/call question ${JSON.stringify(input)}`);
    const asking = await chat.until((s) => s.questions.length === 1, { timeout: 10000 });
    // Another program, not this session's client, is refused.
    const stranger = new SwitchboardClient(server.url, { clientID: `js-chat-stranger-${n}` });
    await assert.rejects(stranger.question.reject(asking.questions[0].id), { code: 'FORBIDDEN' });
    assert.equal(await client.question.reject(asking.questions[0].id), true);
    const done = await chat.until((s) => s.status === 'idle', { timeout: 10000 });
    assert.deepEqual(done.questions, []);
    assert.equal(toolPart(done).state.status, 'error');
  } finally {
    await chat.close();
  }
});
