// The examples run as a user would run them, against the real server.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';

import { startServer } from './support.mjs';

let server;
before(async () => {
  server = await startServer({});
});
after(async () => {
  await server?.stop();
});

function run(example, { answer } = {}) {
  const path = fileURLToPath(new URL(`../examples/${example}`, import.meta.url));
  const child = spawn(process.execPath, [path], {
    env: { ...process.env, SWITCHBOARD_URL: server.url },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d) => {
    out += d;
    if (answer && /Allow\? \[y\/N\] $/.test(out)) {
      child.stdin.write(`${answer}\n`);
      answer = undefined;
    }
  });
  child.stderr.setEncoding('utf8').on('data', (d) => (err += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill();
      reject(new Error(`${example} did not finish:\n${out}\n${err}`));
    }, 20000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

test('local-tools.mjs: the model reads the local time and a local file', async () => {
  const { code, out, err } = await run('local-tools.mjs');
  assert.equal(code, 0, err);
  // The time in Paris, as toLocaleString prints it: "11/22/2026, 3:45:12 AM".
  assert.match(out, /Tool results:\n\d{1,2}\/\d{1,2}\/\d{4}, \d{1,2}:\d{2}:\d{2}/);
  assert.match(out, /Seed 000's client tools/, 'the file it read is the example itself');
});

test('confirm-in-terminal.mjs: "y" submits the interactive call', async () => {
  const { code, out, err } = await run('confirm-in-terminal.mjs', { answer: 'y' });
  assert.equal(code, 0, err);
  assert.match(out, /Allow\? \[y\/N\]/);
  assert.match(out, /\[status: awaiting-input\]/);
  assert.match(out, /\{"confirmed":true\}/);
});

test('confirm-in-terminal.mjs: "n" cancels, and the model reads the reason', async () => {
  const { code, out, err } = await run('confirm-in-terminal.mjs', { answer: 'n' });
  assert.equal(code, 0, err);
  assert.match(out, /The user declined the action/);
});
