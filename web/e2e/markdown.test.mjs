// Answers rendered as markdown: every construct becomes its element, fenced code is highlighted
// and copied with its button, and hostile answers (HTML, scripts, event handlers, javascript: and
// data: links, a megabyte of text) run nothing and leave the page responsive. Each test picks a
// scripted provider whose script is that answer.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { screenshot, send, serverAndBrowser } from './support.mjs';

const everything = `# Heading one

## Heading two

### Heading three

Some **bold words**, some *emphasis*, \`inline code\` and ~~struck~~ text.

- first item
- second item with **bold**

1. step one
2. step two

- [x] a finished task
- [ ] an open task

| tool | runs |
|------|-----:|
| bash | 3 |
| read | 12 |

> A quoted line
> that goes on.

\`\`\`python
def greet(name):
    # says hello
    return f"hello {name}" * 2
\`\`\`

\`\`\`
plain code, no language
\`\`\`

See [the docs](https://example.com/docs "The docs") or https://example.org/bare.

---

The end.`;

const hostile = `Hostile content follows.

<img src=x onerror="window.__pwned = 'img'">

<script>window.__pwned = 'script'</script>

<svg onload="window.__pwned = 'svg'"><circle r="5"/></svg>

<iframe src="javascript:window.parent.__pwned = 'iframe'"></iframe>

<details open ontoggle="window.__pwned = 'details'"><summary>x</summary></details>

<style>body { display: none }</style>

Inline <b onmouseover="window.__pwned = 'b'">bold tag</b> and <a href="javascript:window.__pwned = 'a'">raw anchor</a>.

[click me](javascript:window.__pwned='link') and [mixed case](JaVaScRiPt:window.__pwned='case')
and [entity](&#106;avascript:window.__pwned='entity') and [spaced]( javascript:window.__pwned='spaced')
and <javascript:window.__pwned='autolink'> and [data link](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)
and [reference][evil] and ![an image](javascript:window.__pwned='image') and ![tracker](https://example.net/pixel.png).

[evil]: javascript:window.__pwned='reference'

\`\`\`html
<script>window.__pwned = 'fence'</script><img src=x onerror="window.__pwned = 'fence-img'">
\`\`\`

After an inline tag marked reads as raw: <kbd> <div/class=permission><button/class=primary>Allow once</button/></div/>

The end of the hostile answer.`;

// About a megabyte of markdown with every kind of block (and HTML), streamed in about 2,000
// deltas (the scripted model streams word by word).
function huge() {
  const blocks = [];
  for (let i = 0; blocks.join('').length < 1_000_000; i++) {
    const words = `word${i}-`.repeat(60);
    blocks.push(
      `## Part-${i}\n\n**bold**-${words}-[link](https://example.com/${i})\n\n` +
        `|a|b|\n|-|-|\n|${i}|<img src=x onerror="window.__pwned='huge'">|\n\n` +
        '```js\n' + `const_${i}=${JSON.stringify('y'.repeat(600))};\n` + '```\n\n',
    );
  }
  return blocks.join('') + 'END-OF-HUGE';
}

const env = serverAndBrowser({
  config: {
    provider: {
      md: { type: 'scripted', script: [{ reasoning: 'First **plan**, then `act`.', text: everything }] },
      hostile: { type: 'scripted', script: [{ text: hostile }] },
      huge: { type: 'scripted', script: [{ text: huge() }] },
    },
    model: 'md/default',
  },
});

// A tab on a new session that the scripted provider `model` answers; records the dialogs it opens.
async function page(model, options) {
  const p = await env.open(options);
  p.dialogs = [];
  p.on('dialog', (d) => {
    p.dialogs.push(d.message());
    void d.dismiss();
  });
  await p.locator(`#model option[value="${model}/default"]`).waitFor({ state: 'attached' });
  await p.getByLabel('Model', { exact: true }).selectOption(`${model}/default`);
  await p.getByRole('button', { name: 'New session', exact: true }).click();
  await p.getByText('New session: write a message').waitFor();
  return p;
}

const answer = (p) => p.locator('.message.assistant .text.markdown').last();

