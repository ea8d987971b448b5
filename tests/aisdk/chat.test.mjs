// Switchboard's AI SDK chat endpoint (POST /api/chat, issue 18) driven by the real `ai` package
// (7.0.173, pinned in package-lock.json) as a `useChat` app drives it: an AbstractChat with the
// package's DefaultChatTransport, onToolCall + addToolOutput + sendAutomaticallyWhen for client
// tools, addToolApprovalResponse for permission asks, stop, resumeStream and regenerate. Each
// describe block starts its own `switchboard serve` whose scripted model plays that flow
// (docs/providers.md); every chat is a new session, so its script starts at step 0. Checks are
// on what the app's user sees (chat.messages, chat.status) and, where the protocol matters, on
// the chunks the server sent (recorded by the transport's fetch) and the server's own session.
//
//   SWITCHBOARD_BIN=build/asan/switchboard node --test tests/aisdk/chat.test.mjs
import assert from 'node:assert/strict';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from 'ai';

import {
  CASE,
  Chat,
  FLOWS,
  LOCATION_TOOLS,
  LONG_TEXT,
  assertReady,
  answer,
  assistantMessages,
  delay,
  isToolPart,
  lastAssistant,
  newChatId,
  partsOfType,
  postChat,
  readStream,
  recordingFetch,
  sameWords,
  scriptedConfig,
  serverFor,
  sessionIdIn,
  sessionOf,
  sessionStatus,
  settled,
  showChat,
  showChunks,
  showStored,
  startServer,
  stopServer,
  storedMessages,
  textDeltas,
  textOf,
  untilFirstText,
  untilIdle,
  userMessage,
  waitFor,
  within,
} from './harness.mjs';

// A chat object talking to `server` over HTTP, its requests recorded in `chat.wire`.
function httpChat(server, what, { body, ...options } = {}) {
  const wire = recordingFetch();
  const transport = new DefaultChatTransport({ api: `${server.url}/api/chat`, body, fetch: wire.fetch });
  const chat = new Chat({ id: newChatId(what), transport, ...options });
  chat.wire = wire;
  chat.show = () => `${showChat(chat)}\n${wire.show()}`;
  return chat;
}

// onToolCall for the automatic client tools of these tests: answers at once, as an app would
// (not awaited: addToolOutput waits for the chunk being processed, which is this call).
function answerToolsWith(chatRef, outputs, calls) {
  return async ({ toolCall }) => {
    calls?.push(toolCall);
    if (!(toolCall.toolName in outputs)) return;
    chatRef.chat.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output: outputs[toolCall.toolName] });
  };
}

// The assistant message's text part as a user reads it (one text part, done).
function assertOneTextPart(chat, message, expected) {
  const texts = partsOfType(message, 'text');
  assert.equal(texts.length, 1, `one text part expected:\n${chat.show()}`);
  assert.equal(texts[0].text.trim(), expected, chat.show());
  assert.equal(texts[0].state, 'done', chat.show());
}

// ---- 1. a text answer ------------------------------------------------------------------------------

describe('a text answer', () => {
  const h = serverFor(before, after, FLOWS.text());

  test('the assistant message reads "hello there", in a UI message stream', CASE, async () => {
    const chat = httpChat(h.server, 'text');
    await within(chat.sendMessage({ text: 'hi' }), 15000, 'sendMessage');
    assertReady(chat);
    assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
    assertOneTextPart(chat, chat.messages[1], 'hello there');

    const [post] = chat.wire.posts();
    assert.equal(chat.wire.posts().length, 1, chat.show());
    assert.equal(post.status, 200, chat.show());
    assert.equal(post.headers.get('x-vercel-ai-ui-message-stream'), 'v1', chat.show());
    assert.match(post.headers.get('content-type') ?? '', /^text\/event-stream/, chat.show());
    // The server closes the socket when the answer ends: a client told keep-alive could send its
    // next request on it as it closes ("fetch failed").
    assert.equal(post.headers.get('connection'), 'close', chat.show());
    assert.ok(post.done, `the stream does not end with data: [DONE]:\n${chat.show()}`);
    assert.equal(post.lines.filter((l) => l.startsWith('data:')).at(-1), 'data: [DONE]', chat.show());
    const types = post.chunks.map((c) => c.type);
    assert.equal(types[0], 'start', chat.show());
    assert.equal(types.at(-1), 'finish', chat.show());
    for (const t of ['start-step', 'text-start', 'text-delta', 'text-end', 'finish-step'])
      assert.ok(types.includes(t), `no ${t} chunk: ${showChunks(post.chunks)}`);
    assert.ok(types.indexOf('text-start') < types.indexOf('text-delta') && types.lastIndexOf('text-delta') < types.indexOf('text-end'), showChunks(post.chunks));
    assert.equal(textDeltas(post.chunks).trim(), 'hello there', showChunks(post.chunks));

    // The chat's session, named in a data-session part, holds the same two messages.
    const sid = sessionOf(chat);
    assert.ok(sid, `no data-session part with a sessionID:\n${chat.show()}`);
    const dataPart = partsOfType(chat.messages[1], 'data-session')[0];
    assert.equal(dataPart.data.chatID, chat.id, chat.show());
    const stored = await storedMessages(h.server, sid);
    assert.deepEqual(stored.map((m) => m.info.role), ['user', 'assistant'], showStored(stored));
    assert.equal(stored[0].parts.filter((p) => p.type === 'text').map((p) => p.text).join(''), 'hi', showStored(stored));
  });
});

