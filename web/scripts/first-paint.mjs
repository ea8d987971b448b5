// Measures the page as a browser gets it from one or more server binaries, in one run so that the
// numbers compare: the bytes of each asset on the wire (gzipped when the server does so) and as
// served uncompressed, and over RUNS cold loads (a new browser context each, the binaries taking
// turns) the median time from the navigation's start to the first contentful paint, and to the
// moment an answer of a stored session is in the page (`.message.assistant .text`, or its `h1`
// in `.text.markdown` when the page renders markdown).
//
//   node scripts/first-paint.mjs NAME=BINARY [NAME=BINARY ...]
//   node scripts/first-paint.mjs before=/tmp/switchboard-old after=../build/release/switchboard
//
// RUNS (default 15) sets the number of loads per binary; CHROMIUM_BIN the browser.
import { gzipSync } from 'node:zlib';
import { launchBrowser } from '../e2e/support.mjs';
import { call, startServer } from '../../sdk/js/test/support.mjs';

const runs = Number(process.env.RUNS ?? 15);
const targets = process.argv.slice(2).map((arg) => {
  const [name, bin] = arg.split('=');
  if (!name || !bin) throw new Error(`usage: first-paint.mjs NAME=BINARY ...; got ${arg}`);
  return { name, bin };
});
if (!targets.length) throw new Error('usage: first-paint.mjs NAME=BINARY ...');

const answer = [
  '# A heading',
  '',
  'Some **bold** text, a [link](https://example.com) and `code`.',
  '',
  '| a | b |',
  '|---|---|',
  '| 1 | 2 |',
  '',
  '```python',
  'def f(x):',
  '    return x * 2',
  '```',
].join('\n');

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

async function assets(server) {
  const index = await (await fetch(server.url + '/')).text();
  const names = ['/', ...[...index.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1])];
  // Chunks loaded later by import(): named in the scripts that import them.
  for (let i = 0; i < names.length; i++) {
    if (!names[i].endsWith('.js')) continue;
    const script = await (await fetch(server.url + names[i])).text();
    for (const m of script.matchAll(/["'`](?:\.\/|\/assets\/)([\w-]+\.js)["'`]/g))
      if (!names.includes(`/assets/${m[1]}`)) names.push(`/assets/${m[1]}`);
  }
  const out = [];
  for (const name of names) {
    const got = await fetch(server.url + name, { headers: { 'Accept-Encoding': 'identity' } });
    if (!got.ok) continue;
    const plain = Buffer.from(await got.arrayBuffer());
    const wire = await fetch(server.url + name, { headers: { 'Accept-Encoding': 'gzip' } });
    const encoding = wire.headers.get('content-encoding') ?? 'identity';
    // fetch decodes what it receives: the bytes on the wire are those of content-length.
    const onWire = Number(wire.headers.get('content-length') ?? (await wire.arrayBuffer()).byteLength);
    out.push({ name, bytes: plain.length, onWire, encoding, gzip9: gzipSync(plain, { level: 9 }).length });
  }
  return out;
}

/**
 * A cold load of `path` (a new context): the first contentful paint, and when an element matching
 * `selector` first appeared (a MutationObserver from before the page's own scripts), in ms since
 * the navigation started.
 */
async function load(browser, server, path, selector) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 820 } });
  const page = await context.newPage();
  await page.addInitScript((selector) => {
    new MutationObserver((_, observer) => {
      window.__text ??= document.querySelector('.message.assistant .text') ? performance.now() : undefined;
      if (!document.querySelector(selector)) return;
      window.__shown = performance.now();
      observer.disconnect();
    }).observe(document, { childList: true, subtree: true });
  }, selector);
  await page.goto(server.url + path);
  await page.locator(selector).first().waitFor();
  const times = await page.evaluate(
    () =>
      new Promise((resolve) => {
        new PerformanceObserver((list) => {
          const fcp = list.getEntriesByName('first-contentful-paint')[0];
          if (fcp) resolve({ fcp: fcp.startTime, shown: window.__shown, text: window.__text });
        }).observe({ type: 'paint', buffered: true });
      }),
  );
  await context.close();
  return times;
}

const browser = await launchBrowser();
for (const t of targets) {
  process.env.SWITCHBOARD_BIN = t.bin;
  t.server = await startServer({
    provider: { demo: { type: 'scripted', script: [{ text: answer }] } },
    model: 'demo/default',
  });
  const session = await call(t.server, 'POST', '/session', { title: 'measured' });
  await call(t.server, 'POST', `/session/${session.body.id}/message`, { parts: [{ type: 'text', text: 'hi' }] });
  t.session = session.body.id;
  t.assets = await assets(t.server);
  t.empty = [];
  t.answer = [];
  t.text = [];
}
// The binaries take turns, so that a slower moment of the machine does not fall on one of them.
for (let i = 0; i < runs; i++)
  for (const t of targets) {
    t.empty.push((await load(browser, t.server, '/', '.composer textarea')).fcp);
    const markdown = t.assets.some((a) => a.name.includes('markdown'));
    const selector = markdown ? '.message.assistant .text.markdown h1' : '.message.assistant .text';
    const got = await load(browser, t.server, `/#/session/${t.session}`, selector);
    t.answer.push(got.shown);
    t.text.push(got.text);
  }
await browser.close();

for (const t of targets) {
  console.log(`\n${t.name} (${t.bin})`);
  for (const a of t.assets)
    console.log(`  ${a.name.padEnd(40)} ${String(a.bytes).padStart(7)} B, on the wire ${String(a.onWire).padStart(7)} B (${a.encoding}), gzip -9 ${a.gzip9} B`);
  const first = t.assets.filter((a) => !/highlight|markdown/.test(a.name));
  const sum = (xs, k) => xs.reduce((s, a) => s + a[k], 0);
  console.log(`  first load: ${sum(first, 'bytes')} B, ${sum(first, 'gzip9')} B gzipped; all: ${sum(t.assets, 'bytes')} B, ${sum(t.assets, 'gzip9')} B gzipped`);
  console.log(`  first contentful paint, median of ${runs}: ${median(t.empty).toFixed(0)} ms (min ${Math.min(...t.empty).toFixed(0)}, max ${Math.max(...t.empty).toFixed(0)})`);
  console.log(`  a stored answer shown, median of ${runs}: ${median(t.answer).toFixed(0)} ms (min ${Math.min(...t.answer).toFixed(0)}, max ${Math.max(...t.answer).toFixed(0)})`);
  console.log(`  its text in the page (plain or markdown), median: ${median(t.text).toFixed(0)} ms`);
  await t.server.stop();
}
