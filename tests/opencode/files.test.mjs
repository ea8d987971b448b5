// File parts in prompts ({type: "file", mime, url, filename}) from OpenCode's V1 SDK and from
// `opencode run --attach URL -f FILE`: what reaches the model (the scripted model says what it
// got), what is stored and listed, and the refusals.
import assert from 'node:assert/strict';
import { symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';

import { CASE, must, runAttached, scriptedConfig, serverFor, v1 } from './harness.mjs';

// A 1x1 PNG.
const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC',
  'base64',
);
const pngUrl = `data:image/png;base64,${PNG.toString('base64')}`;

const config = () =>
  scriptedConfig([{ text: 'text: {{lastUserText}} files: {{lastUserFiles}}' }], {
    files: { maxBytes: 4096, maxPromptBytes: 6000 },
  });

describe('file parts', () => {
  const h = serverFor(before, after, () => {
    const c = config();
    // A model that takes text only.
    c.provider.blind = { type: 'scripted', input: ['text'], script: [{ text: 'blind' }] };
    return c;
  });
  let client;
  before(() => {
    const dir = h.server.work;
    writeFileSync(join(dir, 'notes.txt'), 'hello file\nline two\n');
    writeFileSync(join(dir, 'one.png'), PNG);
    writeFileSync(join(dir, 'big.txt'), 'x'.repeat(5000));
    writeFileSync(join(dir, '..', 'sb-files-outside.txt'), 'secret');
    symlinkSync(join(dir, '..', 'sb-files-outside.txt'), join(dir, 'escape.txt'));
    client = v1(h.server);
  });

  const newSession = async () => must(await client.session.create({ body: {} }), 'session.create').id;
  const prompt = async (parts, extra = {}) => {
    const id = await newSession();
    const answer = await client.session.prompt({ path: { id }, body: { parts, ...extra } });
    return { id, answer };
  };
  const answerText = (data) => data.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
  const refusal = (answer) => ({ status: answer.response.status, message: answer.error?.error?.message ?? JSON.stringify(answer.error) });

  it('a data: image reaches the model and is listed with its url', CASE, async () => {
    const { id, answer } = await prompt([
      { type: 'text', text: 'what is this?' },
      { type: 'file', mime: 'image/png', url: pngUrl, filename: 'one.png' },
    ]);
    const data = must(answer, 'session.prompt');
    assert.match(answerText(data), new RegExp(`files: image/png one\\.png \\(${PNG.length} bytes\\)`));
    const messages = must(await client.session.messages({ path: { id } }), 'session.messages');
    const user = messages.find((m) => m.info.role === 'user');
    assert.deepEqual(
      user.parts.map((p) => p.type),
      ['text', 'file'],
    );
    const file = user.parts[1];
    assert.equal(file.url, pngUrl);
    assert.equal(file.mime, 'image/png');
    assert.equal(file.filename, 'one.png');
    assert.equal(file.messageID, user.info.id);
  });

  it('a file:// text file reaches the model as text, stored as synthetic parts', CASE, async () => {
    const url = pathToFileURL(join(h.server.work, 'notes.txt')).href;
    const { id, answer } = await prompt([
      { type: 'file', mime: 'text/plain', url, filename: 'notes.txt' },
      { type: 'text', text: 'summarise' },
    ]);
    const text = answerText(must(answer, 'session.prompt'));
    assert.match(text, /hello file/);
    assert.match(text, /line two/);
    assert.match(text, /summarise/);
    const messages = must(await client.session.messages({ path: { id } }), 'session.messages');
    const parts = messages.find((m) => m.info.role === 'user').parts;
    assert.deepEqual(
      parts.map((p) => [p.type, p.synthetic ?? false]),
      [['text', true], ['text', true], ['file', false], ['text', false]],
    );
    assert.equal(parts[2].url, url);
    assert.match(parts[1].text, /00001\| hello file/);
  });

  it('a plain path in the project works too', CASE, async () => {
    const { answer } = await prompt([{ type: 'file', mime: 'image/png', url: 'one.png' }]);
    assert.match(answerText(must(answer, 'session.prompt')), /files: image\/png one\.png/);
  });

  it('a file outside the project, or a link leading out of it, is a 400', CASE, async () => {
    for (const url of [pathToFileURL(join(h.server.work, '..', 'sb-files-outside.txt')).href, 'escape.txt']) {
      const { answer } = await prompt([{ type: 'file', mime: 'text/plain', url }]);
      const r = refusal(answer);
      assert.equal(r.status, 400, r.message);
      assert.match(r.message, /outside the project directory/);
    }
  });

  it('a file over files.maxBytes, or a prompt over files.maxPromptBytes, is a 413', CASE, async () => {
    const big = await prompt([{ type: 'file', mime: 'text/plain', url: 'big.txt' }]);
    assert.equal(refusal(big.answer).status, 413);
    assert.match(refusal(big.answer).message, /files\.maxBytes/);
    const data = `data:text/plain;base64,${Buffer.from('y'.repeat(4000)).toString('base64')}`;
    const two = await prompt([
      { type: 'file', mime: 'text/plain', url: data },
      { type: 'file', mime: 'text/plain', url: data },
    ]);
    assert.equal(refusal(two.answer).status, 413);
    assert.match(refusal(two.answer).message, /parts\[1\].*files\.maxPromptBytes/);
  });

  it('bad input is a 400 that says what is wrong', CASE, async () => {
    const cases = [
      [{ mime: 'text/plain', url: 'data:text/plain;base64' }, /no ','/],
      [{ mime: 'image/png', url: 'data:image/png;base64,@@@@' }, /not base64/],
      [{ mime: 'image/png', url: 'data:image/png;base64,aGVsbG8=' }, /is not a image\/png image/],
      [{ mime: 'application/zip', url: 'data:application/zip;base64,UEsDBA==' }, /"application\/zip" are not taken/],
      [{ mime: 'text/plain', url: 'nope.txt' }, /no file at/],
      [{ mime: 'text/plain', url: 'https://example.com/a.txt' }, /"https:"/],
      [{ url: 'data:,x' }, /mime/],
    ];
    for (const [part, pattern] of cases) {
      const { answer } = await prompt([{ type: 'file', ...part }]);
      const r = refusal(answer);
      assert.equal(r.status, 400, `${JSON.stringify(part)}: ${r.message}`);
      assert.match(r.message, pattern);
    }
  });

  it('an empty text file and a directory are read as `read` would show them', CASE, async () => {
    const empty = await prompt([{ type: 'file', mime: 'text/plain', url: 'data:text/plain;base64,', filename: 'e.txt' }]);
    assert.match(answerText(must(empty.answer, 'empty')), /This file exists but is empty/);
    const dir = await prompt([{ type: 'file', mime: 'application/x-directory', url: pathToFileURL(h.server.work).href }]);
    assert.match(answerText(must(dir.answer, 'directory')), /notes\.txt/);
  });

  it('a model that does not take images is named in a 400', CASE, async () => {
    const { answer } = await prompt([{ type: 'file', mime: 'image/png', url: pngUrl }], {
      model: { providerID: 'blind', modelID: 'default' },
    });
    const r = refusal(answer);
    assert.equal(r.status, 400);
    assert.match(r.message, /does not take images/);
  });

  it('opencode run --attach -f sends a text file and an image', { timeout: 60000 }, async () => {
    // Absolute: the CLI resolves -f against $PWD, which the test runner's environment sets.
    const at = (name) => join(h.server.work, name);
    const r = await runAttached(h.server, ['what are these?', '-f', at('notes.txt'), '-f', at('one.png')]);
    assert.equal(r.code, 0, r.stderr);
    // What the model got, from its stored answer: `opencode run --attach` exits when its prompt is
    // answered without waiting for the turn's last events, so its stdout may lack the answer's
    // text (docs/opencode.md; cli.test.mjs checks what it prints).
    const sessions = must(await v1(h.server).session.list(), 'session.list');
    const newest = sessions.reduce((a, b) => (a.time.created >= b.time.created ? a : b));
    const list = must(await v1(h.server).session.messages({ path: { id: newest.id } }), 'session.messages');
    const answer = list.at(-1).parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
    assert.match(answer, /hello file/);
    assert.match(answer, /what are these\?/);
    assert.match(answer, /image\/png one\.png/);
  });
});
