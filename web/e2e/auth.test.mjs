// A server with a password (server.password): the page loads, asks for the password, and once
// logged in (a cookie) its API calls, event stream and browser tools' WebSocket all work. The
// tab's client token is kept across a reload.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { launchBrowser, send, startServer, toolID } from './support.mjs';

let server;
let browser;
before(async () => {
  server = await startServer({ config: { server: { password: 'open sesame' } } });
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

test('the page asks for the password, refuses a wrong one, and works once logged in', async () => {
  const context = await browser.newContext({ locale: 'en-US' });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (error) => errors.push(String(error)));
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    // The wrong password's 401 is the one failed load this test expects.
    if (/status of 401/.test(message.text())) return;
    errors.push(`console: ${message.text()}`);
  });
  const unauthorized = [];
  page.on('response', (res) => {
    if (res.status() === 401) unauthorized.push(new URL(res.url()).pathname);
  });
  try {
    await page.goto(server.url + '/');
    const password = page.getByLabel('Password');
    await password.waitFor();
    assert.equal(await page.locator('.app').count(), 0, 'no app before the login');

    await password.fill('wrong');
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByRole('alert').filter({ hasText: 'Wrong password.' }).waitFor();
    assert.deepEqual(unauthorized, ['/auth'], 'only the login was refused; the page called nothing else');

    await password.fill('open sesame');
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.locator('.app[data-client-id]').waitFor();
    page.clientID = await page.locator('.app').getAttribute('data-client-id');
    await page.getByRole('button', { name: 'New session', exact: true }).click();
    await page.getByText('New session: write a message').waitFor();
    await send(page, `/call ${toolID(page, 'get-page-info')} {}`);
    await page.locator('.tool-card[data-tool="get-page-info"][data-status="completed"]').waitFor();

    // The tab's token survives a reload, so the tab is still the same client with its tools.
    const token = await page.evaluate(() => sessionStorage.getItem('switchboard.clientToken'));
    assert.match(token ?? '', /^sbct_/);
    await page.reload();
    await page.locator('.app[data-client-id]').waitFor();
    assert.equal(await page.locator('.app').getAttribute('data-client-id'), page.clientID);
    await send(page, `/call ${toolID(page, 'get-page-info')} {}`);
    await page.locator('.tool-card[data-tool="get-page-info"][data-status="completed"]').nth(1).waitFor();
    assert.deepEqual(unauthorized, ['/auth']);
    assert.deepEqual(errors, []);
  } finally {
    await context.close();
  }
});
