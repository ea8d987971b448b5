#!/usr/bin/env node
// Seed 003's interactive client tool, answered by a person at the terminal: the model asks to
// confirm an action; the call waits in chat.pendingClientTools (status 'awaiting-input') until
// you type y (submit) or anything else (cancel, with a reason the model reads).
//
//   switchboard serve &
//   node examples/confirm-in-terminal.mjs [PROMPT]
import readline from 'node:readline/promises';
import { stdin, stdout } from 'node:process';

import { SwitchboardClient } from '@switchboard/sdk';

const client = new SwitchboardClient(process.env.SWITCHBOARD_URL ?? 'http://127.0.0.1:4096');
const chat = await client.chat({
  title: 'confirm in terminal',
  clientTools: {
    confirm_action: {
      description: 'Ask the user to confirm an action before doing it. Returns {confirmed: true} or an error saying why not.',
      parameters: {
        type: 'object',
        properties: {
          action: { type: 'string', description: 'What you are about to do' },
        },
        required: ['action'],
      },
      handler: 'interactive',
    },
  },
});

const rl = readline.createInterface({ input: stdin, output: stdout });
const asked = new Set();
let queue = Promise.resolve();
let lastStatus = '';

// The UI part: render the state after every change. A web page does the same with its framework.
chat.subscribe((state) => {
  if (state.status !== lastStatus) console.log(`[status: ${(lastStatus = state.status)}]`);
  for (const call of state.pendingClientTools.confirm_action ?? []) {
    if (asked.has(call.toolCallId)) continue;
    asked.add(call.toolCallId);
    queue = queue.then(async () => {
      if (call.signal.aborted) return;
      const answer = await rl.question(`The assistant wants to: ${call.args.action}. Allow? [y/N] `);
      if (/^y/i.test(answer.trim())) await call.submit({ confirmed: true });
      else await call.cancel('The user declined the action');
    });
  }
});

const scripted = (await client.config()).model.startsWith('scripted/');
const text =
  process.argv[2] ??
  (scripted
    ? `/call ${client.clientTools.toolID('confirm_action')} {"action": "delete the build directory"}`
    : 'Delete the build directory. Use confirm_action to ask me first.');

try {
  console.log(`> ${text}`);
  await chat.send(text);
  const done = await chat.until((s) => s.status === 'idle' || s.status === 'error');
  const last = done.messages.at(-1);
  for (const part of last?.parts ?? []) if (part.type === 'text') console.log(part.text);
  if (done.error) console.log(`(error: ${done.error.message})`);
} finally {
  rl.close();
  await chat.close();
}