// ---- 2. a server tool -----------------------------------------------------------------------------

describe('a server tool (bash, allowed)', () => {
  const h = serverFor(before, after, FLOWS.bash('echo ran-$((6*7))', 'allow', 'done'));

  test('shows a dynamic-tool part with the output, then the text', CASE, async () => {
    const chat = httpChat(h.server, 'servertool');
    await within(chat.sendMessage({ text: 'run it' }), 15000, 'sendMessage');
    assertReady(chat);
    assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
    const msg = chat.messages[1];
    const tools = partsOfType(msg, isToolPart);
    assert.equal(tools.length, 1, chat.show());
    const [tool] = tools;
    assert.equal(tool.type, 'dynamic-tool', chat.show());
    assert.equal(tool.toolName, 'bash', chat.show());
    assert.equal(tool.state, 'output-available', chat.show());
    assert.equal(tool.providerExecuted, true, chat.show());
    assert.equal(tool.input?.command, 'echo ran-$((6*7))', chat.show());
    assert.match(JSON.stringify(tool.output), /ran-42/, `the output is not the command's:\n${chat.show()}`);
    assertOneTextPart(chat, msg, 'done');
    assert.ok(msg.parts.indexOf(tool) < msg.parts.findIndex((p) => p.type === 'text'), `the text comes before the tool:\n${chat.show()}`);
    assert.equal(chat.wire.posts().length, 1, chat.show());
    const types = chat.wire.posts()[0].chunks.map((c) => c.type);
    for (const t of ['tool-input-start', 'tool-input-available', 'tool-output-available'])
      assert.ok(types.includes(t), `no ${t} chunk:\n${chat.show()}`);
  });
});

describe('a server tool given input it refuses', () => {
  const h = serverFor(
    before,
    after,
    scriptedConfig([{ toolCalls: [{ tool: 'bash', rawInput: '{not json' }] }, { text: 'sorry, my mistake' }], {
      permission: { bash: 'allow' },
    }),
  );

  test('the part ends output-error (tool-input-error) and the model goes on', CASE, async () => {
    const chat = httpChat(h.server, 'badinput');
    await within(chat.sendMessage({ text: 'run it' }), 15000, 'sendMessage');
    assertReady(chat);
    const tools = partsOfType(lastAssistant(chat), isToolPart);
    assert.deepEqual(tools.map((p) => [p.type, p.toolName, p.state]), [['dynamic-tool', 'bash', 'output-error']], chat.show());
    assert.ok(tools[0].errorText, chat.show());
    assert.ok(chat.wire.posts()[0].chunks.some((c) => c.type === 'tool-input-error'), chat.show());
    assertOneTextPart(chat, lastAssistant(chat), 'sorry, my mistake');
  });
});

describe('a model error', () => {
  const h = serverFor(before, after, scriptedConfig([{ error: { status: 400, message: 'the model refused this' } }]));

  test('the chat shows the error (status error) and the session is idle', CASE, async () => {
    const chat = httpChat(h.server, 'modelerror');
    await within(chat.sendMessage({ text: 'hi' }), 15000, 'sendMessage');
    assert.equal(chat.status, 'error', chat.show());
    assert.match(chat.error?.message ?? '', /the model refused this/, chat.show());
    const sid = sessionOf(chat);
    assert.ok(sid, chat.show());
    await untilIdle(h.server, sid, 5000);
  });
});

