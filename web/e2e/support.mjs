// Test support: Debian's Chromium driven by playwright-core, on the page of a real
// `switchboard serve` (started by the TypeScript SDK's test support: SWITCHBOARD_BIN names the
// binary). CHROMIUM_BIN names the browser (default /usr/bin/chromium). Screenshots go to
// SCREENSHOT_DIR when it is set (`npm run screenshots` writes docs/img/).
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import assert from 'node:assert/strict';
import { after, afterEach, before } from 'node:test';
import { chromium } from 'playwright-core';
import { call, startServer as startSwitchboard } from '../../sdk/js/test/support.mjs';

/**
 * A running server with `config`; `files` are written into its project directory. The result
 * has url, restart() (same port and data), stopProcess(), stop() (also removes its files).
 */
export async function startServer({ config = {}, files = {} } = {}) {
  const server = await startSwitchboard(config);
  for (const [name, text] of Object.entries(files)) await writeFile(path.join(server.work, name), text);
  server.api = (method, route, body) => call(server, method, route, body);
  return server;
}

/**
 * Registers hooks that start a server (startServer's options) and a browser before the file's
 * tests and stop both after them. `env.open()` opens a tab (openPage); after each test every tab
 * it opened must have contacted only the server and thrown no error, and is closed.
 */
export function serverAndBrowser(options) {
  const pages = [];
  const env = {
    server: undefined,
    browser: undefined,
    async open(options) {
      const p = await openPage(env.browser, env.server, options);
      pages.push(p);
      return p;
    },
  };
  before(async () => {
    env.server = await startServer(options);
    env.browser = await launchBrowser();
  });
  afterEach(async () => {
    for (const p of pages.splice(0)) {
      assert.deepEqual(p.foreign, [], 'the page contacted only its own server');
      assert.deepEqual(p.errors, [], 'the page threw and logged no errors');
      await p.context().close();
    }
  });
  after(async () => {
    await env.browser?.close();
    await env.server?.stop();
  });
  return env;
}

export async function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM_BIN ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox'],
  });
}

/**
 * A fresh browser context (its own tab storage, so its own client id) on the server's page.
 * Records every request that leaves the server's origin and every page error. `beforeLoad(page)`
 * runs before the page loads (to route requests, say).
 */
export async function openPage(browser, server, { beforeLoad } = {}) {
  const context = await browser.newContext({
    viewport: { width: 1280, height: 820 },
    permissions: ['clipboard-read', 'clipboard-write', 'geolocation'],
    geolocation: { latitude: 48.8584, longitude: 2.2945, accuracy: 12 },
    locale: 'en-US',
    timezoneId: 'Europe/Paris',
  });
  const page = await context.newPage();
  page.foreign = [];
  page.errors = [];
  page.on('request', (req) => {
    const url = new URL(req.url());
    if (url.protocol !== 'data:' && url.host !== new URL(server.url).host) page.foreign.push(req.url());
  });
  page.on('pageerror', (error) => page.errors.push(String(error)));
  // Console errors too: a Content-Security-Policy violation or a failed load shows up there.
  // A test that stops the server sets page.serverGoesAway, which makes failed loads expected.
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    const text = message.text();
    if (page.serverGoesAway && /ERR_CONNECTION_REFUSED|ERR_EMPTY_RESPONSE|WebSocket connection|Failed to load resource|ERR_INCOMPLETE_CHUNKED_ENCODING|network error/i.test(text)) return;
    page.errors.push(`console: ${text}`);
  });
  await beforeLoad?.(page);
  await page.goto(server.url + '/');
  await page.locator('.app[data-client-id]').waitFor();
  page.clientID = await page.locator('.app').getAttribute('data-client-id');
  return page;
}

/** The full id of one of the page's browser tools. */
export function toolID(page, name) {
  return `client_${page.clientID}_${name}`;
}

/**
 * Types a prompt into the box and sends it with Enter, once the page offers to send: while the
 * previous turn still runs (its Stop button shows) Enter keeps the draft and sends nothing, as a
 * person would see.
 */
export async function send(page, text) {
  const box = page.getByLabel('Message', { exact: true });
  await box.fill(text);
  await page.locator('.composer button[type="submit"]:not([disabled])').waitFor();
  await box.press('Enter');
}

/** The card of the last call of `tool` (its short name for browser tools). */
export function card(page, tool) {
  return page.locator(`.tool-card[data-tool="${tool}"]`).last();
}

export async function screenshot(page, name) {
  const dir = process.env.SCREENSHOT_DIR;
  if (!dir) return;
  await mkdir(dir, { recursive: true });
  await page.screenshot({ path: path.join(dir, `${name}.png`) });
}