test('an answer with every construct renders as the matching elements', async () => {
  const p = await page('md');
  await send(p, 'show me everything');
  const a = answer(p);
  await a.getByText('The end.').waitFor();
  assert.equal(await a.locator('h1').innerText(), 'Heading one');
  assert.equal(await a.locator('h2').innerText(), 'Heading two');
  assert.equal(await a.locator('h3').innerText(), 'Heading three');
  assert.equal(await a.locator('strong').first().innerText(), 'bold words');
  assert.equal(await a.locator('em').innerText(), 'emphasis');
  assert.equal(await a.locator('p > code').innerText(), 'inline code');
  assert.equal(await a.locator('del').innerText(), 'struck');
  assert.deepEqual(await a.locator('ul').first().locator(':scope > li').allInnerTexts(), ['first item', 'second item with bold']);
  assert.deepEqual(await a.locator('ol > li').allInnerTexts(), ['step one', 'step two']);
  assert.deepEqual(await a.locator('input[type="checkbox"]').evaluateAll((els) => els.map((e) => e.checked)), [true, false]);
  assert.deepEqual(await a.locator('table th').allInnerTexts(), ['tool', 'runs']);
  assert.deepEqual(await a.locator('table tbody tr').first().locator('td').allInnerTexts(), ['bash', '3']);
  assert.match(await a.locator('blockquote').innerText(), /A quoted line\s+that goes on\./);
  assert.equal(await a.locator('hr').count(), 1);

  // Fenced code: highlighted (highlight.js loads on first use), its language named; unlabelled code stays plain.
  const python = a.locator('pre > code.language-python');
  await python.locator('.hljs-keyword', { hasText: 'def' }).waitFor();
  assert.equal(await python.locator('.hljs-string').count() > 0, true);
  assert.equal(await python.locator('.hljs-comment').innerText(), '# says hello');
  assert.equal(await a.locator('.code-block .code-lang').first().innerText(), 'python');
  assert.equal(await a.locator('.code-block').nth(1).locator('pre > code').innerText(), 'plain code, no language');
  assert.equal(await a.locator('.code-block').nth(1).locator('[class^="hljs-"]').count(), 0);

  // The copy button copies the code as written.
  await a.locator('.code-block').first().getByRole('button', { name: 'Copy code' }).click();
  await a.locator('.code-block').first().getByRole('button', { name: 'Copy code' }).filter({ hasText: 'Copied' }).waitFor();
  assert.equal(await p.evaluate(() => navigator.clipboard.readText()), 'def greet(name):\n    # says hello\n    return f"hello {name}" * 2');

  // Links open in a new tab without handing the page over.
  const link = a.getByRole('link', { name: 'the docs' });
  assert.equal(await link.getAttribute('href'), 'https://example.com/docs');
  assert.equal(await link.getAttribute('target'), '_blank');
  assert.equal(await link.getAttribute('rel'), 'noopener noreferrer');
  assert.equal(await link.getAttribute('title'), 'The docs');
  const bare = a.getByRole('link', { name: 'https://example.org/bare' });
  assert.equal(await bare.getAttribute('rel'), 'noopener noreferrer');

  // Reasoning is markdown too.
  const thinking = p.locator('.message.assistant details.reasoning');
  await thinking.locator('summary').click();
  assert.equal(await thinking.locator('.markdown strong').innerText(), 'plan');
  assert.equal(await thinking.locator('.markdown code').innerText(), 'act');

  // After a reload (the answer from the server, not the stream) it renders the same.
  await p.reload();
  await answer(p).locator('pre > code.language-python .hljs-keyword').first().waitFor();
  assert.equal(await answer(p).locator('h1').innerText(), 'Heading one');
  await answer(p).locator('h1').scrollIntoViewIfNeeded();
  await screenshot(p, 'markdown');
  await p.emulateMedia({ colorScheme: 'dark' });
  await screenshot(p, 'markdown-dark');
});

