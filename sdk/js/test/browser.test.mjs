// The SDK in a real browser: headless Chromium loads dist/ as ES modules from a page, runs a
// chat whose client tools answer from the page (automatic and interactive), over SSE and over
// WebSocket. The page and the API share one origin through a small reverse proxy in this test
// (the server sends no CORS headers). Skipped when no Chromium is installed.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { startServer } from './support.mjs';

const chromium = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].find(existsSync);

const page = `<!doctype html><meta charset="utf-8"><title>sdk test</title>
<script type="module">
import { SwitchboardClient } from '/sdk/index.js';
const report = (body) => fetch('/report', { method: 'POST', body: JSON.stringify(body) });
const text = (s) => s.messages.at(-1).parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
try {
  const transport = new URLSearchParams(location.search).get('transport');
  const client = new SwitchboardClient(location.origin, { clientTools: { transport } });
  const chat = await client.chat({
    clientTools: {
      browser_info: {
        description: 'What browser runs this page',
        handler: () => ({ title: 'browser', output: 'page says ' + (navigator.userAgent.includes('Chrome') ? 'chrome' : 'other') }),
      },
      confirm: { description: 'Asks the person', handler: 'interactive' },
    },
  });
  const statuses = [];
  chat.subscribe((s) => {
    if (statuses.at(-1) !== s.status) statuses.push(s.status);
    for (const call of s.pendingClientTools.confirm ?? []) call.submit('confirmed in the page');
  });
  await chat.send('/call ' + client.clientTools.toolID('browser_info') + ' {}');
  const first = await chat.until((s) => s.status === 'idle' || s.status === 'error', { timeout: 15000 });
  await chat.send('/call ' + client.clientTools.toolID('confirm') + ' {}');
  const second = await chat.until((s) => s.status === 'idle' || s.status === 'error', { timeout: 15000 });
  await report({ ok: true, first: text(first), second: text(second), statuses, transport: client.clientTools.transport });
  await chat.close();
} catch (e) {
  await report({ ok: false, error: String((e && e.stack) || e) });
}
</script>`;

// Serves the page and dist/, takes the page's report, and passes everything else (HTTP, SSE,
// WebSocket upgrades) through to the Switchboard server.
async function startSite(server) {
  const reports = [];
  const waiters = [];
  const site = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (url.pathname === '/page.html') {
      res.writeHead(200, { 'Content-Type': 'text/html' }).end(page);
    } else if (url.pathname.startsWith('/sdk/')) {
      const file = url.pathname.slice('/sdk/'.length);
      if (!/^[\w-]+\.js$/.test(file)) return res.writeHead(404).end();
      res.writeHead(200, { 'Content-Type': 'text/javascript' });
      res.end(readFileSync(new URL(`../dist/${file}`, import.meta.url)));
    } else if (url.pathname === '/report') {
      let body = '';
      req.on('data', (d) => (body += d)).on('end', () => {
        reports.push(JSON.parse(body));
        for (const w of waiters.splice(0)) w();
        res.writeHead(204).end();
      });
    } else {
      const upstream = http.request(
        { host: '127.0.0.1', port: server.port, method: req.method, path: req.url, headers: req.headers },
        (up) => {
          res.writeHead(up.statusCode, up.headers);
          res.flushHeaders(); // an SSE head must not wait for the first event
          up.pipe(res);
        },
      );
      upstream.on('error', () => res.destroy());
      req.pipe(upstream);
    }
  });
  site.on('upgrade', (req, socket, head) => {
    const upstream = net.connect(server.port, '127.0.0.1', () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      upstream.write(lines.join('\r\n') + '\r\n\r\n');
      upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    const end = () => {
      socket.destroy();
      upstream.destroy();
    };
    upstream.on('error', end).on('close', end);
    socket.on('error', end).on('close', end);
  });
  await new Promise((r) => site.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${site.address().port}`,
    async nextReport(timeout) {
      const deadline = Date.now() + timeout;
      while (!reports.length) {
        if (Date.now() > deadline) throw new Error('the page did not report');
        await new Promise((r) => {
          waiters.push(r);
          setTimeout(r, 200);
        });
      }
      return reports.shift();
    },
    close: () => {
      site.closeAllConnections();
      return new Promise((r) => site.close(r));
    },
  };
}

describe('in a browser', { skip: !chromium && 'no Chromium installed' }, () => {
  let server;
  let site;
  before(async () => {
    server = await startServer({});
    site = await startSite(server);
  });
  after(async () => {
    await site?.close();
    await server?.stop();
  });

  for (const transport of ['sse', 'websocket']) {
    test(`a page answers automatic and interactive client tools (${transport})`, async () => {
      const profile = mkdtempSync(join(tmpdir(), 'sb-chromium-'));
      const browser = spawn(
        chromium,
        ['--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run', `--user-data-dir=${profile}`,
         `${site.url}/page.html?transport=${transport}`],
        // Its own process group, so that cleaning up ends its helper processes too.
        { stdio: ['ignore', 'ignore', 'pipe'], detached: true },
      );
      let stderr = '';
      browser.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
      const exited = new Promise((r) => browser.once('exit', r));
      try {
        const report = await site.nextReport(30000).catch((e) => {
          throw new Error(`${e.message}; chromium said:\n${stderr.slice(-2000)}`);
        });
        assert.equal(report.ok, true, report.error);
        assert.equal(report.transport, transport);
        assert.match(report.first, /page says chrome/);
        assert.match(report.second, /confirmed in the page/);
        assert.ok(report.statuses.includes('awaiting-input'), report.statuses.join());
        assert.equal(report.statuses.at(-1), 'idle');
      } finally {
        try {
          process.kill(-browser.pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
        await exited;
        // Chromium's helper processes may still be writing the profile for a moment.
        rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
      }
    });
  }
});
