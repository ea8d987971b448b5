// Fuzzing the SDK's event-stream parser (readSSE), the one parser of outside bytes in the SDK: a
// seeded random generator builds streams out of the pieces that matter to the format (field
// names, colons, every kind of line end, multi-byte characters, NUL, a BOM) and checks two
// properties over thousands of them:
//  - the same bytes give the same frames however they are split into chunks (splits fall inside
//    CRLF pairs and inside UTF-8 sequences too);
//  - frames written by a correct writer, with any mix of line ends, come back exactly.
// SSE_FUZZ_RUNS sets the number of streams per property (default 3000); SSE_FUZZ_SEED the first
// seed (a failure message names the seed that reproduces it).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { readSSE } from '@switchboard/sdk';

const runs = Number(process.env.SSE_FUZZ_RUNS ?? 3000);
const firstSeed = Number(process.env.SSE_FUZZ_SEED ?? 1);

// mulberry32: small, fast, and the same on every machine.
function generator(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (n) => Math.floor(next() * n), pick: (list) => list[Math.floor(next() * list.length)] };
}

const pieces = [
  'data:', 'data: ', 'data', 'event:', 'event: tool-request', 'id:', 'id: 7', 'id: a\0b', 'retry: 5',
  ':', ': comment', '\n', '\r', '\r\n', '\n\n', '\r\n\r\n', ' ', 'x', '{"a":1}', 'é', '😀', '\0', '\uFEFF',
  'DATA: upper', 'data:  two spaces',
];

function streamOf(chunks) {
  return new ReadableStream({
    start(controller) {
      for (const c of chunks) controller.enqueue(c);
      controller.close();
    },
  });
}

async function parse(chunks) {
  const frames = [];
  for await (const frame of readSSE(streamOf(chunks))) frames.push(frame);
  return frames;
}

// Chunks of 1..16 bytes at positions the generator chooses.
function split(bytes, rnd) {
  const chunks = [];
  for (let at = 0; at < bytes.length; ) {
    const n = Math.min(1 + rnd.int(16), bytes.length - at);
    chunks.push(bytes.subarray(at, at + n));
    at += n;
  }
  return chunks;
}

const encoder = new TextEncoder();

describe('readSSE under fuzzing', () => {
  test('the same bytes give the same frames however they are split', async () => {
    for (let seed = firstSeed; seed < firstSeed + runs; seed++) {
      const rnd = generator(seed);
      let text = '';
      for (let i = 0, n = 1 + rnd.int(40); i < n; i++) text += rnd.pick(pieces);
      const bytes = encoder.encode(text);
      const whole = await parse([bytes]);
      const pieces_ = await parse(split(bytes, rnd));
      assert.deepEqual(pieces_, whole, `seed ${seed}: ${JSON.stringify(text)}`);
    }
  });

  test('frames a correct writer sends come back exactly, with any line ends', async () => {
    const values = ['', 'x', 'hello world', '{"type":"client-tool-request","input":{"a":[1,2]}}', 'é😀', ' lead'];
    for (let seed = firstSeed; seed < firstSeed + runs; seed++) {
      const rnd = generator(seed);
      const sent = [];
      let text = rnd.int(2) ? '\uFEFF' : '';
      for (let f = 0, n = 1 + rnd.int(5); f < n; f++) {
        // Any mix of line ends, except a LF right after a lone CR: that pair is one CRLF.
        const eol = () => rnd.pick(text.endsWith('\r') ? ['\r', '\r\n'] : ['\n', '\r', '\r\n']);
        const frame = { event: rnd.int(2) ? 'tool-request' : 'message', data: '' };
        if (rnd.int(3) === 0) text += `: keep-alive${eol()}`;
        if (frame.event !== 'message') text += `event: ${frame.event}${eol()}`;
        if (rnd.int(2)) {
          frame.id = String(rnd.int(1000));
          text += `id: ${frame.id}${eol()}`;
        }
        const lines = [];
        for (let l = 0, m = 1 + rnd.int(3); l < m; l++) lines.push(rnd.pick(values));
        for (const line of lines) text += `data: ${line}${eol()}`;
        frame.data = lines.join('\n');
        text += eol();
        sent.push(frame);
      }
      const got = await parse(split(encoder.encode(text), rnd));
      assert.deepEqual(got, sent, `seed ${seed}: ${JSON.stringify(text)}`);
    }
  });
});
