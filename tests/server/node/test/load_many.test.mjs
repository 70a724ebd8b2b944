// Many clients at once, through the official OpenAI client: 1,024 concurrent streaming requests all
// complete without error (a stream is not a server thread: most wait in the engine's queue with their
// connection open), and 1,000 more requests leave the server's resident memory within 16 MB.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, client, idleMetrics, rssBytes } from '../lib/serve.mjs';

let server, openai;
const MODEL = 'tiny-shakespeare';
const CONCURRENT = 1024, LEAK_REQUESTS = 1000, LEAK_CONCURRENCY = 64;

before(async () => {
  server = await startServer(['--max-num-seqs', '32', '--max-queue', '2048', '--max-model-len', '256']);
  openai = client(server.url, { timeout: 300_000 });
});
after(async () => {
  assert.equal(await server.stop(), 0, server.stderr());
});

async function streamOne(k) {
  const stream = await openai.chat.completions.create({
    model: MODEL, stream: true, max_tokens: 1 + (k % 3), temperature: 0.7, seed: k,
    messages: [{ role: 'user', content: `Speak, number ${k}.` }],
  });
  let finish, chunks = 0;
  for await (const c of stream) {
    ++chunks;
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.ok(finish === 'stop' || finish === 'length', `request ${k}: finish_reason ${finish}`);
  return chunks;
}

async function idle() {
  const m = await idleMetrics(server.url);
  assert.equal(m.dsv4_running_sequences, 0);
  assert.equal(m.dsv4_queue_length, 0);
  assert.equal(m.dsv4_cache_tokens_used, 0);
  assert.equal(m.dsv4_http_active_streams, 0);
  return m;
}

test(`${CONCURRENT} concurrent streaming clients`, { timeout: 400_000 }, async () => {
  const t0 = Date.now();
  const chunks = await Promise.all(Array.from({ length: CONCURRENT }, (_, k) => streamOne(k)));
  console.log(`# ${CONCURRENT} concurrent streams in ${((Date.now() - t0) / 1000).toFixed(1)} s, ` +
    `${chunks.reduce((a, b) => a + b)} chunks`);
  const m = await idle();
  assert.equal(m.dsv4_requests_rejected_total, 0);
});

test(`${LEAK_REQUESTS} requests leave resident memory within 16 MB`, { timeout: 400_000 }, async () => {
  // Each of LEAK_CONCURRENCY workers runs its share in turn: streamed and non-streamed, chat and completions.
  const run = async (n, offset) => {
    await Promise.all(Array.from({ length: LEAK_CONCURRENCY }, async (_, w) => {
      for (let i = w; i < n; i += LEAK_CONCURRENCY) {
        const k = offset + i;
        if (k % 2) await streamOne(k);
        else {
          const r = await openai.completions.create({ model: MODEL, prompt: 'ROMEO:', max_tokens: 2, seed: k });
          assert.ok(r.choices[0].finish_reason);
        }
      }
    }));
  };
  await run(LEAK_CONCURRENCY * 4, 0);  // warm: allocator pools and caches reach their working size
  const before = rssBytes(server.pid);
  await run(LEAK_REQUESTS, 100_000);
  await idle();
  const grown = rssBytes(server.pid) - before;
  console.log(`# RSS ${(before / 2 ** 20).toFixed(1)} MB, after ${LEAK_REQUESTS} requests ${(grown / 2 ** 20).toFixed(1)} MB more`);
  assert.ok(Math.abs(grown) < 16 * 2 ** 20, `RSS changed by ${grown} bytes`);
});
