#!/usr/bin/env node
// Seed 000's client tools: the model reads the local clock and local files through tools that
// run in this program, not on the server.
//
//   switchboard serve &                        # or scripts/run.sh
//   node examples/local-tools.mjs [PROMPT ...]
//
// SWITCHBOARD_URL picks the server (default http://127.0.0.1:4096). With the scripted model (the
// default when no provider is configured) the default prompts call the tools with `/call`; with a
// real model they are plain questions.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

import { SwitchboardClient } from '@switchboard/sdk';

const client = new SwitchboardClient(process.env.SWITCHBOARD_URL ?? 'http://127.0.0.1:4096');

const { session, prompt, close } = await client.startSession({
  title: 'local tools example',
  tools: {
    get_local_time: {
      description: 'Get the current local time on the client machine',
      parameters: {
        type: 'object',
        properties: { timezone: { type: 'string', description: "Timezone (e.g. 'America/New_York')" } },
      },
      handler: async (input) => {
        const tz = input.timezone || 'UTC';
        // An unknown time zone throws a RangeError: the model receives its message as the error.
        const time = new Date().toLocaleString('en-US', { timeZone: tz });
        return { title: `Local time (${tz})`, output: time };
      },
    },
    read_local_file: {
      description: "Read a file from the client's local filesystem",
      parameters: {
        type: 'object',
        properties: { path: { type: 'string', description: 'Absolute path to the file' } },
        required: ['path'],
      },
      handler: async (input, ctx) => {
        const content = await readFile(input.path, { encoding: 'utf-8', signal: ctx.signal });
        return { title: `Read ${input.path}`, output: content };
      },
    },
  },
});

const scripted = (await client.config()).model.startsWith('scripted/');
const id = (name) => client.clientTools.toolID(name);
const thisFile = fileURLToPath(import.meta.url);
const prompts = process.argv.length > 2
  ? process.argv.slice(2)
  : scripted
    ? [
        `/call ${id('get_local_time')} {"timezone": "Europe/Paris"}`,
        `/call ${id('read_local_file')} ${JSON.stringify({ path: thisFile })}`,
      ]
    : ['What time is it in Paris right now?', `What is the first line of ${thisFile}?`];

try {
  console.log(`session ${session.id}`);
  for (const text of prompts) {
    console.log(`\n> ${text}`);
    const { info, parts } = await prompt(text);
    for (const part of parts) if (part.type === 'text') console.log(part.text);
    if (info.role === 'assistant' && info.error) console.log(`(turn failed: ${info.error.data.message})`);
  }
} finally {
  await close();
}
