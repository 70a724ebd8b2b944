// The official OpenAI Node client against dsv4 serve: models, chat (non-stream, stream, thinking,
// usage chunk), completions (string and token-id prompts, logprobs), a tool-call conversation, and
// errors surfacing as the client's typed exceptions while the server keeps answering.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, client, metrics, templateIds } from '../lib/serve.mjs';

let server, openai;
const MODEL = 'tiny-shakespeare';

before(async () => {
  server = await startServer(['--numerics', 'reference']);
  openai = client(server.url);
});
after(async () => {
  assert.equal(await server.stop(), 0, server.stderr());
});

const hello = [{ role: 'user', content: 'Hello, who are you?' }];

test('models', { timeout: 30_000 }, async () => {
  const list = await openai.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [MODEL]);
  const m = await openai.models.retrieve(MODEL);
  assert.equal(m.object, 'model');
});

test('chat, non-streamed and streamed, say the same (greedy)', { timeout: 60_000 }, async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages: hello, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  assert.ok(r.choices[0].message.content.length > 0);

  const stream = await openai.chat.completions.create({
    model: MODEL, messages: hello, max_tokens: 12, temperature: 0, stream: true,
  });
  let text = '', first = true, last;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    const choice = chunk.choices[0];
    if (first) assert.equal(choice.delta.role, 'assistant');
    first = false;
    text += choice.delta.content ?? '';
    if (choice.finish_reason) last = chunk;
  }
  assert.equal(text, r.choices[0].message.content);
  assert.equal(last.choices[0].finish_reason, 'length');
  assert.equal(last.usage, undefined);  // OpenAI's rule: no usage unless stream_options.include_usage
});

test('thinking: reasoning_content, and the usage chunk', { timeout: 60_000 }, async () => {
  const r = await openai.chat.completions.create({
    model: MODEL, messages: hello, max_tokens: 8, temperature: 0, chat_template_kwargs: { thinking: true },
  });
  // The tiny model never closes </think>: everything it says is reasoning.
  assert.ok(r.choices[0].message.reasoning_content.length > 0);
  const stream = await openai.chat.completions.create({
    model: MODEL, messages: hello, max_tokens: 8, temperature: 0, reasoning_effort: 'high', stream: true,
    stream_options: { include_usage: true },
  });
  let reasoning = '', usageOnly, usageChunks = 0;
  for await (const chunk of stream) {
    if (chunk.usage) ++usageChunks;
    if (chunk.choices.length === 0) usageOnly = chunk.usage;
    else {
      assert.equal(chunk.usage, null);  // every chunk but the last has "usage": null
      reasoning += chunk.choices[0].delta.reasoning_content ?? '';
    }
  }
  assert.equal(reasoning, r.choices[0].message.reasoning_content);
  assert.equal(usageOnly.completion_tokens, 8);
  assert.equal(usageChunks, 1);
});

test('completions: string and token-id prompts, stream, logprobs', { timeout: 60_000 }, async () => {
  const a = await openai.completions.create({ model: MODEL, prompt: 'ROMEO:\n', max_tokens: 10, temperature: 0, logprobs: 2 });
  assert.equal(a.object, 'text_completion');
  assert.equal(a.choices[0].logprobs.tokens.length, 10);
  assert.equal(a.choices[0].logprobs.tokens.join(''), a.choices[0].text);
  assert.ok(a.choices[0].logprobs.token_logprobs.every((x) => x <= 0));
  const ids = await openai.completions.create({ model: MODEL, prompt: [5, 6, 7], max_tokens: 3, temperature: 0 });
  assert.equal(ids.usage.prompt_tokens, 3);
  const stream = await openai.completions.create({ model: MODEL, prompt: 'ROMEO:\n', max_tokens: 10, temperature: 0, stream: true });
  let text = '', reason;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    reason = chunk.choices[0].finish_reason ?? reason;
  }
  assert.equal(text, a.choices[0].text);
  assert.equal(reason, 'length');
});

test('tool-call conversation renders the official encoding and streams', { timeout: 60_000 }, async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather', description: 'Get the weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
    },
  }];
  const messages = [
    { role: 'system', content: 'You are helpful.' },
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, reasoning_content: 'Need weather.',
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris", "days": 3}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
  ];
  const want = templateIds({ tools, messages }, { thinking: true });
  const r = await openai.chat.completions.create({
    model: MODEL, messages, tools, tool_choice: 'auto', max_tokens: 6, temperature: 0, chat_template_kwargs: { thinking: true },
  });
  assert.equal(r.usage.prompt_tokens, want.length);
  // The SDK's stream helper assembles the chunks into a completion.
  const final = await openai.chat.completions.stream({
    model: MODEL, messages, tools, max_tokens: 6, temperature: 0, chat_template_kwargs: { thinking: true },
    stream_options: { include_usage: true },
  }).finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'length');
  assert.equal(final.usage.prompt_tokens, want.length);
  // (The helper keeps only the last piece of fields it does not know, such as reasoning_content.)
});

test('errors become typed exceptions and the server keeps answering', { timeout: 60_000 }, async () => {
  await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: [] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages');
  await assert.rejects(openai.chat.completions.create({ model: 'gpt-4o', messages: hello }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: hello, max_tokens: 'many' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
  await assert.rejects(openai.completions.create({ model: MODEL, prompt: Array(66000).fill(5), max_tokens: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
  const ok = await openai.chat.completions.create({ model: MODEL, messages: hello, max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
  const m = await metrics(server.url);
  assert.equal(m.dsv4_running_sequences, 0);
});