describe('a chat after a restart', () => {
  const script = [{ text: 'first {{lastUserText}}' }, { text: 'second {{lastUserText}}' }];
  let work;
  after(() => work && rmSync(work, { recursive: true, force: true }));

  test('the same chat id continues the same session', { timeout: 60000 }, async () => {
    const first = await startServer(scriptedConfig(script));
    work = first.work;
    let chat;
    try {
      chat = httpChat(first, 'restart');
      await within(chat.sendMessage({ text: 'one' }), 15000, 'sendMessage');
      assertReady(chat);
    } finally {
      await stopServer(first);
    }
    const sid = sessionOf(chat);
    assert.ok(sid, chat.show());

    const second = await startServer(scriptedConfig(script), work);
    try {
      // The app reloaded: the same chat id and history, a new transport.
      const again = httpChat(second, 'restart', { id: chat.id, messages: chat.messages });
      await within(again.sendMessage({ text: 'two' }), 15000, 'sendMessage after the restart');
      assertReady(again);
      assert.deepEqual(again.messages.map((m) => m.role), ['user', 'assistant', 'user', 'assistant'], again.show());
      assert.equal(textOf(again.messages[3]).trim(), 'second two', `the chat did not find its session:\n${again.show()}`);
      assert.equal(sessionOf({ messages: [again.messages[3]] }), sid, again.show());
      const stored = await storedMessages(second, sid);
      assert.equal(stored.length, 4, showStored(stored));
    } finally {
      await stopServer(second);
    }
  });
});

// ---- 3. an automatic client tool ---------------------------------------------------------------

describe('an automatic client tool (onToolCall + addToolOutput + sendAutomaticallyWhen)', () => {
  const h = serverFor(before, after, FLOWS.clientTool());

  test('the tool runs in the app and the answer uses its output, in two POSTs', CASE, async () => {
    const ref = {};
    const calls = [];
    const chat = httpChat(h.server, 'clienttool', {
      body: { tools: LOCATION_TOOLS },
      onToolCall: answerToolsWith(ref, { getLocation: { city: 'Paris' } }, calls),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    });
    ref.chat = chat;
    await within(chat.sendMessage({ text: 'where am I?' }), 15000, 'sendMessage');
    await settled(chat);
    assertReady(chat);
    assert.equal(calls.length, 1, `onToolCall calls: ${JSON.stringify(calls)}\n${chat.show()}`);
    assert.equal(calls[0].toolName, 'getLocation', chat.show());
    assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
    const msg = chat.messages[1];
    const tools = partsOfType(msg, isToolPart);
    assert.deepEqual(tools.map((p) => [p.type, p.state]), [['tool-getLocation', 'output-available']], chat.show());
    assert.deepEqual(tools[0].output, { city: 'Paris' }, chat.show());
    assert.match(textOf(msg), /^It is .*Paris/, chat.show());

    const posts = chat.wire.posts();
    assert.equal(posts.length, 2, chat.show());
    // The first response stops at the call: input available, no output, finished.
    const first = posts[0].chunks;
    const avail = first.filter((c) => c.type === 'tool-input-available');
    assert.equal(avail.length, 1, chat.show());
    assert.equal(avail[0].toolName, 'getLocation', chat.show());
    assert.ok(!avail[0].providerExecuted, chat.show());
    assert.ok(!first.some((c) => c.type === 'tool-output-available'), chat.show());
    assert.equal(first.at(-1)?.type, 'finish', chat.show());
    assert.ok(posts[0].done && posts[1].done, chat.show());
    assert.match(textDeltas(posts[1].chunks), /Paris/, chat.show());
  });
});

// ---- 4. an interactive client tool, answered later -------------------------------------------

