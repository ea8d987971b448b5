// `switchboard serve` as the Node test suites start it (tests/aisdk, tests/mcp, tests/opencode):
// the binary named by SWITCHBOARD_BIN, on a free loopback port, in a directory of its own
// (config, HOME, data, project), with ASan's leak check on; and what every suite's cases share
// (time limits, a server per describe block, waiting). Plain Node, no dependencies.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

// `switchboard serve` on a free port with `config`; resolves once it listens. `work`: the
// directory of an earlier server (its project and data), for a restart.
export async function startServer(config, work = mkdtempSync(join(tmpdir(), 'sb-node-test-'))) {
  if (!process.env.SWITCHBOARD_BIN) throw new Error('set SWITCHBOARD_BIN to the switchboard binary');
  const bin = resolve(process.env.SWITCHBOARD_BIN); // the child runs in its own directory
  const configPath = join(work, 'config.json');
  writeFileSync(configPath, JSON.stringify(config));
  const env = { ...process.env, HOME: join(work, 'home'), ASAN_OPTIONS: 'detect_leaks=1' };
  for (const k of Object.keys(env)) if (k.startsWith('XDG_') || k.startsWith('SWITCHBOARD_')) delete env[k];
  // Every answer is checked against the server's OpenAPI document (GET /doc); a mismatch is a 500.
  env.SWITCHBOARD_CHECK_API_DOC = '1';
  const child = spawn(
    bin,
    ['serve', '--hostname', '127.0.0.1', '--port', '0', '--config', configPath,
     '--data-dir', join(work, 'data'), '--directory', work],
    { cwd: work, env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const server = { work, child, logs: '', url: '', wsUrl: '' };
  const port = await new Promise((resolvePort, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start in 30 s:\n${server.logs}`)), 30000);
    const onData = (chunk) => {
      server.logs += chunk;
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(server.logs);
      if (m) {
        clearTimeout(timer);
        resolvePort(Number(m[1]));
      }
    };
    child.stdout.setEncoding('utf8').on('data', onData);
    child.stderr.setEncoding('utf8').on('data', onData);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code ?? signal}) before listening:\n${server.logs}`));
    });
  });
  server.url = `http://127.0.0.1:${port}`;
  server.wsUrl = `ws://127.0.0.1:${port}`;
  // SIGTERM, wait (SIGKILL after 10 s); resolves to the exit code or signal.
  server.stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10000);
      await exited;
      clearTimeout(timer);
    }
    return child.exitCode ?? child.signalCode;
  };
  server.remove = () => rmSync(work, { recursive: true, force: true });
  return server;
}

// A config whose default model plays `script` (docs/providers.md, "The scripted model").
export function scriptedConfig(script, extra = {}) {
  return { provider: { sb: { type: 'scripted', script } }, model: 'sb/default', ...extra };
}

// Every case ends by itself: a hang is a failure, not a stuck run.
export const CASE = { timeout: 30000 };
export const HOOK = { timeout: 60000 };

export const delay = (ms) => new Promise((r) => setTimeout(r, ms));

// before/after hooks for a describe block: `holder.server` is the running server. After the
// block the server must still be running (a crash is a failure) and exit cleanly on SIGTERM.
export function serverFor(before, after, config) {
  const holder = { server: undefined };
  before(async () => {
    holder.server = await startServer(typeof config === 'function' ? config() : config);
  }, HOOK);
  after(async () => {
    if (!holder.server) return;
    try {
      await stopServer(holder.server);
    } finally {
      holder.server.remove();
    }
  }, HOOK);
  return holder;
}

// Stops `server` (SIGTERM) and fails unless it was still running and exits 0.
export async function stopServer(server) {
  const code = await server.stop();
  const logs = server.logs;
  // A sanitizer's report from its start (its first frames say where), else the log's end.
  const report = logs.search(/ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/);
  const excerpt = report >= 0 ? logs.slice(Math.max(0, report - 200), report + 8000) : logs.slice(-4000);
  assert.equal(code, 0, `the server crashed or did not exit cleanly on SIGTERM (${code}):\n${excerpt}`);
  // An answer its OpenAPI document (GET /doc) does not describe, even one the test let pass.
  const mismatch = logs.match(/API doc check: .*/);
  assert.equal(mismatch, null, `the server gave an undocumented answer: ${mismatch?.[0]}`);
}

// ---- waiting -------------------------------------------------------------------------------------

// Resolves when `pred()` (maybe async) is truthy, checked every 50 ms; rejects naming `what`
// (and what `describe()` says at that moment) after `ms`.
export async function waitFor(pred, what, ms = 10000, describe = () => '') {
  const started = Date.now();
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() - started > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}${describeSuffix(describe)}`);
    await delay(50);
  }
}

function describeSuffix(describe) {
  const d = describe();
  return d ? `\n${d}` : '';
}

// Rejects after `ms` naming `what` (a call that should have ended by itself).
export function within(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
