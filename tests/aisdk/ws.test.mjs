// The same chat flows over Switchboard's /api/chat/ws (issue 18) with the `ai` package's own
// WebSocketChatTransport (7.0.173): client frames send / resume / abort, server frames start /
// chunk / end / error / no-active. Node 20 has no global WebSocket, so the transport gets the
// `ws` package's class (its `webSocket` option), wrapped to record every frame and socket.
//
//   SWITCHBOARD_BIN=build/asan/switchboard node --test tests/aisdk/ws.test.mjs
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  WebSocketChatTransport,
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
  delay,
  isToolPart,
  lastAssistant,
  newChatId,
  partsOfType,
  recordingWebSocket,
  sameWords,
  serverFor,
  sessionOf,
  sessionStatus,
  settled,
  showChat,
  showStored,
  storedMessages,
  textOf,
  untilFirstText,
  untilIdle,
  waitFor,
  within,
} from './harness.mjs';

// A chat object talking to `server` over one WebSocket; frames recorded in `chat.wire`.
function wsChat(server, what, { body, ...options } = {}) {
  const wire = recordingWebSocket();
  const transport = new WebSocketChatTransport({ url: `${server.wsUrl}/api/chat/ws`, webSocket: wire.WebSocket, body });
  const chat = new Chat({ id: newChatId(what), transport, ...options });
  chat.wire = wire;
  chat.transport = transport;
  chat.show = () => `${showChat(chat)}\n${wire.show()}`;
  return chat;
}

// Runs `fn(chat)` and closes the chat's socket whatever happens.
async function withChat(chat, fn) {
  try {
    await fn(chat);
  } finally {
    chat.transport.close();
  }
}

// Every response the server started (one per `send`/`resume` with something to stream) has
// chunks numbered 0, 1, 2, ... and an `end` frame.
function assertWellFramed(chat) {
  const byRequest = new Map();
  for (const f of chat.wire.in()) {
    if (!byRequest.has(f.requestId)) byRequest.set(f.requestId, []);
    byRequest.get(f.requestId).push(f);
  }
  for (const out of chat.wire.out().filter((f) => f.type === 'send')) {
    const frames = byRequest.get(out.requestId) ?? [];
    const seqs = frames.filter((f) => f.type === 'chunk').map((f) => f.sequence);
    assert.ok(seqs.length > 0, `no chunks for request ${out.requestId}:\n${chat.show()}`);
    assert.deepEqual(seqs, seqs.map((_, i) => i), `chunk sequences of ${out.requestId}:\n${chat.show()}`);
    assert.equal(frames.at(-1)?.type, 'end', `request ${out.requestId} has no end frame last:\n${chat.show()}`);
  }
}

// ---- 1. a text answer -------------------------------------------------------------------------------

describe('ws: a text answer', () => {
  const h = serverFor(before, after, FLOWS.text());

  test('the assistant message reads "hello there"', CASE, () =>
    withChat(wsChat(h.server, 'text'), async (chat) => {
      await within(chat.sendMessage({ text: 'hi' }), 15000, 'sendMessage');
      assertReady(chat);
      assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
      const texts = partsOfType(chat.messages[1], 'text');
      assert.deepEqual(texts.map((p) => [p.text.trim(), p.state]), [['hello there', 'done']], chat.show());
      assert.ok(sessionOf(chat), `no data-session part:\n${chat.show()}`);
      assertWellFramed(chat);
      const chunks = chat.wire.in('chunk').map((f) => f.chunk.type);
      assert.equal(chunks[0], 'start', chat.show());
      assert.equal(chunks.at(-1), 'finish', chat.show());
      assert.equal(chat.wire.sockets.length, 1);

      // Nothing streams any more: a resume is answered no-active and changes nothing.
      const before = structuredClone(chat.messages);
      await within(chat.resumeStream(), 5000, 'resumeStream() after the answer');
      assertReady(chat);
      const [resume] = chat.wire.out('resume');
      assert.deepEqual(chat.wire.in().filter((f) => f.requestId === resume?.requestId).map((f) => f.type), ['no-active'], chat.show());
      assert.deepEqual(chat.messages, before, chat.show());
    }),
  );
});

// ---- 3. an automatic client tool ---------------------------------------------------------------

describe('ws: an automatic client tool', () => {
  const h = serverFor(before, after, FLOWS.clientTool());

  test('trigger, the call, continue with the output: one socket, two sends', CASE, async () => {
    let chat;
    chat = wsChat(h.server, 'clienttool', {
      body: { tools: LOCATION_TOOLS },
      onToolCall: ({ toolCall }) => {
        if (toolCall.toolName === 'getLocation')
          chat.addToolOutput({ tool: 'getLocation', toolCallId: toolCall.toolCallId, output: { city: 'Paris' } });
      },
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    });
    await withChat(chat, async () => {
      await within(chat.sendMessage({ text: 'where am I?' }), 15000, 'sendMessage');
      await settled(chat);
      assertReady(chat);
      assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
      const tools = partsOfType(chat.messages[1], isToolPart);
      assert.deepEqual(tools.map((p) => [p.type, p.state]), [['tool-getLocation', 'output-available']], chat.show());
      assert.match(textOf(chat.messages[1]), /^It is .*Paris/, chat.show());
      assert.equal(chat.wire.out('send').length, 2, chat.show());
      assert.equal(chat.wire.sockets.length, 1, chat.show());
      assertWellFramed(chat);
    });
  });
});