describe('an interactive client tool', () => {
  const h = serverFor(
    before,
    after,
    scriptedConfig([
      { toolCalls: [{ tool: 'askUser', input: { question: 'Which colour?' } }] },
      { text: 'You chose {{lastToolOutput}}' },
    ]),
  );

  test('the stream ends with the call waiting (awaiting-input), the answer finishes the turn', CASE, async () => {
    const chat = httpChat(h.server, 'interactive', {
      body: {
        tools: {
          askUser: {
            description: 'Asks the person a question',
            inputSchema: { type: 'object', properties: { question: { type: 'string' } }, required: ['question'] },
            interactive: true,
          },
        },
      },
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    });
    await within(chat.sendMessage({ text: 'ask me' }), 15000, 'sendMessage');
    assertReady(chat);
    const tool = partsOfType(lastAssistant(chat), isToolPart);
    assert.deepEqual(tool.map((p) => [p.type, p.state]), [['tool-askUser', 'input-available']], chat.show());
    assert.deepEqual(tool[0].input, { question: 'Which colour?' }, chat.show());
    assert.equal(chat.wire.posts().length, 1, chat.show());
    assert.ok(chat.wire.posts()[0].done, chat.show());

    await delay(300);
    const sid = sessionOf(chat);
    assert.ok(sid, `no data-session part:\n${chat.show()}`);
    const st = await sessionStatus(h.server);
    assert.equal(st[sid]?.type, 'awaiting-input', `GET /session/status: ${JSON.stringify(st)}`);

    await chat.addToolOutput({ tool: 'askUser', toolCallId: tool[0].toolCallId, output: { answer: 'blue' } });
    await waitFor(() => chat.wire.posts().length === 2, 'the POST with the output', 5000, chat.show);
    await settled(chat, 'the continuation');
    assertReady(chat);
    assert.equal(chat.wire.posts().length, 2, chat.show());
    assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
    const msg = chat.messages[1];
    assert.deepEqual(partsOfType(msg, isToolPart).map((p) => [p.type, p.state]), [['tool-askUser', 'output-available']], chat.show());
    assert.match(textOf(msg), /^You chose .*blue/, chat.show());
    await untilIdle(h.server, sid);
  });
});

// ---- 5. approvals ---------------------------------------------------------------------------------

describe('permission asks as tool approvals (bash: ask)', () => {
  const h = serverFor(before, after, FLOWS.bash('echo approved-$((6*7)) > ran.txt; cat ran.txt', 'ask'));

  // Sends the prompt; the answer stops at the approval request. Returns [chat, part].
  async function untilApprovalRequested(what) {
    const chat = httpChat(h.server, what, { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
    await within(chat.sendMessage({ text: 'run it' }), 15000, 'sendMessage');
    assertReady(chat);
    const tools = partsOfType(lastAssistant(chat), isToolPart);
    assert.equal(tools.length, 1, chat.show());
    assert.equal(tools[0].toolName ?? tools[0].type, 'bash', chat.show());
    assert.equal(tools[0].state, 'approval-requested', chat.show());
    assert.equal(typeof tools[0].approval?.id, 'string', chat.show());
    const first = chat.wire.posts()[0];
    assert.ok(first.chunks.some((c) => c.type === 'tool-approval-request' && c.approvalId === tools[0].approval.id), chat.show());
    assert.ok(first.done, chat.show());
    assert.ok(!existsSync(join(h.server.work, 'ran.txt')), 'the command ran before it was approved');
    return [chat, tools[0]];
  }

  test('approved: bash runs and its output is shown', CASE, async () => {
    const [chat, part] = await untilApprovalRequested('approve');
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
    await waitFor(() => chat.wire.posts().length === 2, 'the POST with the approval', 5000, chat.show);
    await settled(chat, 'the approved turn');
    assertReady(chat);
    assert.equal(chat.wire.posts().length, 2, chat.show());
    assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
    const tools = partsOfType(chat.messages[1], isToolPart);
    assert.deepEqual(tools.map((p) => p.state), ['output-available'], chat.show());
    assert.match(JSON.stringify(tools[0].output), /approved-42/, chat.show());
    assert.match(textOf(chat.messages[1]), /ran: .*approved-42/, chat.show());
    assert.ok(existsSync(join(h.server.work, 'ran.txt')), 'the approved command did not run in the project directory');
    rmSync(join(h.server.work, 'ran.txt')); // for the denied case
  });

  test('denied with a reason: the part ends output-denied and the command never runs', CASE, async () => {
    const [chat, part] = await untilApprovalRequested('deny');
    const sid = sessionOf(chat);
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: false, reason: 'not this command' });
    await waitFor(() => chat.wire.posts().length === 2, 'the POST with the denial', 5000, chat.show);
    await settled(chat, 'the denied turn');
    assertReady(chat);
    assert.equal(chat.wire.posts().length, 2, chat.show());
    const tools = partsOfType(lastAssistant(chat), isToolPart);
    assert.deepEqual(tools.map((p) => p.state), ['output-denied'], chat.show());
    assert.equal(assistantMessages(chat).length, 1, chat.show());
    await untilIdle(h.server, sid, 5000);
    assert.ok(!existsSync(join(h.server.work, 'ran.txt')), 'the denied command ran');
    const stored = await storedMessages(h.server, sid);
    const storedTools = stored.flatMap((m) => m.parts.filter((p) => p.type === 'tool'));
    assert.equal(storedTools.length, 1, showStored(stored));
    assert.equal(storedTools[0].state?.status, 'error', showStored(stored));
    assert.match(JSON.stringify(storedTools[0].state), /not this command/, `the reason is not the rejection message:\n${showStored(stored)}`);
  });
});

