// Tool cards that show what a call did: bash as a terminal with its exit code and the real line
// count of its output, edit and write as a diff of the file (signs, not only colour), and an image
// a tool returned as an image that opens larger.
import assert from 'node:assert/strict';
import { crc32, deflateSync } from 'node:zlib';
import { test } from 'node:test';
import { card, screenshot, send, serverAndBrowser } from './support.mjs';

/** A width × height PNG (8-bit RGB) of a few coloured bars. */
function png(width, height) {
  const chunk = (type, data) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(body));
    return Buffer.concat([length, body, crc]);
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8; // bit depth
  header[9] = 2; // RGB
  const colours = [[47, 95, 208], [31, 122, 61], [180, 35, 24], [138, 90, 0]];
  const rows = [];
  for (let y = 0; y < height; y++) {
    const row = Buffer.alloc(1 + width * 3);
    for (let x = 0; x < width; x++) {
      const bar = Math.floor((x / width) * colours.length);
      const on = height - y <= ((bar + 1) / colours.length) * height;
      const [r, g, b] = on ? colours[bar] : [240, 242, 246];
      row.set([r, g, b], 1 + x * 3);
    }
    rows.push(row);
  }
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', deflateSync(Buffer.concat(rows))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

const env = serverAndBrowser({
  config: { permission: { bash: 'allow', edit: 'ask' } },
  files: {
    'notes.txt': 'first line\nsecond line\nthird line\n',
    'old.txt': 'the old content\n',
    'chart.png': png(160, 120),
  },
});

async function page() {
  const p = await env.open();
  await p.getByRole('button', { name: 'New session', exact: true }).click();
  await p.getByText('New session: write a message').waitFor();
  return p;
}

const done = (p, tool) => p.locator(`.tool-card[data-tool="${tool}"][data-status="completed"]`).last();

/** The rows of a card's diff: [sign, text] (hunk headers as ['@@', header]). */
async function diffRows(c) {
  return c.locator('.diff-table tr').evaluateAll((rows) =>
    rows.map((r) => {
      const sign = r.querySelector('.diff-sign');
      return sign ? [sign.textContent, r.querySelector('.diff-text').textContent] : ['@@', r.textContent];
    }),
  );
}

test('bash shows as a terminal with its exit code and the real line count of its output', async () => {
  const p = await page();
  await send(p, '/call bash {"command": "seq 1 30", "description": "Count to thirty"}');
  let c = done(p, 'bash');
  await c.waitFor();
  assert.equal(await c.locator('.terminal-command').innerText(), '$ seq 1 30');
  assert.equal(await c.locator('.exit-code').innerText(), 'exit 0');
  assert.equal(await c.locator('.exit-code').getAttribute('class'), 'exit-code exit-ok');
  // 30 lines ("1\n...\n30\n"), not 31; collapsed, as it is long.
  assert.equal(await c.locator('.tool-output summary').innerText(), 'Output (30 lines)');
  assert.equal(await c.locator('.tool-output').evaluate((d) => d.open), false);
  assert.equal(await c.locator('.tool-input').count(), 0, 'the command is in the terminal, not as JSON');
  await c.locator('.tool-output summary').click();
  assert.match(await c.locator('.tool-output pre').innerText(), /^1\n2\n3\n[\s\S]*\n30\n?$/);

  await send(p, '/call bash {"command": "echo hi 42", "description": "Say hi"}');
  await p.locator('.tool-card[data-tool="bash"][data-status="completed"]').nth(1).waitFor();
  c = done(p, 'bash');
  // One line: no count ("hi 42" showed "Output (2 lines)").
  assert.equal(await c.locator('.tool-output summary').innerText(), 'Output');
  assert.equal(await c.locator('.tool-output pre').innerText(), 'hi 42\n');

  await send(p, '/call bash {"command": "echo oops >&2; exit 3", "description": "Fail on purpose"}');
  await p.locator('.tool-card[data-tool="bash"][data-status="completed"]').nth(2).waitFor();
  c = done(p, 'bash');
  assert.equal(await c.locator('.exit-code').innerText(), 'exit 3');
  assert.equal(await c.locator('.exit-code').getAttribute('class'), 'exit-code exit-fail');
  // The exit code shows once, not also as the note the model reads after the output.
  assert.equal(await c.locator('.tool-output pre').innerText(), 'oops\n');
  await c.scrollIntoViewIfNeeded();
  await screenshot(p, 'bash-terminal');
});

