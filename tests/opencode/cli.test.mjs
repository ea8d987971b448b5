// `opencode run --attach URL`: OpenCode's CLI as a client of Switchboard.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { CASE, runAttached, scriptedConfig, serverFor } from './harness.mjs';

describe('opencode run --attach', () => {
  const h = serverFor(before, after, () => scriptedConfig([{ text: 'hello from switchboard' }]));

  it('prints the model\'s answer and exits 0', CASE, async () => {
    const r = await runAttached(h.server, ['say hello']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /hello from switchboard/);
  });
});
