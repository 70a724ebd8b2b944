// Batch invariance: a greedy request in reference numerics returns the same text alone and with 7
// other requests running at the same time (prefill chunks and decodes of all of them share steps).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, client } from '../lib/serve.mjs';

let server, openai;
const MODEL = 'tiny-shakespeare';

before(async () => {
  // Small steps so that the requests' prefill chunks and decodes really mix.
  server = await startServer(['--numerics', 'reference', '--max-num-seqs', '8', '--max-step-tokens', '32',
    '--prefill-chunk', '8']);
  openai = client(server.url);
});
after(async () => {
  assert.equal(await server.stop(), 0, server.stderr());
});

const target = {
  model: MODEL, temperature: 0, max_tokens: 24,
  messages: [{ role: 'user', content: 'Tell me of the king, his daughters and the storm upon the heath.' }],
};
const others = [
  { messages: [{ role: 'user', content: 'ROMEO' }], max_tokens: 30, temperature: 0.9, seed: 1 },
  { messages: [{ role: 'user', content: 'What news from Verona?' }], max_tokens: 16, stream: true },
  { messages: [{ role: 'system', content: 'Speak in verse.' }, { role: 'user', content: 'Describe the sea at night.' }], max_tokens: 40 },
  { messages: [{ role: 'user', content: 'A horse! a horse! my kingdom for a horse!' }], max_tokens: 8, temperature: 0 },
  { messages: [{ role: 'user', content: 'Is this a dagger which I see before me?' }], max_tokens: 28, top_p: 0.9 },
  { messages: [{ role: 'user', content: 'Now is the winter of our discontent' }], max_tokens: 12, stream: true },
  { messages: [{ role: 'user', content: 'Friends, Romans, countrymen, lend me your ears' }], max_tokens: 20, temperature: 0.7 },
];

async function run(req) {
  if (!req.stream) return (await openai.chat.completions.create({ model: MODEL, ...req })).choices[0].message.content;
  let text = '';
  for await (const c of await openai.chat.completions.create({ model: MODEL, ...req })) text += c.choices[0]?.delta?.content ?? '';
  return text;
}

test('a greedy request gives the same text alone and among 7 others', { timeout: 120_000 }, async () => {
  const alone = await run(target);
  assert.ok(alone.length > 0);
  for (let position = 0; position < 8; position += 4) {
    const batch = [...others];
    batch.splice(position, 0, target);
    const texts = await Promise.all(batch.map(run));
    assert.equal(texts[position], alone, `target at position ${position}`);
  }
  const streamed = await run({ ...target, stream: true });
  assert.equal(streamed, alone);
});
