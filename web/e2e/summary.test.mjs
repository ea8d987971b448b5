// A summarized conversation (POST /session/{id}/summarize, OpenCode's /compact): the request for
// the summary shows as a note, not as an empty message of the person's, and the summary is
// labelled as one; both live and after a reload.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { serverAndBrowser } from './support.mjs';

const env = serverAndBrowser({});

test('a summary shows as a note and a labelled answer, live and after a reload', async () => {
  const created = await env.server.api('POST', '/session', { title: 'summarized' });
  assert.equal(created.status, 200);
  const id = created.body.id;
  assert.equal((await env.server.api('POST', `/session/${id}/message`, { parts: [{ type: 'text', text: 'remember tulips' }] })).status, 200);

  const p = await env.open();
  await p.locator(`.session-list li[data-session-id="${id}"] .session-open`).click();
  await p.waitForURL((u) => u.href.endsWith(id));
  await p.locator('.message.assistant .text', { hasText: 'Echo: remember tulips' }).waitFor();

  const summarized = await env.server.api('POST', `/session/${id}/summarize`, {});
  assert.equal(summarized.status, 200);
  assert.equal(summarized.body, true);

  const check = async () => {
    const note = p.locator('.message.compaction[role="note"]');
    await note.waitFor();
    assert.match(await note.innerText(), /summarized below/);
    const summary = p.locator('.message.assistant.summary');
    await summary.waitFor();
    assert.equal(await summary.locator('.who').innerText(), 'Summary of the conversation');
    // The scripted model echoes what it is asked: the request for a summary.
    await summary.locator('.text', { hasText: 'Summarize our conversation' }).waitFor();
    assert.equal(await p.locator('.message.user .bubble').count(), 1, 'no empty bubble for the request');
  };
  await check();
  await p.reload();
  await check();
});
