// The model picker: the server's configured providers, the choice reaching the server, and a
// failed turn shown on its message.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { send, serverAndBrowser } from './support.mjs';

const env = serverAndBrowser({
  config: {
    provider: {
      echo: { type: 'scripted' },
      demo: {
        type: 'scripted',
        script: [{ text: 'Hello from the demo script' }, { error: { status: 400, message: 'the demo is over' } }],
      },
    },
    model: 'echo/default',
  },
});

test('the model picker lists the configured models and the chosen one answers', async () => {
  const p = await env.open();
  const picker = p.getByLabel('Model', { exact: true });
  await p.locator('#model option[value="demo/default"]').waitFor({ state: 'attached' });
  assert.equal(await picker.inputValue(), 'echo/default', 'the server default is preselected');
  const options = await p.locator('#model option').evaluateAll((els) => els.map((e) => e.value));
  // The built-in scripted provider is always there beside the configured ones.
  assert.deepEqual(options.sort(), ['demo/default', 'echo/default', 'scripted/default']);
  await p.getByText('The selected model is a scripted model').waitFor();
  const notice = p.locator('.notice');
  assert.match(await notice.textContent(), /It echoes what you write/, 'a scripted provider without a script echoes');

  await send(p, 'to the echo model');
  await p.locator('.message.assistant .text', { hasText: 'Echo: to the echo model' }).waitFor();

  await picker.selectOption('demo/default');
  // A scripted provider with a script does not echo: the notice says what it does instead.
  await p.locator('.notice', { hasText: 'plays the script' }).waitFor({ state: 'attached' });
  assert.doesNotMatch(await notice.textContent(), /echoes/);
  assert.match(await notice.textContent(), /provider demo/);
  await p.getByRole('button', { name: 'New session', exact: true }).click();
  await send(p, 'to the demo model');
  await p.locator('.message.assistant .text', { hasText: 'Hello from the demo script' }).waitFor();
  await p.locator('.topbar [role="status"]:text-is("Ready")').waitFor();
  await send(p, 'once more');
  await p.locator('.turn-error', { hasText: 'the demo is over' }).waitFor();

  await p.reload();
  await p.locator('#model option[value="demo/default"]').waitFor({ state: 'attached' });
  assert.equal(await p.getByLabel('Model', { exact: true }).inputValue(), 'demo/default', 'the choice is remembered');
});
