// The chat page in Debian's Chromium against the real server and its scripted model (no model
// configured: it echoes, and `/call TOOL {json}` calls a tool).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { card, screenshot, send, serverAndBrowser, toolID } from './support.mjs';

const env = serverAndBrowser({
  config: { permission: { bash: 'ask' } },
  files: { 'notes.txt': 'first line of the notes\nsecond line\n' },
});

// A new tab on a new session of its own.
async function page() {
  const p = await env.open();
  await p.getByRole('button', { name: 'New session', exact: true }).click();
  await p.getByText('New session: write a message').waitFor();
  return p;
}

const output = (p, tool) => card(p, tool).locator('.tool-output pre').textContent();

const status = (p) => p.locator('.topbar [role="status"]');
const promptBox = (p) => p.getByLabel('Message', { exact: true });

async function statusIs(p, text) {
  await p.locator(`.topbar [role="status"]:text-is("${text}")`).waitFor();
}

describe('the page', () => {
  test('is served from the binary with its assets, and says the scripted model answers', async () => {
    const index = await fetch(env.server.url + '/');
    assert.equal(index.status, 200);
    assert.match(index.headers.get('content-type'), /^text\/html/);
    assert.equal(index.headers.get('cache-control'), 'no-cache');
    const etag = index.headers.get('etag');
    const html = await index.text();
    const script = /src="(\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    assert.ok(script, 'index.html loads a script from /assets/');
    const js = await fetch(env.server.url + script);
    assert.equal(js.status, 200);
    assert.match(js.headers.get('content-type'), /^text\/javascript/);
    assert.match(js.headers.get('cache-control'), /immutable/);
    const again = await fetch(env.server.url + '/', { headers: { 'If-None-Match': etag } });
    assert.equal(again.status, 304);
    const missing = await fetch(env.server.url + '/assets/nope.js');
    assert.equal(missing.status, 404);
    assert.equal((await missing.json()).error.code, 'NOT_FOUND');
    const health = await fetch(env.server.url + '/health');
    assert.equal((await health.json()).healthy, true, 'API routes keep working beside the page');

    const p = await page();
    await p.getByText('No model provider is configured').waitFor();
    await p.getByRole('button', { name: /get-page-info/ }).waitFor();
    // The long examples wrap between words ("archive folde / r." before), and each bullet sits
    // beside the first line of its example: the example is a block in its item (the bullet goes on
    // an inline-block's baseline, which is its last line).
    const examples = await p.locator('.examples button').evaluateAll((buttons) =>
      buttons.map((b) => {
        const text = b.firstChild;
        const range = document.createRange();
        const tops = () => new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
        const split = [];
        let at = 0;
        for (const word of text.data.split(' ')) {
          range.setStart(text, at);
          range.setEnd(text, at + word.length);
          if (tops() > 1) split.push(word);
          at += word.length + 1;
        }
        range.selectNodeContents(text);
        return { lines: tops(), split, display: getComputedStyle(b).display };
      }),
    );
    assert.ok(examples.some((e) => e.lines > 1), 'an example takes more than one line');
    assert.deepEqual(examples.flatMap((e) => e.split), [], 'no word broken across lines');
    assert.deepEqual(new Set(examples.map((e) => e.display)), new Set(['block']));
    await p.getByText('It echoes what you write').waitFor();
    assert.equal(await p.locator('#model').inputValue(), 'scripted/default');
  });

  test('streams the assistant text of a turn and lists the new session', async () => {
    const p = await page();
    await send(p, 'hello there');
    await p.locator('.message.user .bubble', { hasText: 'hello there' }).waitFor();
    await p.locator('.message.assistant .text', { hasText: 'Echo: hello there' }).waitFor();
    await statusIs(p, 'Ready');
    await p.locator('.session-list li.current').waitFor();
  });

  test('a server tool shows as a card that completes with its output', async () => {
    const p = await page();
    await send(p, '/call read {"filePath": "notes.txt"}');
    const c = card(p, 'read');
    await p.locator('.tool-card[data-tool="read"][data-status="completed"]').waitFor();
    assert.match(await output(p, 'read'), /first line of the notes/);
    await c.locator('.tool-input summary').click();
    assert.match(await c.locator('.tool-input pre').innerText(), /"filePath": "notes.txt"/);
    await p.locator('.message.assistant .text', { hasText: 'Tool results:' }).waitFor();
    await screenshot(p, 'server-tool');
  });

  test('automatic browser tools answer without a person', async () => {
    const p = await page();
    await send(p, `/call ${toolID(p, 'get-page-info')} {}`);
    await p.locator('.tool-card[data-tool="get-page-info"][data-status="completed"]').waitFor();
    const info = JSON.parse(await output(p, 'get-page-info'));
    assert.equal(info.title, 'Switchboard');
    assert.equal(info.timeZone, 'Europe/Paris');
    assert.equal(new URL(info.url).origin, env.server.url);

    await send(p, `/call ${toolID(p, 'copy-to-clipboard')} {"text": "copied by the model"}`);
    await p.locator('.tool-card[data-tool="copy-to-clipboard"][data-status="completed"]').waitFor();
    assert.equal(await p.evaluate(() => navigator.clipboard.readText()), 'copied by the model');

    await p.evaluate(() => navigator.clipboard.writeText('put there by the person'));
    await send(p, `/call ${toolID(p, 'read-clipboard')} {}`);
    await p.locator('.tool-card[data-tool="read-clipboard"][data-status="completed"]').waitFor();
    assert.equal(await output(p, 'read-clipboard'), 'put there by the person');

    await send(p, `/call ${toolID(p, 'get-browser-location')} {}`);
    await p.locator('.tool-card[data-tool="get-browser-location"][data-status="completed"]').waitFor();
    const where = JSON.parse(await output(p, 'get-browser-location'));
    assert.equal(where.latitude, 48.8584);
    assert.equal(where.longitude, 2.2945);
    await screenshot(p, 'browser-tools');
  });

  test('an interactive confirm waits for a click, with the prompt box disabled', async () => {
    const p = await page();
    await send(p, `/call ${toolID(p, 'confirm-action')} {"action": "Archive the report", "description": "It moves to the archive."}`);
    const dialog = p.getByRole('dialog', { name: 'Confirm: Archive the report' });
    await dialog.waitFor();
    await statusIs(p, 'Awaiting input');
    assert.equal(await promptBox(p).isDisabled(), true);
    assert.equal(await card(p, 'confirm-action').getAttribute('data-status'), 'awaiting');
    await screenshot(p, 'confirm-awaiting');

    await dialog.getByRole('button', { name: 'Confirm' }).click();
    await p.locator('.tool-card[data-tool="confirm-action"][data-status="completed"]').waitFor();
    await dialog.waitFor({ state: 'detached' });
    await p.locator('.message.assistant .text', { hasText: 'The user confirmed: Archive the report' }).waitFor();
    await statusIs(p, 'Ready');
    assert.equal(await promptBox(p).isDisabled(), false);
  });

  test('cancelling an interactive confirm sends the reason to the model', async () => {
    const p = await page();
    await send(p, `/call ${toolID(p, 'confirm-action')} {"action": "Delete everything", "destructive": true}`);
    const dialog = p.getByRole('dialog', { name: 'Confirm: Delete everything' });
    await dialog.waitFor();
    await dialog.getByLabel('Reason if you cancel').fill('not today');
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await p.locator('.tool-card[data-tool="confirm-action"][data-status="cancelled"]').waitFor();
    assert.match(await card(p, 'confirm-action').locator('.tool-error').innerText(), /The user cancelled: not today/);
    // The scripted model reports what it was told back as text.
    await p.locator('.message.assistant .text', { hasText: 'The user cancelled: not today' }).waitFor();
    await statusIs(p, 'Ready');
  });

  test('request-input builds a form from the JSON Schema and select-option a choice', async () => {
    const p = await page();
    const schema = {
      type: 'object',
      properties: {
        name: { type: 'string', title: 'Your name' },
        age: { type: 'integer', minimum: 0 },
        plan: { enum: ['free', 'pro'] },
        newsletter: { type: 'boolean', title: 'Send me the newsletter' },
      },
      required: ['name'],
    };
    await send(p, `/call ${toolID(p, 'request-input')} ${JSON.stringify({ prompt: 'Sign up', schema })}`);
    const form = p.getByRole('dialog', { name: 'Sign up' });
    await form.waitFor();
    await form.getByRole('button', { name: 'Submit' }).click();
    // A required field left empty: the browser's own validation keeps the form open.
    assert.equal(await form.isVisible(), true);
    await form.getByLabel('Your name').fill('Ada');
    await form.getByLabel('age').fill('36');
    await form.getByLabel('plan').selectOption('pro');
    await form.getByLabel('Send me the newsletter').check();
    await screenshot(p, 'request-input');
    await form.getByRole('button', { name: 'Submit' }).click();
    await p.locator('.tool-card[data-tool="request-input"][data-status="completed"]').waitFor();
    const answer = JSON.parse(await output(p, 'request-input'));
    assert.deepEqual(answer, { name: 'Ada', age: 36, plan: 'pro', newsletter: true });

    await send(p, `/call ${toolID(p, 'select-option')} {"prompt": "Pick a color", "options": ["red", {"label": "Green", "value": "g"}]}`);
    const choice = p.getByRole('dialog', { name: 'Pick a color' });
    await choice.waitFor();
    await choice.getByLabel('Green').check();
    await choice.getByRole('button', { name: 'Choose' }).click();
    await p.locator('.tool-card[data-tool="select-option"][data-status="completed"]').waitFor();
    assert.deepEqual(JSON.parse(await output(p, 'select-option')), { selected: 'g' });
  });

  test('a permission ask is answered in place', async () => {
    const p = await page();
    await send(p, '/call bash {"command": "echo allowed-by-a-person", "description": "Print a word"}');
    const ask = p.getByRole('group', { name: /Permission needed: bash/ });
    await ask.waitFor();
    await statusIs(p, 'Awaiting input');
    assert.equal(await card(p, 'bash').getAttribute('data-status'), 'awaiting');
    await screenshot(p, 'permission');
    await ask.getByRole('button', { name: 'Allow once' }).click();
    await p.locator('.tool-card[data-tool="bash"][data-status="completed"]').waitFor();
    assert.match(await output(p, 'bash'), /allowed-by-a-person/);
    // One line of output ("allowed-by-a-person\n"): no line count, not "(2 lines)".
    assert.equal(await card(p, 'bash').locator('.tool-output summary').innerText(), 'Output');
    await statusIs(p, 'Ready');

    await send(p, '/call bash {"command": "rm -rf build", "description": "Clean"}');
    const again = p.getByRole('group', { name: /Permission needed: bash/ });
    await again.waitFor();
    await again.getByLabel('Message to the model').fill('use make clean instead');
    await again.getByRole('button', { name: 'Reject' }).click();
    await p.locator('.tool-card[data-tool="bash"][data-status="error"]').waitFor();
    assert.match(await card(p, 'bash').locator('.tool-error').innerText(), /use make clean instead/);

    // A bare reject stops the turn, and the turn says why in words (not an error's name).
    await send(p, '/call bash {"command": "rm -rf dist", "description": "Clean dist"}');
    const third = p.getByRole('group', { name: /Permission needed: bash/ });
    await third.waitFor();
    await third.getByRole('button', { name: 'Reject' }).click();
    const stopped = p.locator('.turn-error', { hasText: 'The user rejected permission to use bash' });
    await stopped.waitFor();
    assert.doesNotMatch(await stopped.innerText(), /PermissionRejectedError/);
  });

  test("the server's question tool is answered in its card", async () => {
    const p = await page();
    const questions = [{ question: 'Which color?', header: 'Color', options: [{ label: 'red' }, { label: 'blue' }] }];
    await send(p, `/call question ${JSON.stringify({ questions })}`);
    const ask = p.getByRole('group', { name: 'Questions from the model' });
    await ask.waitFor();
    await statusIs(p, 'Awaiting input');
    await ask.getByLabel('blue').check();
    await ask.getByRole('button', { name: 'Answer' }).click();
    await p.locator('.tool-card[data-tool="question"][data-status="completed"]').waitFor();
    assert.match(await output(p, 'question'), /"Which color\?" = "blue"/);
    await statusIs(p, 'Ready');
  });

  test('Stop during a waiting tool closes it and the card shows it cancelled', async () => {
    const p = await page();
    await send(p, `/call ${toolID(p, 'confirm-action')} {"action": "Send the email"}`);
    const dialog = p.getByRole('dialog', { name: 'Confirm: Send the email' });
    await dialog.waitFor();
    await p.getByRole('button', { name: 'Stop' }).click();
    await dialog.waitFor({ state: 'detached' });
    await p.locator('.tool-card[data-tool="confirm-action"][data-status="cancelled"]').waitFor();
    await p.locator('.turn-error', { hasText: 'Stopped.' }).waitFor();
    await statusIs(p, 'Ready');
    assert.equal(await promptBox(p).isDisabled(), false);
  });

  test('a reload finds the session intact', async () => {
    const p = await page();
    await send(p, '/call read {"filePath": "notes.txt"}');
    await p.locator('.tool-card[data-tool="read"][data-status="completed"]').waitFor();
    await send(p, 'after the tool');
    await p.locator('.message.assistant .text', { hasText: 'Echo: after the tool' }).waitFor();
    const url = p.url();
    assert.match(url, /#\/session\/ses_/);
    // Until the list has loaded, the session in the URL shows as opening and takes no prompt (one
    // typed then went to a new session). The list is held back to see that state.
    let release;
    const held = new Promise((resolve) => (release = resolve));
    const list = (u) => u.pathname === '/session';
    await p.route(list, async (route) => {
      await held;
      await route.continue();
    });
    await p.reload();
    await p.getByText('Opening the session…').waitFor();
    assert.equal(await promptBox(p).isDisabled(), true, 'no prompt while the session opens');
    release();
    await p.locator('.message.assistant .text', { hasText: 'Echo: after the tool' }).waitFor();
    await p.unroute(list);
    assert.equal(p.url(), url);
    await p.locator('.tool-card[data-tool="read"][data-status="completed"]').waitFor();
    assert.equal(await p.locator('.message.user').count(), 2);
    await statusIs(p, 'Ready');
  });

  test('New session clicked before the list has loaded stays chosen', async () => {
    await env.server.api('POST', '/session', { title: 'an earlier session' });
    let release;
    const listed = new Promise((r) => (release = r));
    const p = await env.open({
      beforeLoad: (tab) =>
        tab.route(/\/session$/, async (route) => {
          if (route.request().method() === 'GET') await listed;
          await route.continue();
        }),
    });
    await p.getByRole('button', { name: 'New session', exact: true }).click();
    release();
    await p.locator('.session-list li').first().waitFor();
    await p.getByText('New session: write a message').waitFor();
    assert.equal(await p.locator('.session-list li.current').count(), 0, 'no earlier session was opened over it');
  });

  test('sessions can be created, switched and deleted', async () => {
    const p = await page();
    await send(p, 'in the first session');
    await p.locator('.message.assistant .text', { hasText: 'Echo: in the first session' }).waitFor();
    const first = p.url();
    await p.getByRole('button', { name: 'New session', exact: true }).click();
    await p.getByText('New session: write a message').waitFor();
    await send(p, 'in the second session');
    await p.locator('.message.assistant .text', { hasText: 'Echo: in the second session' }).waitFor();
    const second = p.url();
    assert.notEqual(second, first);
    // The session is named after its first message.
    assert.equal(await p.locator('.session-list li.current .session-title').innerText(), 'in the second session');

    const firstID = first.split('/').pop();
    const secondID = second.split('/').pop();
    assert.equal(await p.locator('.session-list li.current').getAttribute('data-session-id'), secondID);
    await p.locator(`.session-list li[data-session-id="${firstID}"] .session-open`).click();
    await p.waitForURL((u) => u.href.endsWith(firstID));
    await p.locator('.message.assistant .text', { hasText: 'Echo: in the first session' }).waitFor();
    // Choosing the open session again keeps it as it is.
    await p.locator(`.session-list li[data-session-id="${firstID}"] .session-open`).click();
    await p.waitForTimeout(200);
    assert.equal(await p.locator('.message.assistant .text', { hasText: 'Echo: in the first session' }).count(), 1);

    p.once('dialog', (d) => d.accept());
    await p.locator('.session-list li.current .session-delete').click();
    await p.waitForURL((u) => !u.href.endsWith(firstID));
    const gone = await env.server.api('GET', `/session/${firstID}`);
    assert.equal(gone.status, 404);
    assert.ok((await env.server.api('GET', `/session/${secondID}`)).status === 200);
  });
});

describe('a waiting interactive tool', () => {
  test('ends with "Client disconnected" when the person leaves its session', async () => {
    const p = await page();
    await send(p, `/call ${toolID(p, 'confirm-action')} {"action": "Rename the file"}`);
    await p.getByRole('dialog', { name: 'Confirm: Rename the file' }).waitFor();
    const session = p.url().split('/').pop();
    await p.getByRole('button', { name: 'New session', exact: true }).click();
    await p.getByText('New session: write a message').waitFor();
    await p.locator(`.session-list li[data-session-id="${session}"] .session-open`).click();
    await p.locator('.tool-card[data-tool="confirm-action"][data-status="error"]').waitFor();
    assert.match(await card(p, 'confirm-action').locator('.tool-error').innerText(), /Client disconnected/);
    await statusIs(p, 'Ready');
  });

  test('survives a reload of the page and can still be answered', async () => {
    const p = await page();
    await send(p, `/call ${toolID(p, 'confirm-action')} {"action": "Publish the post"}`);
    await p.getByRole('dialog', { name: 'Confirm: Publish the post' }).waitFor();
    await p.reload();
    // Same tab, same client id: within the server's reconnect grace the call comes back.
    const dialog = p.getByRole('dialog', { name: 'Confirm: Publish the post' });
    await dialog.waitFor();
    await statusIs(p, 'Awaiting input');
    await dialog.getByRole('button', { name: 'Confirm' }).click();
    await p.locator('.tool-card[data-tool="confirm-action"][data-status="completed"]').waitFor();
    await p.locator('.message.assistant .text', { hasText: 'The user confirmed: Publish the post' }).waitFor();
  });
});
