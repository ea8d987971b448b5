// Runs test/*.test.mjs (or the files named on the command line) with Node's test runner and the
// flags this Node needs: Node 20 has a WebSocket only with --experimental-websocket; Node 22+
// has it built in.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const testDir = join(dirname(fileURLToPath(import.meta.url)), '..', 'test');
const files = process.argv.length > 2
  ? process.argv.slice(2)
  : readdirSync(testDir).filter((f) => f.endsWith('.test.mjs')).sort().map((f) => join(testDir, f));

const flags = [];
if (typeof globalThis.WebSocket === 'undefined' && process.allowedNodeEnvironmentFlags.has('--experimental-websocket'))
  flags.push('--experimental-websocket');
// Each file starts its own servers; two files at a time suit a 2-CPU machine.
if (Number(process.versions.node.split('.')[0]) >= 20) flags.push('--test-concurrency=2');

const result = spawnSync(process.execPath, [...flags, '--test', ...files], { stdio: 'inherit' });
process.exit(result.status ?? 1);
