// `switchboard serve` as the Node test suites start it (tests/aisdk, tests/mcp): the binary named
// by SWITCHBOARD_BIN, on a free loopback port, in a directory of its own (config, HOME, data,
// project), with ASan's leak check on. Plain Node, no dependencies.
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

