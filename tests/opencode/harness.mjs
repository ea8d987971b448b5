// What the OpenCode client tests share: a Switchboard server per describe block (tests/support),
// OpenCode's own clients pointed at it — the `opencode` binary (CLI and TUI) and the
// @opencode-ai/sdk V1 and V2 clients — and readers of what they print.
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { createOpencodeClient } from '@opencode-ai/sdk';
import { createOpencodeClient as createOpencodeClientV2 } from '@opencode-ai/sdk/v2';

import { CASE, HOOK, delay, scriptedConfig, serverFor, startServer, stopServer, waitFor, within } from '../support/server.mjs';

export { CASE, HOOK, delay, scriptedConfig, serverFor, startServer, stopServer, waitFor, within };

const here = dirname(fileURLToPath(import.meta.url));

// The opencode binary that the opencode-ai package installs on Linux x64 (package.json pins it).
export const OPENCODE = join(here, 'node_modules', 'opencode-linux-x64', 'bin', 'opencode');

// The V1 client (`@opencode-ai/sdk`) and the V2 client (`@opencode-ai/sdk/v2`) of `server`.
export const v1 = (server, options = {}) => createOpencodeClient({ baseUrl: server.url, ...options });
export const v2 = (server, options = {}) => createOpencodeClientV2({ baseUrl: server.url, ...options });

// The environment opencode runs in: a HOME of its own under the server's directory (its state,
// config and caches stay there), no provider keys, no telemetry or update checks.
export function opencodeEnv(server, extra = {}) {
  const home = join(server.work, 'opencode-home');
  mkdirSync(home, { recursive: true });
  const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: join(home, '.config'), XDG_DATA_HOME: join(home, '.local', 'share'),
    XDG_STATE_HOME: join(home, '.local', 'state'), XDG_CACHE_HOME: join(home, '.cache'),
    OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_LSP_DOWNLOAD: '1', OPENCODE_DISABLE_MODELS_FETCH: '1', NO_COLOR: '1', ...extra };
  for (const k of Object.keys(env)) if (/^(OPENAI|ANTHROPIC|OPENCODE_SERVER)_/.test(k)) delete env[k];
  return env;
}

// `opencode ARGS` in the server's project directory; resolves to {code, stdout, stderr} when it
// exits, and rejects when it runs longer than `ms` (it is killed).
export function runOpencode(server, args, { ms = 30000, cwd = server.work, env = {} } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(OPENCODE, args, { cwd, env: opencodeEnv(server, env), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c) => (stderr += c));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`opencode ${args.join(' ')} ran over ${ms} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    }, ms);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? signal, stdout, stderr });
    });
  });
}

// `opencode run --attach URL ...ARGS`: the CLI as a client of `server`.
export const runAttached = (server, args, options) => runOpencode(server, ['run', '--attach', server.url, ...args], options);

// The JSON lines of `--format json` output.
export const jsonLines = (text) =>
  text
    .split('\n')
    .filter((l) => l.trim().startsWith('{'))
    .map((l) => JSON.parse(l));

// The body of an SDK answer; throws naming the route when it failed (`{data, error, response}`).
export function must(answer, what) {
  if (answer.error !== undefined || !answer.response?.ok)
    throw new Error(`${what}: ${answer.response?.status} ${JSON.stringify(answer.error)}`);
  return answer.data;
}
