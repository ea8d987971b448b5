// `opencode run --attach URL`: OpenCode's CLI as a client of Switchboard, as a person reads it.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { CASE, runAttached, scriptedConfig, serverFor } from './harness.mjs';

describe('opencode run --attach', () => {
  // The CLI prints a text part when it ends. It exits as soon as its prompt is answered, without
  // reading the events still on their way (opencode 1.18.33's run command does not wait for its
  // event loop when attached), so under load the text of a turn's very last step can go
  // unprinted, against OpenCode's own server too. The answer here ends before a tool step, so it
  // is printed whatever the machine's load; the server's part (the turn's events written before
  // its answer) is what event_streams_caught_up does.
  const h = serverFor(before, after, () =>
    scriptedConfig([
      { text: 'hello from switchboard', toolCalls: [{ tool: 'todowrite', input: { todos: [] } }] },
      { delayMs: 300, text: 'done' },
    ]),
  );

  it("prints the model's answer and its header, not the prompt, and exits 0", CASE, async () => {
    const r = await runAttached(h.server, ['say hello']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /hello from switchboard/);
    // The header names the agent and model (it needs sessionID in message.updated's properties);
    // a user's text part has no time.end, so the prompt is not printed back as if answered.
    assert.match(r.stderr, /> build · default/);
    assert.doesNotMatch(r.stdout + r.stderr, /say hello/);
  });
});