// ---- 5. an approval granted -----------------------------------------------------------------------

describe('ws: a permission ask approved', () => {
  const h = serverFor(before, after, FLOWS.bash('echo approved-$((6*7))', 'ask'));

  test('approval-requested, then addToolApprovalResponse runs bash', CASE, () =>
    withChat(wsChat(h.server, 'approve', { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses }), async (chat) => {
      await within(chat.sendMessage({ text: 'run it' }), 15000, 'sendMessage');
      assertReady(chat);
      const [part] = partsOfType(lastAssistant(chat), isToolPart);
      assert.equal(part?.state, 'approval-requested', chat.show());
      assert.equal(typeof part.approval?.id, 'string', chat.show());
      await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
      await waitFor(() => chat.wire.out('send').length === 2, 'the send with the approval', 5000, chat.show);
      await settled(chat, 'the approved turn');
      assertReady(chat);
      assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
      const tools = partsOfType(chat.messages[1], isToolPart);
      assert.deepEqual(tools.map((p) => p.state), ['output-available'], chat.show());
      assert.match(JSON.stringify(tools[0].output), /approved-42/, chat.show());
      assert.match(textOf(chat.messages[1]), /ran: .*approved-42/, chat.show());
      assertWellFramed(chat);
    }),
  );
});

// ---- 6. stop = abort frame; 11. a dropped socket resumed ------------------------------------------

describe('ws: stop and a dropped socket', () => {
  const h = serverFor(before, after, FLOWS.slow(100));

  test('stop() sends abort: the turn ends, aborted', CASE, () =>
    withChat(wsChat(h.server, 'stop'), async (chat) => {
      const sent = chat.sendMessage({ text: 'talk' });
      await untilFirstText(chat);
      await within(chat.stop(), 5000, 'stop()');
      await within(sent, 5000, 'sendMessage after stop()');
      assertReady(chat);
      assert.equal(chat.wire.out('abort').length, 1, chat.show());
      const shown = textOf(lastAssistant(chat));
      assert.ok(shown.split(/\s+/).filter(Boolean).length < 40, chat.show());
      const sid = sessionOf(chat);
      assert.ok(sid, chat.show());
      await untilIdle(h.server, sid, 2000);
      const stored = await storedMessages(h.server, sid);
      assert.deepEqual(stored.map((m) => m.info.role), ['user', 'assistant'], showStored(stored));
      assert.equal(stored[1].info.error?.name, 'MessageAbortedError', showStored(stored));
    }),
  );

  test('a socket dropped mid-answer: resumeStream() on a new socket finishes the answer', CASE, () =>
    withChat(wsChat(h.server, 'drop'), async (chat) => {
      const sent = chat.sendMessage({ text: 'talk' });
      await untilFirstText(chat);
      const sid = sessionOf(chat);
      assert.ok(sid, chat.show());
      chat.wire.sockets[0].terminate(); // the network goes, no close frame
      await within(sent, 5000, 'sendMessage after the drop');
      assert.equal(chat.status, 'error', `a dropped socket is not an error the app sees:\n${chat.show()}`);
      assert.match(chat.errors.map((e) => e.message).join('\n'), /network connection closed/, chat.show());
      chat.errors.length = 0; // the drop's own error; what follows must have none
      await delay(300);
      const st = await sessionStatus(h.server);
      assert.ok(sid in st, `the dropped socket stopped the turn: ${JSON.stringify(st)}`);

      await within(chat.resumeStream(), 15000, 'resumeStream()');
      assertReady(chat);
      assert.equal(chat.wire.sockets.length, 2, chat.show());
      const resumes = chat.wire.out('resume');
      assert.equal(resumes.length, 1, chat.show());
      assert.equal(resumes[0].id, chat.id, chat.show());
      assert.deepEqual(chat.messages.map((m) => m.role), ['user', 'assistant'], chat.show());
      assert.ok(sameWords(textOf(chat.messages[1]), LONG_TEXT), chat.show());
      const resumed = chat.wire.in().filter((f) => f.requestId === resumes[0].requestId);
      assert.equal(resumed.at(-1)?.type, 'end', chat.show());
      await untilIdle(h.server, sid, 5000);
      const stored = await storedMessages(h.server, sid);
      assert.equal(stored[1]?.info.error, undefined, showStored(stored));
    }),
  );
});
