// Both colour schemes stay readable: axe-core's colour-contrast rule (WCAG AA) finds nothing on a
// page with an answer in markdown (highlighted code of several languages, a table, a quote, a
// link), its thinking, a bash terminal that succeeded and one that failed, an edit's diff and a
// tool's image, every collapsed part opened.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { send, serverAndBrowser } from './support.mjs';

const axeSource = await readFile(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

const answer = `# Results

Some **bold**, *emphasis*, \`inline code\`, ~~struck~~ and [a link](https://example.com/).

> A quoted line.

| name | value |
|------|------:|
| a    | 1     |

- [x] done
- [ ] open

\`\`\`python
@cached
def greet(name: str, times=2) -> str:
    # says hello
    return f"hello {name}" * times + str(None) + str(True)
\`\`\`

\`\`\`typescript
interface Options { retries: number; }
export class Client<T> extends Base implements Options {
  readonly retries = 3;
  async run(url: string): Promise<T | null> { return /x+/g.test(url) ? null : await fetch(url); }
}
\`\`\`

\`\`\`json
{"name": "switchboard", "private": true, "count": 3, "nothing": null}
\`\`\`

\`\`\`diff
- removed
+ added
\`\`\`
`;

const env = serverAndBrowser({
  config: {
    permission: { '*': 'allow' },
    provider: {
      demo: {
        type: 'scripted',
        script: [
          {
            reasoning: 'Let me **check** with `bash`.',
            text: answer,
            toolCalls: [
              { tool: 'bash', input: { command: 'seq 1 12', description: 'Count' } },
              { tool: 'bash', input: { command: 'echo no >&2; exit 2', description: 'Fail' } },
              { tool: 'edit', input: { filePath: 'notes.txt', oldString: 'two', newString: 'two, 2' } },
            ],
          },
          { text: 'All **done**.' },
        ],
      },
    },
    model: 'demo/default',
  },
  files: { 'notes.txt': 'one\ntwo\nthree\n' },
});

async function contrastViolations(page) {
  await page.evaluate(axeSource);
  return page.evaluate(async () => {
    const result = await window.axe.run(document, { runOnly: { type: 'rule', values: ['color-contrast'] } });
    return result.violations.flatMap((v) =>
      v.nodes.map((n) => `${n.target.join(' ')}: ${n.any.map((c) => c.message).join('; ')}`),
    );
  });
}

for (const scheme of ['light', 'dark'])
  test(`the ${scheme} scheme meets WCAG AA contrast`, async () => {
    const p = await env.open();
    await p.emulateMedia({ colorScheme: scheme });
    await p.getByRole('button', { name: 'New session', exact: true }).click();
    await send(p, 'show me');
    await p.locator('.message.assistant .text.markdown', { hasText: 'All done.' }).waitFor();
    await p.locator('pre > code.language-typescript .hljs-keyword').first().waitFor();
    await p.locator('.tool-card[data-tool="edit"] .diff-table').waitFor();
    // Open everything that is collapsed, so that its text is checked too.
    await p.locator('details:not([open])').evaluateAll((all) => all.forEach((d) => (d.open = true)));
    const violations = await contrastViolations(p);
    assert.deepEqual(violations, [], `contrast too low in the ${scheme} scheme`);
  });