// ---- 6. stop mid-stream -----------------------------------------------------------------------------

describe('stop() mid-stream', () => {
  const h = serverFor(before, after, FLOWS.slow(100));

  test('aborts the turn: the session is idle and the answer is marked aborted', CASE, async () => {
    const chat = httpChat(h.server, 'stop');
    const sent = chat.sendMessage({ text: 'talk' });
    await untilFirstText(chat);
    await within(chat.stop(), 5000, 'stop()');
    await within(sent, 5000, 'sendMessage after stop()');
    assertReady(chat);
    const shown = textOf(lastAssistant(chat));
    assert.ok(shown.split(/\s+/).filter(Boolean).length < 40, `the whole answer arrived before stop():\n${chat.show()}`);
    const sid = sessionOf(chat);
    assert.ok(sid, `no data-session part before the first text delta:\n${chat.show()}`);
    await untilIdle(h.server, sid, 2000);
    await delay(300);
    assert.equal(textOf(lastAssistant(chat)), shown, 'the text grew after stop()');
    const stored = await storedMessages(h.server, sid);
    assert.deepEqual(stored.map((m) => m.info.role), ['user', 'assistant'], showStored(stored));
    assert.equal(stored[1].info.error?.name, 'MessageAbortedError', showStored(stored));
  });
});

// ---- 7. resume --------------------------------------------------------------------------------------

