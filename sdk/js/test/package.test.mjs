// The package as users get it: ES modules that load in a browser (nothing but relative imports,
// no Node built-ins), type declarations for the entry point, no runtime dependencies.
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { test } from 'node:test';

const dist = new URL('../dist/', import.meta.url);
const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));

test('the built modules import only each other', () => {
  const files = readdirSync(dist).filter((f) => f.endsWith('.js'));
  assert.ok(files.includes('index.js'), 'dist/index.js is built');
  for (const file of files) {
    const text = readFileSync(new URL(file, dist), 'utf8');
    const specifiers = [...text.matchAll(/^(?:import|export)\s[^;]*?from\s+'([^']+)'/gm)].map((m) => m[1]);
    for (const s of specifiers) assert.match(s, /^\.\/[\w-]+\.js$/, `${file} imports ${s}`);
    assert.doesNotMatch(text, /\brequire\(|process\.|Buffer\b/, `${file} uses a Node-only global`);
  }
});

test('the entry point has type declarations and the package has no runtime dependencies', async () => {
  assert.equal(pkg.type, 'module');
  assert.equal(pkg.exports['.'].types, './dist/index.d.ts');
  const dts = readFileSync(new URL('index.d.ts', dist), 'utf8');
  for (const name of ['ClientToolsManager', 'SwitchboardClient', 'Chat', 'ChatState'])
    assert.match(dts, new RegExp(`\\b${name}\\b`));
  assert.match(dts, /export \* from '\.\/errors\.js'/);
  assert.match(readFileSync(new URL('errors.d.ts', dist), 'utf8'), /class SwitchboardError/);
  assert.equal(pkg.dependencies, undefined);
  const sdk = await import('@switchboard/sdk');
  for (const name of ['ClientToolsManager', 'SwitchboardClient', 'Chat', 'SwitchboardError', 'readSSE'])
    assert.equal(typeof sdk[name], 'function', name);
});