test('an edit shows its diff while its permission is asked and once it is done', async () => {
  const p = await page();
  const input = { filePath: 'notes.txt', oldString: 'second line', newString: 'second line, edited\nan added line' };
  await send(p, `/call edit ${JSON.stringify(input)}`);
  const ask = p.getByRole('group', { name: /Permission needed: edit/ });
  await ask.waitFor();
  const c = card(p, 'edit');
  const want = [
    ['@@', '@@ -1,3 +1,4 @@'],
    [' ', 'first line'],
    ['-', 'second line'],
    ['+', 'second line, edited'],
    ['+', 'an added line'],
    [' ', 'third line'],
  ];
  assert.deepEqual(await diffRows(c), want, 'the person sees what they allow');
  assert.equal(await c.locator('.diff-file').innerText(), 'notes.txt');
  assert.equal(await c.locator('.diff-stat').innerText(), '+2 -1');
  await screenshot(p, 'edit-diff');
  await ask.getByRole('button', { name: 'Allow once' }).click();
  await done(p, 'edit').waitFor();
  assert.deepEqual(await diffRows(c), want);
  // Line numbers of the old and the new file.
  const numbers = await c.locator('.diff-table tr').evaluateAll((rows) =>
    rows.slice(1).map((r) => [...r.querySelectorAll('.diff-num')].map((n) => n.textContent).join('/')),
  );
  assert.deepEqual(numbers, ['1/1', '2/', '/2', '/3', '3/4']);
  // Added and removed lines differ by more than colour: their sign, and their background.
  const background = (kind) => c.locator(`.diff-${kind}`).first().evaluate((r) => getComputedStyle(r).backgroundColor);
  assert.notEqual(await background('add'), await background('del'));

  // A new file: all of it added.
  await send(p, '/call write {"filePath": "fresh.txt", "content": "alpha\\nbeta\\n"}');
  const again = p.getByRole('group', { name: /Permission needed: edit/ });
  await again.waitFor();
  await again.getByRole('button', { name: 'Allow once' }).click();
  await done(p, 'write').waitFor();
  assert.deepEqual(await diffRows(card(p, 'write')), [
    ['@@', '@@ -0,0 +1,2 @@'],
    ['+', 'alpha'],
    ['+', 'beta'],
  ]);

  // A replaced file: the diff its permission ask showed.
  await send(p, '/call write {"filePath": "old.txt", "content": "the new content\\n"}');
  const third = p.getByRole('group', { name: /Permission needed: edit/ });
  await third.waitFor();
  await third.getByRole('button', { name: 'Allow once' }).click();
  await p.locator('.tool-card[data-tool="write"][data-status="completed"]').nth(1).waitFor();
  assert.deepEqual(await diffRows(card(p, 'write')), [
    ['@@', '@@ -1,1 +1,1 @@'],
    ['-', 'the old content'],
    ['+', 'the new content'],
  ]);
});

test('an image a tool returns shows as an image that opens larger', async () => {
  const p = await page();
  await send(p, '/call read {"filePath": "chart.png"}');
  const c = done(p, 'read');
  await c.waitFor();
  const thumb = c.locator('.tool-attachments .attachment-thumb img[alt="chart.png"]');
  await thumb.waitFor();
  assert.equal(await thumb.evaluate((img) => img.complete && img.naturalWidth), 160);
  await screenshot(p, 'tool-image');
  await c.locator('.attachment-thumb').click();
  const dialog = p.getByRole('dialog', { name: 'chart.png' });
  await dialog.waitFor();
  assert.equal(await dialog.locator('img').evaluate((img) => img.naturalHeight), 120);
  await p.keyboard.press('Escape');
  await dialog.waitFor({ state: 'hidden' });

  // After a reload, from the stored message.
  await p.reload();
  await done(p, 'read').locator('.tool-attachments .attachment-thumb img[alt="chart.png"]').waitFor();
});