describe('resumable chats: GET/DELETE /api/chat/{id}/stream', () => {
  const h = serverFor(before, after, FLOWS.slow(50));

  // A resumable chat whose response was closed (stop()) after the first text delta.
  async function stoppedMidAnswer(what) {
    const chat = httpChat(h.server, what, { body: { resumable: true } });
    const sent = chat.sendMessage({ text: 'talk' });
    await untilFirstText(chat);
    await within(chat.stop(), 5000, 'stop()');
    await within(sent, 5000, 'sendMessage after stop()');
    const sid = sessionOf(chat);
    assert.ok(sid, chat.show());
    await delay(200);
    const st = await sessionStatus(h.server);
    assert.ok(sid in st, `closing a resumable chat's response stopped its turn: ${JSON.stringify(st)}`);
    return [chat, sid];
  }

  test('GET replays the answer from its start and then live to [DONE]; afterwards 204', CASE, async () => {
    const [chat, sid] = await stoppedMidAnswer('resume-raw');
    const res = await fetch(`${h.server.url}/api/chat/${chat.id}/stream`);
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(res.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
    const rec = await readStream(res);
    assert.ok(rec.done, `no [DONE]: ${showChunks(rec.chunks)}`);
    assert.equal(rec.chunks[0]?.type, 'start', showChunks(rec.chunks));
    assert.equal(rec.chunks.at(-1)?.type, 'finish', showChunks(rec.chunks));
    assert.ok(sameWords(textDeltas(rec.chunks), LONG_TEXT), `not the whole answer from its start: ${showChunks(rec.chunks)}`);
    assert.equal(rec.chunks[0].messageId, lastAssistant(chat).id, 'the replay is another message than the one the chat shows');

    await untilIdle(h.server, sid, 5000);
    const again = await fetch(`${h.server.url}/api/chat/${chat.id}/stream`);
    assert.equal(again.status, 204, await again.text());
    const stored = await storedMessages(h.server, sid);
    assert.equal(stored.length, 2, showStored(stored));
    assert.equal(stored[1].info.error, undefined, showStored(stored));
  });

  test('chat.resumeStream() after a closed response shows the whole answer', CASE, async () => {
    const [chat] = await stoppedMidAnswer('resume-chat');
    await within(chat.resumeStream(), 15000, 'resumeStream()');
    assertReady(chat);
    assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
    assert.ok(sameWords(textOf(chat.messages[1]), LONG_TEXT), chat.show());
    const gets = chat.wire.requests.filter((r) => r.method === 'GET');
    assert.deepEqual(gets.map((r) => r.status), [200], chat.show());
  });

  test('DELETE stops the turn of a resumable chat', CASE, async () => {
    const [chat, sid] = await stoppedMidAnswer('resume-delete');
    const del = await answer(await fetch(`${h.server.url}/api/chat/${chat.id}/stream`, { method: 'DELETE' }));
    assert.ok(del.status >= 200 && del.status < 300, `DELETE: ${del.status} ${del.text}`);
    await untilIdle(h.server, sid, 2000);
    const stored = await storedMessages(h.server, sid);
    assert.equal(stored[1]?.info.error?.name, 'MessageAbortedError', showStored(stored));
    const after = await fetch(`${h.server.url}/api/chat/${chat.id}/stream`);
    assert.equal(after.status, 204, await after.text());
  });
});

// ---- 8. regenerate ----------------------------------------------------------------------------------

describe('regenerate()', () => {
  const h = serverFor(
    before,
    after,
    scriptedConfig([{ text: 'answer to {{lastUserText}}' }, { text: 'step 1: the first answer was not removed' }]),
  );

  test('replaces the last answer, in the chat and on the server', CASE, async () => {
    const chat = httpChat(h.server, 'regenerate');
    await within(chat.sendMessage({ text: 'hi' }), 15000, 'sendMessage');
    assertReady(chat);
    const sid = sessionOf(chat);
    assert.ok(sid, chat.show());
    const before = await storedMessages(h.server, sid);
    assert.equal(before.length, 2, showStored(before));

    await within(chat.regenerate(), 15000, 'regenerate()');
    assertReady(chat);
    assert.equal(chat.wire.posts()[1]?.body?.trigger, 'regenerate-message', chat.show());
    assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
    assertOneTextPart(chat, chat.messages[1], 'answer to hi');
    const after = await storedMessages(h.server, sid);
    assert.deepEqual(after.map((m) => m.info.role), ['user', 'assistant'], showStored(after));
    // (docs/ai-sdk.md: the messages after the question are deleted, as a revert; the question
    // stays and is answered again)
    assert.equal(after[0].info.id, before[0].info.id, `the question was replaced:\n${showStored(after)}`);
    assert.equal(after[1].info.parentID, before[0].info.id, showStored(after));
    assert.equal(after[0].parts.filter((p) => p.type === 'text').map((p) => p.text).join(''), 'hi', showStored(after));
    assert.match(after[1].parts.filter((p) => p.type === 'text').map((p) => p.text).join(''), /^answer to hi\s*$/, showStored(after));
    assert.notEqual(after[1].info.id, before[1].info.id, `the answer was not made again:\n${showStored(after)}`);
  });
});

// ---- 9. two client calls in one step ----------------------------------------------------------

describe('two client calls in one step', () => {
  const h = serverFor(
    before,
    after,
    scriptedConfig([
      { toolCalls: [{ tool: 'getLocation', input: {} }, { tool: 'getTime', input: {} }] },
      { text: 'Answer: {{lastToolOutput}}' },
    ]),
  );

  test('both wait in one response; both outputs go in one continuation', CASE, async () => {
    const ref = {};
    const chat = httpChat(h.server, 'twocalls', {
      body: {
        tools: {
          ...LOCATION_TOOLS,
          getTime: { description: 'The time of day', inputSchema: { type: 'object', properties: {} } },
        },
      },
      onToolCall: answerToolsWith(ref, { getLocation: { city: 'Paris' }, getTime: { time: '12:00' } }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    });
    ref.chat = chat;
    await within(chat.sendMessage({ text: 'where and when?' }), 15000, 'sendMessage');
    await settled(chat);
    assertReady(chat);
    const posts = chat.wire.posts();
    assert.equal(posts.length, 2, chat.show());
    const avail = posts[0].chunks.filter((c) => c.type === 'tool-input-available').map((c) => c.toolName).sort();
    assert.deepEqual(avail, ['getLocation', 'getTime'], chat.show());
    const sentParts = posts[1].body.messages.at(-1).parts.filter(isToolPart);
    assert.deepEqual(sentParts.map((p) => [p.type, p.state]).sort(), [['tool-getLocation', 'output-available'], ['tool-getTime', 'output-available']], chat.show());

    assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
    const tools = partsOfType(chat.messages[1], isToolPart);
    assert.deepEqual(tools.map((p) => [p.type, p.state]).sort(), [['tool-getLocation', 'output-available'], ['tool-getTime', 'output-available']], chat.show());
    assert.match(textOf(chat.messages[1]), /^Answer: .*(Paris|12:00)/, chat.show());

    // The model's next step had both results.
    const sid = sessionOf(chat);
    const stored = await storedMessages(h.server, sid);
    const storedTools = stored.flatMap((m) => m.parts.filter((p) => p.type === 'tool'));
    assert.equal(storedTools.length, 2, showStored(stored));
    for (const p of storedTools) assert.equal(p.state?.status, 'completed', showStored(stored));
    const outputs = JSON.stringify(storedTools.map((p) => p.state?.output));
    assert.match(outputs, /Paris/, showStored(stored));
    assert.match(outputs, /12:00/, showStored(stored));
  });
});

// ---- 10. bad input ------------------------------------------------------------------------------------

describe('bad input (plain fetch)', () => {
  // Two models: the default one answers slowly; `tooly/default` (the body's `model`) calls
  // getLocation and then reads its output.
  const slow = FLOWS.slow(50);
  const h = serverFor(before, after, {
    ...slow,
    provider: {
      ...slow.provider,
      tooly: { type: 'scripted', script: [{ toolCalls: [{ tool: 'getLocation', input: {} }] }, { text: 'got {{lastToolOutput}}' }] },
    },
    server: { maxBodyBytes: 65536 },
  });

  function assertJsonError(a, status) {
    assert.equal(a.status, status, `${a.status} ${a.text}`);
    assert.equal(typeof a.body?.error?.code, 'string', a.text);
    assert.equal(typeof a.body?.error?.message, 'string', a.text);
    assert.ok(a.body.error.message.length > 0, a.text);
  }

  test('malformed JSON is 400 with a JSON error', CASE, async () => {
    assertJsonError(await answer(await postChat(h.server, '{"id": "x", "messages": [')), 400);
  });

  test('a chat id with a NUL character is 400 (PostgreSQL could not store it, SQLite would)', CASE, async () => {
    const a = await answer(await postChat(h.server, { id: newChatId('nul') + '\u0000x', messages: [userMessage('hi')], trigger: 'submit-message' }));
    assertJsonError(a, 400);
    assert.match(a.body.error.message, /NUL/);
  });

  test('messages that are not an array are 400', CASE, async () => {
    const a = await answer(await postChat(h.server, { id: newChatId('bad'), messages: 'hello', trigger: 'submit-message' }));
    assertJsonError(a, 400);
  });

  test('a message that is not a UI message is 400', CASE, async () => {
    const a = await answer(await postChat(h.server, { id: newChatId('bad'), messages: [{ role: 'user', parts: 'hi' }], trigger: 'submit-message' }));
    assertJsonError(a, 400);
  });

  test('a file part is 400', CASE, async () => {
    const message = { id: 'u-file', role: 'user', parts: [{ type: 'file', mediaType: 'text/plain', url: 'data:text/plain;base64,aGk=' }, { type: 'text', text: 'read it' }] };
    assertJsonError(await answer(await postChat(h.server, { id: newChatId('file'), messages: [message], trigger: 'submit-message' })), 400);
  });

  test('an app tool named as a server tool is 400', CASE, async () => {
    const tools = { bash: { description: 'not the real bash', inputSchema: { type: 'object', properties: {} } } };
    const a = await answer(await postChat(h.server, { id: newChatId('clash'), messages: [userMessage('hi')], trigger: 'submit-message', tools }));
    assertJsonError(a, 400);
    assert.match(a.body.error.message, /bash/, a.text);
  });

  test('a body over server.maxBodyBytes is 413', CASE, async () => {
    const id = newChatId('huge');
    const a = await answer(await postChat(h.server, { id, messages: [userMessage('x'.repeat(100000))], trigger: 'submit-message' }));
    assertJsonError(a, 413);
    const res = await fetch(`${h.server.url}/api/chat/${id}/stream`);
    assert.equal(res.status, 404, 'the refused request made a chat');
  });

  test('GET stream of a chat never used is 404, naming it', CASE, async () => {
    const id = newChatId('unknown');
    const a = await answer(await fetch(`${h.server.url}/api/chat/${id}/stream`));
    assertJsonError(a, 404);
    assert.ok(a.body.error.message.includes(id), `not an answer about the chat (a missing route?): ${a.text}`);
  });

  test('a second POST while the first streams is 409, and the first goes on to the end', CASE, async () => {
    const id = newChatId('busy');
    const first = await postChat(h.server, { id, messages: [userMessage('talk')], trigger: 'submit-message' });
    assert.equal(first.status, 200);
    const rec = await readStream(first, { until: (r) => r.chunks.some((c) => c.type === 'text-delta'), what: 'the first text delta' });
    assert.ok(!rec.ended, `the answer ended before the second POST: ${showChunks(rec.chunks)}`);
    const second = await answer(await postChat(h.server, { id, messages: [userMessage('talk'), userMessage('and again')], trigger: 'submit-message' }));
    assertJsonError(second, 409);
    // The first response is not harmed.
    await rec.rest();
    assert.ok(rec.done, showChunks(rec.chunks));
    assert.ok(sameWords(textDeltas(rec.chunks), LONG_TEXT), showChunks(rec.chunks));
    assert.ok(!rec.chunks.some((c) => c.type === 'error'), showChunks(rec.chunks));
  });

  test('an output sent twice counts once: the second gets an error chunk naming the call', CASE, async () => {
    const id = newChatId('twice');
    const user = userMessage('where am I?');
    const body = { model: 'tooly/default', tools: LOCATION_TOOLS };
    const first = await readStream(await postChat(h.server, { ...body, id, messages: [user], trigger: 'submit-message' }));
    const call = first.chunks.find((c) => c.type === 'tool-input-available');
    assert.ok(call, `the model did not call getLocation: ${showChunks(first.chunks)}`);
    const messageId = first.chunks.find((c) => c.type === 'start')?.messageId;
    const answered = {
      ...body,
      id,
      trigger: 'submit-message',
      messageId,
      messages: [
        user,
        { id: messageId, role: 'assistant', parts: [{ type: 'step-start' }, { type: 'tool-getLocation', toolCallId: call.toolCallId, state: 'output-available', input: {}, output: { city: 'Paris' } }] },
      ],
    };
    const second = await readStream(await postChat(h.server, answered));
    assert.equal(second.status, 200);
    assert.match(textDeltas(second.chunks), /got .*Paris/, showChunks(second.chunks));
    assert.ok(!second.chunks.some((c) => c.type === 'error'), showChunks(second.chunks));
    const sid = sessionIdIn(first.chunks);
    await untilIdle(h.server, sid, 5000);
    const storedBefore = await storedMessages(h.server, sid);

    const third = await postChat(h.server, answered);
    const a = third.status === 200 ? await readStream(third) : { status: third.status, chunks: [], text: await third.text() };
    const errors = (a.chunks ?? []).filter((c) => c.type === 'error');
    assert.ok(errors.some((c) => String(c.errorText).includes(call.toolCallId)), `no error chunk naming the call (status ${a.status}): ${a.text ?? showChunks(a.chunks)}`);
    assert.equal(textDeltas(a.chunks ?? []), '', `the turn ran again: ${showChunks(a.chunks)}`);
    await untilIdle(h.server, sid, 5000);
    assert.equal((await storedMessages(h.server, sid)).length, storedBefore.length, 'the repeated output changed the session');
  });

  test('an output for a tool call nobody made gets an error chunk naming it', CASE, async () => {
    const id = newChatId('unknowncall');
    const user = userMessage('where am I?');
    const body = { model: 'tooly/default', tools: LOCATION_TOOLS };
    const first = await readStream(await postChat(h.server, { ...body, id, messages: [user], trigger: 'submit-message' }));
    assert.equal(first.status, 200);
    const call = first.chunks.find((c) => c.type === 'tool-input-available');
    assert.ok(call, `the model did not call getLocation: ${showChunks(first.chunks)}`);
    const messageId = first.chunks.find((c) => c.type === 'start')?.messageId ?? 'a-1';
    const assistant = {
      id: messageId,
      role: 'assistant',
      parts: [
        { type: 'step-start' },
        { type: 'tool-getLocation', toolCallId: 'call-nobody-made', state: 'output-available', input: {}, output: { city: 'Nowhere' } },
      ],
    };
    const res = await postChat(h.server, { ...body, id, messages: [user, assistant], trigger: 'submit-message', messageId });
    const a = res.status === 200 ? await readStream(res) : { status: res.status, chunks: [], text: await res.text() };
    const errors = (a.chunks ?? []).filter((c) => c.type === 'error');
    assert.ok(
      errors.some((c) => String(c.errorText).includes('call-nobody-made')),
      `no error chunk naming the id (status ${a.status}): ${a.text ?? showChunks(a.chunks)}`,
    );
  });
});
