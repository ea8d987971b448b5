// GET /doc with real OpenAPI tools: the document validates as OpenAPI 3.1 (swagger-parser), a
// client's types generate from it (openapi-typescript), and the operations Switchboard shares
// with OpenCode sit on the same method and path as in the real OpenCode server's own document.
// (Every test server also checks each of its answers against this document: tests/support.)
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import SwaggerParser from '@apidevtools/swagger-parser';
import openapiTS, { astToString } from 'openapi-typescript';

import { CASE, HOOK, OPENCODE, scriptedConfig, serverFor, waitFor } from './harness.mjs';

const operations = (doc) => {
  const out = new Map();
  for (const [path, item] of Object.entries(doc.paths))
    for (const [method, op] of Object.entries(item)) out.set(op.operationId, `${method.toUpperCase()} ${path}`);
  return out;
};

// The real `opencode serve` on a free port, for its /doc; stopped after.
async function opencodeDoc() {
  const home = mkdtempSync(join(tmpdir(), 'sb-oc-doc-'));
  const child = spawn(OPENCODE, ['serve', '--hostname', '127.0.0.1', '--port', '0'], {
    cwd: home,
    env: { PATH: process.env.PATH, HOME: home, XDG_CONFIG_HOME: join(home, '.config'),
           XDG_DATA_HOME: join(home, '.local', 'share'), OPENCODE_DISABLE_AUTOUPDATE: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let logs = '';
  for (const s of [child.stdout, child.stderr]) s.setEncoding('utf8').on('data', (c) => (logs += c));
  try {
    const url = await waitFor(() => /https?:\/\/127\.0\.0\.1:\d+/.exec(logs)?.[0], 'opencode serve to listen', 30000, () => logs);
    const res = await fetch(`${url}/doc`);
    assert.equal(res.status, 200);
    return await res.json();
  } finally {
    child.kill('SIGKILL');
  }
}

describe('GET /doc', () => {
  const h = serverFor(before, after, scriptedConfig([{ text: 'hi' }]));
  let doc;
  before(async () => {
    const res = await fetch(`${h.server.url}/doc`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /application\/json/);
    doc = await res.json();
  }, HOOK);

  it('is a valid OpenAPI 3.1 document whose every $ref resolves', CASE, async () => {
    assert.equal(doc.openapi, '3.1.0');
    await SwaggerParser.validate(structuredClone(doc)); // throws with the first violation
    const resolved = await SwaggerParser.dereference(structuredClone(doc));
    const prompt = resolved.paths['/session/{sessionID}/message'].post;
    assert.equal(prompt.requestBody.content['application/json'].schema.type, 'object');
    assert.ok(prompt.responses['200'].content['application/json'].schema.properties.parts);
  });

  it('generates a typed client with openapi-typescript', CASE, async () => {
    const types = astToString(await openapiTS(structuredClone(doc)));
    assert.match(types, /export interface paths/);
    for (const id of ['session.prompt', 'clientTools.register', 'event.subscribe', 'config.providers'])
      assert.ok(types.includes(`"${id}"`), `no ${id} in the generated types`);
    assert.match(types, /"\/session\/\{sessionID\}\/message": \{/);
  });

  it("puts each operation it shares with OpenCode on OpenCode's method and path", HOOK, async () => {
    const theirs = operations(await opencodeDoc());
    const ours = operations(doc);
    const shared = [...ours.keys()].filter((id) => theirs.has(id));
    assert.ok(shared.length >= 40, `only ${shared.length} shared operationIds`);
    for (const id of shared) assert.equal(ours.get(id), theirs.get(id), id);
  });
});
