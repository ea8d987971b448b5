// The page across a server restart: it shows that it is reconnecting, comes back by itself,
// registers its browser tools again and keeps the session.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { screenshot, send, serverAndBrowser, toolID } from './support.mjs';

const env = serverAndBrowser();

test('the page reconnects after a server restart and its browser tools work again', async () => {
  const p = await env.open();
  await send(p, 'before the restart');
  await p.locator('.message.assistant .text', { hasText: 'Echo: before the restart' }).waitFor();

  p.serverGoesAway = true;
  await env.server.stopProcess();
  const banner = p.getByTestId('reconnecting');
  await banner.waitFor();
  assert.match(await banner.innerText(), /Reconnecting/);
  await screenshot(p, 'reconnecting');

  await env.server.restart();
  await banner.waitFor({ state: 'detached', timeout: 20000 });
  await p.locator('.message.assistant .text', { hasText: 'Echo: before the restart' }).waitFor();

  await send(p, `/call ${toolID(p, 'get-page-info')} {}`);
  await p.locator('.tool-card[data-tool="get-page-info"][data-status="completed"]').waitFor();
});