test('hostile answers show their HTML as text and run nothing', async () => {
  const p = await page('hostile');
  await send(p, 'attack');
  const a = answer(p);
  await a.getByText('The end of the hostile answer.').waitFor();
  // Give anything that would run (an onerror, a timer) the chance to.
  await p.waitForTimeout(300);
  await a.getByText('bold tag').hover();
  await a.getByText('click me').click();
  await a.getByText('reference').click();
  await p.waitForTimeout(200);
  assert.equal(await p.evaluate(() => window.__pwned), undefined, 'no payload ran');
  assert.deepEqual(p.dialogs, [], 'no dialog opened');
  assert.equal(new URL(p.url()).origin, env.server.url, 'the page did not navigate');

  // The HTML is there as text, never as elements.
  assert.match(await a.innerText(), /<img src=x onerror="window.__pwned = 'img'">/);
  assert.match(await a.innerText(), /<script>window.__pwned = 'script'<\/script>/);
  const found = await a.evaluate((root) => {
    const all = [...root.querySelectorAll('*')];
    return {
      tags: [...new Set(all.map((e) => e.localName))].sort(),
      handlers: all.flatMap((e) => [...e.attributes].map((at) => at.name)).filter((n) => n.startsWith('on')),
      hrefs: all.filter((e) => e.hasAttribute('href')).map((e) => e.getAttribute('href')),
      srcs: all.filter((e) => e.hasAttribute('src')).length,
      styles: all.filter((e) => e.hasAttribute('style')).length,
    };
  });
  // No element the page itself uses for its controls (a fake "Allow once" would be one).
  assert.equal(await a.locator('.permission, button:not(.copy-code)').count(), 0, 'no injected control');
  assert.match(await a.innerText(), /<div\/class=permission>/);
  for (const tag of ['script', 'img', 'svg', 'iframe', 'details', 'style', 'b', 'object', 'embed', 'form'])
    assert.ok(!found.tags.includes(tag), `no <${tag}> element`);
  assert.deepEqual(found.handlers, [], 'no event handler attribute');
  assert.equal(found.srcs, 0, 'nothing loads');
  assert.equal(found.styles, 0);
  // Only the tracker image is a link (not loaded): no javascript: or data: link.
  assert.deepEqual(found.hrefs, ['https://example.net/pixel.png']);
  for (const text of ['click me', 'mixed case', 'entity', 'spaced', 'data link', 'reference', 'an image'])
    assert.equal(await a.getByRole('link', { name: text }).count(), 0, `"${text}" is not a link`);
  // Code keeps HTML as code.
  assert.match(await a.locator('pre > code').innerText(), /^<script>window.__pwned = 'fence'<\/script><img src=x/);
  assert.equal(await p.evaluate(() => document.body.checkVisibility()), true, 'no style from the answer applies');
});

test('a megabyte of markdown streams in, block by block, and the page stays responsive', async () => {
  const p = await page('huge', {
    // The longest task the page's main thread ran (the browser's long-task entries): the page's
    // own work, not the time a busy machine left the browser waiting for a core, which a timer's
    // lateness would count too (a 2-core machine running the rest of the suite beside it).
    beforeLoad: (tab) =>
      tab.addInitScript(() => {
        window.__longestStall = 0;
        new PerformanceObserver((list) => {
          for (const e of list.getEntries()) window.__longestStall = Math.max(window.__longestStall, e.duration);
        }).observe({ type: 'longtask', buffered: true });
      }),
  });
  const stall = () => p.evaluate(() => Math.round(window.__longestStall));
  const started = Date.now();
  await send(p, 'a lot please');
  // A block rendered early is the same element at the end: only the blocks being written change.
  await answer(p).locator('pre > code.hljs').first().waitFor();
  await answer(p).locator('h2').nth(3).waitFor({ state: 'attached' });
  await answer(p).locator('h2').first().evaluate((h) => (h.dataset.probe = 'first'));
  await answer(p).getByText('END-OF-HUGE').waitFor({ timeout: 120_000 });
  const streamed = { took: Date.now() - started, stall: await stall() };
  assert.equal(await answer(p).locator('h2[data-probe="first"]').textContent(), 'Part-0');
  const sections = await answer(p).locator('h2').count();
  assert.ok(sections > 400, `${sections} sections rendered`);
  assert.equal(await answer(p).locator('td').filter({ hasText: '<img src=x' }).count(), sections);
  assert.equal(await p.evaluate(() => window.__pwned), undefined);
  assert.deepEqual(p.dialogs, []);
  // Typing still answers at once.
  const box = p.getByLabel('Message', { exact: true });
  await box.fill('still here');
  assert.equal(await box.inputValue(), 'still here');

  // Loaded whole (a reload), it shows in steps too.
  await p.reload();
  const reloaded = Date.now();
  await answer(p).getByText('END-OF-HUGE').waitFor({ timeout: 120_000 });
  const loaded = { took: Date.now() - reloaded, stall: await stall() };
  console.log(`1 MB answer: streamed ${JSON.stringify(streamed)}, after a reload ${JSON.stringify(loaded)} (ms)`);
  for (const [what, { stall: ms }] of Object.entries({ streamed, loaded })) {
    // Rendering a megabyte takes some tasks over 50 ms (the long-task mark): none seen means the
    // observer saw nothing, not a fast page.
    assert.ok(ms > 0, `${what}: no long task recorded at all`);
    assert.ok(ms < 1000, `${what}: the main thread was never busy for a second (longest: ${ms} ms)`);
  }
});
