// Load: 32 concurrent streaming clients x 20 requests each complete without error; afterwards the
// engine is idle: no running or queued sequences, no cache in use.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, client, idleMetrics } from '../lib/serve.mjs';

let server, openai;
const MODEL = 'tiny-shakespeare';
const CLIENTS = 32, REQUESTS = 20;

before(async () => {
  server = await startServer(['--max-num-seqs', '16', '--max-queue', '64']);
  openai = client(server.url);
});
after(async () => {
  assert.equal(await server.stop(), 0, server.stderr());
});

const prompts = ['ROMEO:', 'Speak.', 'Who is there?', 'Good morrow, cousin.', 'What light?', 'Peace, ho!', 'Away!'];

async function worker(k) {
  let chunks = 0;
  for (let i = 0; i < REQUESTS; ++i) {
    const stream = await openai.chat.completions.create({
      model: MODEL, stream: true, max_tokens: 1 + ((k + i) % 4), temperature: 0.8, seed: k * 100 + i,
      messages: [{ role: 'user', content: prompts[(k + i) % prompts.length] }],
    });
    let finish;
    for await (const c of stream) {
      ++chunks;
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    assert.ok(finish === 'stop' || finish === 'length', `finish_reason ${finish}`);
  }
  return chunks;
}

test(`${CLIENTS} streaming clients x ${REQUESTS} requests`, { timeout: 480_000 }, async () => {
  const t0 = Date.now();
  const chunks = await Promise.all(Array.from({ length: CLIENTS }, (_, k) => worker(k)));
  const seconds = (Date.now() - t0) / 1000;
  console.log(`# ${CLIENTS * REQUESTS} streamed requests in ${seconds.toFixed(1)} s, ${chunks.reduce((a, b) => a + b)} chunks`);
  const m = await idleMetrics(server.url);
  assert.equal(m.dsv4_running_sequences, 0);
  assert.equal(m.dsv4_queue_length, 0);
  assert.equal(m.dsv4_cache_tokens_used, 0);
  assert.equal(m.dsv4_http_active_streams, 0);
  assert.ok(m.dsv4_requests_submitted_total >= CLIENTS * REQUESTS);
  assert.equal(m.dsv4_requests_rejected_total, 0);
});
