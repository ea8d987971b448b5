// Test support: the real `switchboard serve` on a free port with its own HOME, data directory
// and config file; a TCP proxy that can cut connections; small waiting helpers.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

/** SWITCHBOARD_BIN, or the newest of build/{release,debug,asan}/switchboard in the repository. */
export function serverBinary() {
  if (process.env.SWITCHBOARD_BIN) return process.env.SWITCHBOARD_BIN;
  const candidates = ['release', 'debug', 'asan']
    .map((preset) => join(repoRoot, 'build', preset, 'switchboard'))
    .filter((p) => existsSync(p))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  if (!candidates.length)
    throw new Error(
      'no server binary: build one (cmake --build --preset release) or set SWITCHBOARD_BIN',
    );
  return candidates[0];
}

/**
 * Starts `switchboard serve` with `config` (merged over quiet test defaults). Resolves once it
 * logs that it listens. `port` 0 picks a free one; restart() reuses the port.
 */
export async function startServer(config = {}, { port = 0 } = {}) {
  const work = mkdtempSync(join(tmpdir(), 'sb-sdk-js-'));
  const home = join(work, 'home');
  const data = join(work, 'data');
  const configPath = join(work, 'config.json');
  writeFileSync(configPath, JSON.stringify(config));
  const server = { work, logs: '', url: '', port, process: undefined };

  server.start = async (onPort = server.port) => {
    const env = { ...process.env, HOME: home };
    for (const k of Object.keys(env)) if (k.startsWith('XDG_') || k.startsWith('SWITCHBOARD_')) delete env[k];
    // Every answer is checked against the server's OpenAPI document (GET /doc); a mismatch is a 500.
    env.SWITCHBOARD_CHECK_API_DOC = '1';
    const child = spawn(
      serverBinary(),
      ['serve', '--hostname', '127.0.0.1', '--port', String(onPort), '--config', configPath,
       '--data-dir', data, '--directory', work],
      { cwd: work, env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    server.process = child;
    const listening = new Promise((resolveListening, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`server did not start within 20 s:\n${server.logs}`)),
        20000,
      );
      const onData = (chunk) => {
        server.logs += chunk;
        const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(server.logs);
        if (m) {
          clearTimeout(timer);
          resolveListening(Number(m[1]));
        }
      };
      child.stdout.setEncoding('utf8').on('data', onData);
      child.stderr.setEncoding('utf8').on('data', onData);
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`server exited (${code ?? signal}) before listening:\n${server.logs}`));
      });
    });
    server.port = await listening;
    server.url = `http://127.0.0.1:${server.port}`;
    return server;
  };

  /**
   * SIGTERM and wait for the exit (SIGKILL after 5 s). A server that does not exit 0 (a crash,
   * a sanitizer report) fails the test that stops it, with its log.
   */
  server.stopProcess = async () => {
    const child = server.process;
    if (!child) return;
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    if (child.exitCode !== 0)
      throw new Error(`server exited with ${child.exitCode ?? child.signalCode}:\n${server.logs}`);
    // An answer its OpenAPI document (GET /doc) does not describe, even one the test let pass.
    const mismatch = server.logs.match(/API doc check: .*/);
    if (mismatch) throw new Error(`the server gave an undocumented answer: ${mismatch[0]}`);
  };

  server.restart = async () => {
    await server.stopProcess();
    server.logs = '';
    // The port was just released; retry briefly if another socket still holds it.
    for (let i = 0; ; i++) {
      try {
        return await server.start(server.port);
      } catch (error) {
        if (i >= 20) throw error;
        await delay(100);
      }
    }
  };

  server.stop = async () => {
    try {
      await server.stopProcess();
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  };

  await server.start(port);
  return server;
}

/** JSON request to the server; resolves to {status, body}. */
export async function call(server, method, path, body, headers = {}) {
  const res = await fetch(server.url + path, {
    method,
    headers: body === undefined ? headers : { 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed };
}

/** POST /client-tools/execute, as the agent loop would run a client tool. */
export function execute(server, tool, input = {}, extra = {}) {
  return call(server, 'POST', '/client-tools/execute', { tool, input, ...extra });
}

/**
 * A TCP proxy in front of `target` (a port). down() cuts every connection and refuses new ones
 * (they are accepted and closed at once); up() lets them through again. `heads` records the
 * HTTP request heads that went through (a chunk that starts with a method; good enough for
 * the small requests of these tests).
 */
export async function startProxy(target) {
  const sockets = new Set();
  const proxy = { heads: [], isDown: false, url: '', port: 0 };
  const server = net.createServer((client) => {
    if (proxy.isDown) {
      client.destroy();
      return;
    }
    const upstream = net.connect(target, '127.0.0.1');
    sockets.add(client);
    sockets.add(upstream);
    client.on('data', (chunk) => {
      const text = chunk.toString('latin1');
      if (/^(GET|POST|DELETE|PUT) \//.test(text)) proxy.heads.push(text.split('\r\n\r\n')[0]);
    });
    client.pipe(upstream);
    upstream.pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  proxy.port = server.address().port;
  proxy.url = `http://127.0.0.1:${proxy.port}`;
  proxy.down = () => {
    proxy.isDown = true;
    for (const s of sockets) s.destroy();
    sockets.clear();
  };
  proxy.up = () => {
    proxy.isDown = false;
  };
  proxy.close = () =>
    new Promise((r) => {
      proxy.down();
      server.close(() => r());
    });
  return proxy;
}

/** A reason to skip WebSocket tests on a Node without WebSocket (Node 20 without the flag). */
export const noWebSocket =
  typeof globalThis.WebSocket === 'undefined'
    ? 'this Node has no WebSocket (Node 20 needs --experimental-websocket; npm test adds it)'
    : false;

export function delay(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `check` until it returns a truthy value; fails after `timeout` ms with `what`. */
export async function waitFor(check, what, timeout = 10000) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(20);
  }
}

/** A promise with its resolve function, for handlers that wait on the test. */
export function gate() {
  let open;
  const promise = new Promise((r) => (open = r));
  return { promise, open };
}

/** Collects `/event` frames; `next(pred)` waits for the first matching one not yet taken. */
export async function eventLog(server) {
  const controller = new AbortController();
  const res = await fetch(server.url + '/event', { signal: controller.signal });
  const events = [];
  const waiters = [];
  (async () => {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of res.body) {
        buffer += decoder.decode(chunk, { stream: true });
        let i;
        while ((i = buffer.indexOf('\n\n')) >= 0) {
          const frame = buffer.slice(0, i);
          buffer = buffer.slice(i + 2);
          const data = frame.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
          if (!data) continue;
          events.push(JSON.parse(data));
          for (const w of [...waiters]) w();
        }
      }
    } catch {
      // closed by the test
    }
  })();
  const log = {
    events,
    close: () => controller.abort(),
    async next(pred, what = 'an event', timeout = 10000) {
      const deadline = Date.now() + timeout;
      for (;;) {
        const found = events.find(pred);
        if (found) return found;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; saw ${events.map((e) => e.type).join(', ')}`);
        await new Promise((r) => {
          waiters.push(r);
          setTimeout(r, 50);
        });
        waiters.length = 0;
      }
    },
  };
  await log.next((e) => e.type === 'server.connected', 'server.connected');
  return log;
}
