// File parts of user messages (docs/api.md "Files in prompts"): an image shows as a thumbnail
// that opens larger, another file as a chip with its name and type, and the synthetic text the
// server stored from a text file is not shown as if the person had typed it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { serverAndBrowser } from './support.mjs';

const env = serverAndBrowser({});

// A 1×1 PNG.
const png =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

test('a user message shows its image and its text file, and no synthetic text as typed', async () => {
  const created = await env.server.api('POST', '/session', { title: 'with files' });
  assert.equal(created.status, 200);
  const id = created.body.id;

  const p = await env.open();
  await p.locator(`.session-list li[data-session-id="${id}"] .session-open`).click();
  await p.waitForURL((u) => u.href.endsWith(id));

  // Sent through the API while the page has the session open: the parts reach it as events.
  const sent = await env.server.api('POST', `/session/${id}/message`, {
    parts: [
      { type: 'text', text: 'look' },
      { type: 'file', mime: 'image/png', url: png, filename: 'one.png' },
      { type: 'file', mime: 'text/plain', url: 'data:text/plain,hello%20there%0Asecond', filename: 'notes.txt' },
    ],
  });
  assert.equal(sent.status, 200);
  // The scripted model echoes the synthetic text, so it is in the assistant's answer (not the user's).
  await p.locator('.message.assistant .text', { hasText: 'Echo: look' }).waitFor();

  const check = async () => {
    const user = p.locator('.message.user');
    await user.locator('.attachment-thumb img[alt="one.png"]').waitFor();
    assert.equal(await user.count(), 1);
    assert.equal(await user.locator('.bubble').innerText(), 'look', 'only the typed text is in the bubble');
    const thumb = user.locator('.attachment-thumb img');
    assert.equal(await thumb.getAttribute('src'), png);
    assert.ok(await thumb.evaluate((img) => img.complete && img.naturalWidth === 1), 'the image loaded');
    const box = await thumb.boundingBox();
    assert.ok(box && box.width <= 160 && box.height <= 120, 'the thumbnail is bounded');

    const chip = user.locator('.attachment-chip');
    assert.equal(await chip.count(), 1, 'one chip: the image is not a chip');
    assert.equal(await chip.locator('.attachment-name').innerText(), 'notes.txt');
    assert.equal(await chip.locator('.attachment-mime').innerText(), 'text/plain');
    // The synthetic parts are folded into the chip, out of sight until it is opened.
    for (const hidden of ['Called the Read tool', 'hello there'])
      assert.equal(await user.getByText(hidden).isVisible(), false, `${hidden} is not shown as typed`);
    assert.equal(await user.locator('img').count(), 2, 'the thumbnail and the dialog image; no image for text');
    await chip.locator('summary').click();
    await chip.locator('pre', { hasText: '00001| hello there' }).waitFor();
    await chip.locator('summary').click();
  };
  await check();

  // The thumbnail opens the image in a dialog, named after the file; Escape closes it.
  await p.getByRole('button', { name: 'one.png' }).click();
  const dialog = p.getByRole('dialog', { name: 'one.png' });
  await dialog.waitFor();
  assert.equal(await dialog.locator('img').getAttribute('alt'), 'one.png');
  await p.keyboard.press('Escape');
  await dialog.waitFor({ state: 'hidden' });

  // Stored as listed by GET /session/{id}/message: the same after a reload.
  await p.reload();
  await p.locator('.message.assistant .text', { hasText: 'Echo: look' }).waitFor();
  await check();
});
