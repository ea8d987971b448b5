// `opencode attach URL`, OpenCode's TUI, against Switchboard in a pseudo-terminal (tmux): it
// boots, a typed prompt is answered live, a permission ask is answered in the TUI, Esc aborts a
// running turn, and /undo reverts the last turn.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { HOOK, must, scriptedConfig, serverFor, v1, v2, waitFor } from './harness.mjs';
import { Tui } from './tui.mjs';

const SLOW_WORDS = Array.from({ length: 60 }, (_, i) => `w${i + 1}`).join(' ');

// One session played through in order: each prompt the test types is the next step.
const SCRIPT = [
  { text: 'hello from the tui test' },
  { toolCalls: [{ tool: 'bash', input: { command: 'echo hi-from-bash', description: 'say hi' } }] },
  { text: 'bash said {{lastToolOutput}}' },
  { text: SLOW_WORDS, chunkDelayMs: 250 },
];

describe('opencode attach (the TUI)', { timeout: 120000 }, () => {
  const h = serverFor(before, after, () => scriptedConfig(SCRIPT, { permission: { bash: 'ask' } }));
  let tui;
  before(() => {
    tui = new Tui(h.server);
  }, HOOK);
  after(() => tui?.close());

  const session = async () => {
    const list = must(await v1(h.server).session.list(), 'session.list');
    assert.equal(list.length, 1, 'the TUI made one session');
    return list[0];
  };
  const messages = async (id) => must(await v1(h.server).session.messages({ path: { id } }), 'session.messages');
  // Types `text`, waits until the TUI shows `ready` (by default the text itself; each prompt here
  // is new on the screen), then presses Enter: keys sent before the TUI has drawn what came first
  // can be taken differently (a command's completion list not open yet).
  const submit = async (text, ready = new RegExp(text.replace(/[/.*+?^${}()|[\]\\]/g, '\\$&'))) => {
    tui.type(text);
    await tui.until(ready, `the TUI showing what was typed (${text})`);
    tui.press('Enter');
  };

  it('boots with the configured model in its prompt box', async () => {
    await tui.until(/Ask anything/, 'the prompt box', 30000);
    await tui.until(/Build · default sb/, 'the agent and model under the prompt box');
  });

  it('answers a typed prompt live', async () => {
    await submit('say hello');
    await tui.until(/hello from the tui test/, 'the answer on screen');
    const s = await session();
    await waitFor(async () => (await messages(s.id)).length === 2, 'the question and the answer stored');
  });

  it('asks for a permission and runs the command once it is allowed', async () => {
    await submit('run bash');
    await tui.until(/Permission required[\s\S]*echo hi-from-bash[\s\S]*Allow once/, 'the permission ask');
    const pending = must(await v2(h.server).permission.list(), 'permission.list');
    assert.equal(pending.length, 1, 'one ask waits on the server');
    tui.press('Enter'); // "Allow once" is selected
    await tui.until(/bash said hi-from-bash/, 'the step after the command');
    assert.equal(must(await v2(h.server).permission.list(), 'permission.list').length, 0);
  });

  it('stops a running turn with Esc', async () => {
    await submit('go slow');
    await tui.until(/w3 /, 'the slow answer streaming');
    tui.press('Escape');
    await tui.until(/esc again to interrupt/, 'the TUI asking for a second Esc');
    tui.press('Escape');
    await tui.until(/interrupted/, 'the turn shown as interrupted');
    const s = await session();
    const list = await messages(s.id);
    const last = list.at(-1);
    assert.equal(last.info.role, 'assistant');
    assert.equal(last.info.error?.name, 'MessageAbortedError', JSON.stringify(last.info));
    const text = last.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
    assert.ok(!text.includes('w60'), `the answer stopped before its end: ${text}`);
    const status = must(await v1(h.server).session.status(), 'session.status');
    assert.notEqual(status[s.id]?.type, 'busy');
  });

  it('reverts the last turn with /undo', async () => {
    await submit('/undo', /Undo previous message/);
    await tui.until(/1 message reverted/, 'the revert notice');
    const s = await session();
    const info = must(await v1(h.server).session.get({ path: { id: s.id } }), 'session.get');
    const list = await messages(s.id);
    const lastUser = list.filter((m) => m.info.role === 'user').at(-1);
    assert.equal(info.revert?.messageID, lastUser.info.id, 'the session is reverted to the last question');
  });
});
