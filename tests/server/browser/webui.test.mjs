// The chat page (src/server/webui) in Debian's Chromium against the real `dsv4 serve` on the bundled
// model: the page and its files come from the binary byte for byte; a message streams in and ends as
// the server's own greedy answer; stop cancels the request on the server; a reload finds the
// conversations; export gives them as JSON and import takes them back (and names a bad field); delete asks;
// thinking and effort reach the request and the reasoning shows apart; a reply made of HTML (mocked,
// the tiny model cannot be made to say it) and an imported one render as text with nothing run;
// markdown becomes elements; with --api-key the page asks for the key; --no-webui answers 404. Screenshots go to $DSV4_ARTIFACTS.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, readFile, readdir, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startServer, metrics } from '../node/lib/server_process.mjs';

const WAIT = 20_000;  // the longest one step may wait (the tiny model makes ~100 tokens/s on 2 cores)
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const WEBUI_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../src/server/webui');
const artifacts = process.env.DSV4_ARTIFACTS ?? '.';

// A Chromium with a fresh profile; records page errors, console errors and CSP violations.
async function openBrowser() {
  const profile = await mkdtemp(path.join(tmpdir(), 'dsv4-webui-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.DSV4_CHROMIUM, headless: true, args: FLAGS, acceptDownloads: true,
    viewport: { width: 1200, height: 820 }, timeout: 60_000,
  });
  await context.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective));
  });
  const page = context.pages()[0] ?? await context.newPage();
  page.setDefaultTimeout(WAIT);
  const errors = [];
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
  return { context, page, errors, async close() { await context.close(); await rm(profile, { recursive: true, force: true }); } };
}

const lastReply = (page) => page.locator('#messages .message.assistant').last();
const stored = (page) => page.evaluate(() => JSON.parse(localStorage.getItem('dsv4.conversations') ?? '[]'));
const done = (page) => page.waitForFunction(() => !document.querySelector('.message.pending'), null, { timeout: WAIT });

async function settings(page, { maxTokens, temperature, thinking, effort }) {
  if (await page.locator('#settings').isHidden()) await page.click('#settings-toggle');
  if (maxTokens !== undefined) await page.fill('#max-tokens', String(maxTokens));
  if (temperature !== undefined) await page.fill('#temperature', String(temperature));
  if (thinking !== undefined) await page.setChecked('#thinking', thinking);
  if (effort !== undefined) await page.selectOption('#effort', effort);
}

// Sends `text`; resolves to the JSON body of the chat request the page made.
async function send(page, text) {
  const request = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions') && r.method() === 'POST');
  await page.fill('#input', text);
  await page.press('#input', 'Enter');
  return (await request).postDataJSON();
}

// The DOM of the messages holds no element that could run or load anything, and nothing ran.
async function assertInert(page) {
  const found = await page.evaluate(() => ({
    active: document.querySelectorAll('#messages script, #messages img, #messages iframe, #messages object, #messages [onerror], #messages [onclick]').length,
    hrefs: [...document.querySelectorAll('#messages a[href]')].map((a) => a.getAttribute('href')),
    xss: window.__xss ?? null,
    csp: window.__csp,
  }));
  assert.deepEqual(found, { active: 0, hrefs: [], xss: null, csp: [] });
}

let server, browser, page, helloText, helloContent;

before(async () => {
  server = await startServer();
  browser = await openBrowser();
  page = browser.page;
  await mkdir(artifacts, { recursive: true });
});
after(async () => {
  await browser?.close();
  assert.equal(await server.stop(), 0, server.stderr());
});

test('the page and its files are served from the binary byte for byte, without a key', { timeout: 30_000 }, async () => {
  const names = (await readdir(WEBUI_DIR)).filter((n) => /\.(html|js|css|svg)$/.test(n));
  assert.ok(names.includes('index.html') && names.includes('app.js'));
  for (const name of names) {
    const res = await fetch(`${server.url}${name === 'index.html' ? '/' : `/webui/${name}`}`);
    assert.equal(res.status, 200, name);
    const type = { html: 'text/html', js: 'text/javascript', css: 'text/css', svg: 'image/svg+xml' }[name.split('.').pop()];
    assert.ok(res.headers.get('content-type').startsWith(type), `${name}: ${res.headers.get('content-type')}`);
    assert.ok(Buffer.from(await res.arrayBuffer()).equals(await readFile(path.join(WEBUI_DIR, name))), name);
  }
  for (const p of ['/webui/missing.js', '/webui/embed.cmake', '/index.html']) {
    const res = await fetch(`${server.url}${p}`);
    assert.equal(res.status, 404, p);
    assert.equal(typeof (await res.json()).error.message, 'string');
  }

  await page.goto(server.url);
  await page.locator('#model', { hasText: 'tiny-shakespeare' }).waitFor();
  assert.match(await page.textContent('#model'), /context \d+/);
});

test('a message streams in and ends as the server\'s greedy answer, with its token counts', { timeout: 60_000 }, async () => {
  await settings(page, { maxTokens: 200, temperature: 0 });  // ~2 s: long enough to be seen streaming
  // Every length the reply's text had while it was still streaming.
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver(() => {
      const c = document.querySelector('.message.assistant.pending .content');
      if (c) window.__lengths.push(c.textContent.length);
    }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
  });
  const body = await send(page, 'Hello');
  assert.deepEqual(body.messages, [{ role: 'user', content: 'Hello' }]);
  assert.equal(body.model, 'tiny-shakespeare');
  assert.equal(body.stream, true);
  assert.deepEqual(body.stream_options, { include_usage: true });
  assert.equal(body.max_tokens, 200);
  assert.equal(body.temperature, 0);
  assert.equal(body.top_p, 1);
  assert.deepEqual(body.chat_template_kwargs, { thinking: false });
  assert.equal(body.reasoning_effort, undefined);
  await done(page);

  const lengths = await page.evaluate(() => [...new Set(window.__lengths.filter((n) => n > 0))]);
  assert.ok(lengths.length >= 2, `the reply appeared piece by piece: ${lengths}`);

  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }], max_tokens: 200, temperature: 0, top_p: 1 }),
  });
  const expected = await res.json();
  const [conv] = await stored(page);
  assert.equal(conv.title, 'Hello');
  assert.equal(conv.messages[1].content, expected.choices[0].message.content);
  helloContent = conv.messages[1].content;
  helloText = await lastReply(page).locator('.content').textContent();
  assert.ok(helloText.trim().length > 0);
  const stats = await lastReply(page).locator('.stats').textContent();
  assert.match(stats, new RegExp(`^${expected.usage.prompt_tokens} prompt tokens · 200 generated · [0-9.]+ tok/s · first token [0-9.]+ s · [0-9.]+ s · finish: length$`));
  await page.screenshot({ path: path.join(artifacts, 'webui-chat.png') });
});

test('stop ends a long reply and the server cancels its request', { timeout: 60_000 }, async () => {
  const before = await metrics(server.url);
  await page.click('#new-chat');
  await settings(page, { maxTokens: 4000, temperature: 0.8 });
  await send(page, 'Tell me a long story');
  await page.waitForFunction(() => document.querySelector('.message.assistant.pending .content')?.textContent.length > 0);
  await page.click('#stop');
  await done(page);
  assert.match(await lastReply(page).locator('.stats').textContent(), /stopped$/);
  assert.ok(await page.locator('#send').isVisible());
  const deadline = Date.now() + WAIT;
  let m;
  do {
    m = await metrics(server.url);
    if (m.dsv4_requests_cancelled_total === before.dsv4_requests_cancelled_total + 1 && m.dsv4_running_sequences === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  } while (Date.now() < deadline);
  assert.equal(m.dsv4_requests_cancelled_total, before.dsv4_requests_cancelled_total + 1);
  assert.equal(m.dsv4_running_sequences, 0);
  const story = (await stored(page)).find((c) => c.title === 'Tell me a long story');
  assert.equal(story.messages[1].stopped, true);
  assert.ok(story.messages[1].content.length > 0);
  assert.equal(story.messages[1].stats.finish_reason, undefined);
});

test('a reload finds the conversations', { timeout: 30_000 }, async () => {
  await page.reload();
  await page.locator('#model', { hasText: 'tiny-shakespeare' }).waitFor();
  assert.deepEqual(await page.locator('#conversations .conv-title').allTextContents(), ['Tell me a long story', 'Hello']);
  assert.equal(await page.textContent('#conversations li.current .conv-title'), 'Tell me a long story');
  assert.match(await lastReply(page).locator('.stats').textContent(), /stopped$/);
  await page.click('#conversations .conv-title >> text=Hello');
  assert.equal(await page.textContent('#messages .user-text'), 'Hello');
  assert.equal(await lastReply(page).locator('.content').textContent(), helloText);
});

test('export gives the conversations as JSON; import takes them back and names a bad field', { timeout: 30_000 }, async () => {
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export')]);
  assert.match(download.suggestedFilename(), /^dsv4-conversations-\d{4}-\d\d-\d\d\.json$/);
  const text = await readFile(await download.path(), 'utf8');
  const doc = JSON.parse(text);
  assert.equal(doc.format, 'dsv4-chat');
  assert.equal(doc.version, 1);
  assert.equal(doc.conversations.length, 2);
  const hello = doc.conversations.find((c) => c.title === 'Hello');
  assert.deepEqual(hello.messages.map((m) => m.role), ['user', 'assistant']);
  assert.equal(hello.messages[0].content, 'Hello');
  assert.equal(hello.messages[1].content, helloContent);
  assert.equal(hello.messages[1].stats.completion_tokens, 200);
  assert.equal(hello.messages[1].stats.finish_reason, 'length');
  assert.equal(doc.conversations.find((c) => c.title === 'Tell me a long story').messages[1].stopped, true);

  await page.setInputFiles('#import', { name: 'back.json', mimeType: 'application/json', buffer: Buffer.from(text) });
  await page.locator('#notice', { hasText: 'imported 2 conversations' }).waitFor();
  const all = await stored(page);
  assert.equal(all.length, 4);
  assert.equal(new Set(all.map((c) => c.id)).size, 4, 'imported conversations get new ids');

  const bad = { conversations: [{ title: 'x', messages: [{ role: 'robot', content: 'hi' }] }] };
  await page.setInputFiles('#import', { name: 'bad.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(bad)) });
  await page.locator('#notice', { hasText: 'bad.json: conversations[0].messages[0].role: expected "user" or "assistant"' }).waitFor();
  assert.equal((await stored(page)).length, 4);

  // Delete asks first: dismissed, nothing goes; accepted, the current conversation goes.
  const titles = await page.locator('#conversations .conv-title').allTextContents();
  const gone = await page.textContent('#conversations li.current .conv-title');
  titles.splice(titles.indexOf(gone), 1);
  page.once('dialog', (d) => d.dismiss());
  await page.click('#conversations li.current .conv-delete');
  assert.equal((await stored(page)).length, 4);
  page.once('dialog', (d) => d.accept());
  await page.click('#conversations li.current .conv-delete');
  await page.waitForFunction(() => document.querySelectorAll('#conversations li').length === 3);
  assert.equal((await stored(page)).length, 3);
  assert.equal(await page.locator('#conversations li.current').count(), 0);
  assert.deepEqual((await page.locator('#conversations .conv-title').allTextContents()).sort(), titles.sort());
});

test('thinking, effort, the system prompt and tools reach the request; the reasoning shows apart from the answer', { timeout: 60_000 }, async () => {
  await page.click('#new-chat');
  await settings(page, { maxTokens: 16, temperature: 0, thinking: true });
  assert.equal(await page.isDisabled('#effort'), false);
  await settings(page, { effort: 'high' });
  await page.fill('#system', 'Speak as a king.');
  const body = await send(page, 'Why?');
  assert.deepEqual(body.messages, [{ role: 'system', content: 'Speak as a king.' }, { role: 'user', content: 'Why?' }]);
  assert.deepEqual(body.chat_template_kwargs, { thinking: true });
  assert.equal(body.reasoning_effort, 'high');
  await done(page);
  // The tiny model never closes </think>: all it says is reasoning.
  const reasoning = lastReply(page).locator('.reasoning');
  assert.ok(await reasoning.isVisible());
  const thought = await reasoning.locator('.reasoning-text').textContent();
  assert.ok(thought.length > 0);
  assert.equal(await reasoning.locator('summary').textContent(), `Thought (${thought.length} characters)`);
  assert.equal((await stored(page)).find((c) => c.title === 'Why?').system, 'Speak as a king.');
  await settings(page, { thinking: false });
  assert.equal(await page.isDisabled('#effort'), true);
  await page.click('#new-chat');
  assert.equal(await page.inputValue('#system'), '');

  // Tools: a bad setting sends nothing and names itself; a list goes into the request.
  await page.fill('#tools', '[{"type": "function"');
  await page.fill('#input', 'Weather?');
  await page.press('#input', 'Enter');
  await page.locator('#notice', { hasText: 'Settings, tools: not JSON' }).waitFor();
  assert.equal(await page.inputValue('#input'), 'Weather?');
  assert.equal(await page.locator('#messages .message').count(), 0);
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  await page.fill('#tools', JSON.stringify(tools));
  await settings(page, { maxTokens: 4 });
  const withTools = await send(page, 'Weather?');
  assert.deepEqual(withTools.tools, tools);
  await done(page);
  await page.fill('#tools', '');
});

// Model output made of markup, as a streamed reply and as an imported conversation.
const XSS = {
  reasoning: 'I will answer with <img src=x onerror="window.__xss=\'reasoning\'"> in it',
  content: [
    'Here is <script>window.__xss="script"</script> and <img src=x onerror="window.__xss=\'img\'">.',
    '**bold** and [a link](javascript:window.__xss=\'link\') and <a href="javascript:alert(1)">raw</a>',
    '',
    '```html',
    '<script>window.__xss="code"</script>',
    '```',
  ].join('\n'),
  tool: '<img src=x onerror="window.__xss=\'tool\'">',
  args: '{"html": "<script>window.__xss=1</script>"}',
};

function sse(chunks) {
  const base = { id: 'chatcmpl-mock', object: 'chat.completion.chunk', created: 1, model: 'tiny-shakespeare' };
  return chunks.map((c) => `data: ${JSON.stringify({ ...base, ...c })}\n\n`).join('') + 'data: [DONE]\n\n';
}

test('a reply made of HTML renders as text and runs nothing', { timeout: 30_000 }, async () => {
  const cut = XSS.content.indexOf('onerror');  // a piece ends inside a tag
  const body = sse([
    { choices: [{ index: 0, delta: { role: 'assistant' }, finish_reason: null }] },
    { choices: [{ index: 0, delta: { reasoning_content: XSS.reasoning }, finish_reason: null }] },
    { choices: [{ index: 0, delta: { content: XSS.content.slice(0, cut) }, finish_reason: null }] },
    { choices: [{ index: 0, delta: { content: XSS.content.slice(cut) }, finish_reason: null }] },
    { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: XSS.tool, arguments: '' } }] }, finish_reason: null }] },
    { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: XSS.args.slice(0, 9) } }] }, finish_reason: null }] },
    { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: XSS.args.slice(9) } }] }, finish_reason: 'tool_calls' }],
      usage: { prompt_tokens: 7, completion_tokens: 9, total_tokens: 16 } },
  ]);
  await page.route('**/v1/chat/completions', (route) => route.fulfill({ status: 200, contentType: 'text/event-stream', body }));
  await page.click('#new-chat');
  await send(page, 'Show me some HTML');
  await done(page);
  await page.unroute('**/v1/chat/completions');

  const reply = lastReply(page);
  assert.equal(await reply.locator('.content p').first().textContent(),
    `${XSS.content.split('\n')[0]}\nbold and a link and <a href="javascript:alert(1)">raw</a>`);
  assert.equal(await reply.locator('.content strong').textContent(), 'bold');
  assert.equal(await reply.locator('.content a').textContent(), 'a link');
  assert.equal(await reply.locator('.code-lang').textContent(), 'html');
  assert.equal(await reply.locator('.code pre code').textContent(), '<script>window.__xss="code"</script>');
  assert.equal(await reply.locator('.reasoning-text').textContent(), XSS.reasoning);
  assert.equal(await reply.locator('.tool-name').textContent(), XSS.tool);
  assert.equal(await reply.locator('.tool-id').textContent(), 'call_1');
  assert.equal(await reply.locator('.tool-args').textContent(), JSON.stringify(JSON.parse(XSS.args), null, 2));
  assert.match(await reply.locator('.stats').textContent(), /^7 prompt tokens · 9 generated · .* finish: tool_calls$/);
  await reply.locator('.content a').click();
  await assertInert(page);
  await page.screenshot({ path: path.join(artifacts, 'webui.png') });

  const imported = { title: 'Imported <b>markup</b>', messages: [
    { role: 'user', content: '<img src=x onerror="window.__xss=\'user\'">' },
    { role: 'assistant', content: XSS.content, reasoning_content: XSS.reasoning,
      tool_calls: [{ id: 'c', type: 'function', function: { name: XSS.tool, arguments: { html: '<script>x()</script>' } } }] },
  ] };
  await page.setInputFiles('#import', { name: 'markup.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify([imported])) });
  await page.locator('#notice', { hasText: 'imported 1 conversation' }).waitFor();
  assert.equal(await page.textContent('#conversations li.current .conv-title'), 'Imported <b>markup</b>');
  assert.equal(await page.textContent('#messages .user-text'), imported.messages[0].content);
  assert.equal(await lastReply(page).locator('.tool-args').textContent(), '{\n  "html": "<script>x()</script>"\n}');
  await assertInert(page);
  assert.deepEqual(browser.errors, []);
});

test('markdown renders as elements: headings, emphasis, code, nested lists, quotes, tables, links', { timeout: 30_000 }, async () => {
  const content = [
    '# Title', 'Some *em* and _em2_ and ~~gone~~ and `a < b` in snake_case_word.', '',
    '- one', '- two', '  - nested', '1. first', '2. second', '', '> quoted', '',
    '| a | b |', '|---|--:|', '| 1 | 2 |', '', '---', 'see https://example.com/x. and [**https://a.org**](https://a.org)',
  ].join('\n');
  const conv = { title: 'Markdown', messages: [{ role: 'user', content: 'md' }, { role: 'assistant', content }] };
  await page.evaluate(() => { document.getElementById('notice').textContent = ''; });
  await page.setInputFiles('#import', { name: 'md.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(conv)) });
  await page.waitForFunction(() => document.getElementById('notice').textContent !== '');
  assert.equal(await page.textContent('#notice'), 'imported 1 conversation');
  const dom = await page.evaluate(() => {
    const c = document.querySelector('.message.assistant .content');
    const texts = (sel) => [...c.querySelectorAll(sel)].map((e) => e.textContent);
    return {
      h1: texts('h1'), em: texts('em'), del: texts('del'), code: texts('p code'),
      p: c.querySelector('p').textContent,
      ul: texts(':scope > ul > li'), nested: texts('ul ul > li'), ol: texts('ol > li'),
      quote: texts('blockquote'), th: texts('th'), td: texts('td'),
      align: [...c.querySelectorAll('td')].map((e) => e.style.textAlign), hr: c.querySelectorAll('hr').length,
      links: [...c.querySelectorAll('a')].map((a) => [a.getAttribute('href'), a.textContent, a.rel]),
      nestedLinks: c.querySelectorAll('a a').length, bold: texts('a strong'),
    };
  });
  assert.deepEqual(dom, {
    h1: ['Title'], em: ['em', 'em2'], del: ['gone'], code: ['a < b'],
    p: 'Some em and em2 and gone and a < b in snake_case_word.',
    ul: ['one', 'twonested'], nested: ['nested'], ol: ['first', 'second'],
    quote: ['quoted'], th: ['a', 'b'], td: ['1', '2'], align: ['', 'right'], hr: 1,
    links: [['https://example.com/x', 'https://example.com/x', 'noopener noreferrer nofollow'],
      ['https://a.org', 'https://a.org', 'noopener noreferrer nofollow']],
    nestedLinks: 0, bold: ['https://a.org'],
  });
});

test('on a narrow screen the conversation list opens over the chat', { timeout: 30_000 }, async () => {
  await page.setViewportSize({ width: 480, height: 820 });
  try {
    assert.equal(await page.isVisible('#sidebar'), false);
    await page.click('#sidebar-toggle');
    assert.equal(await page.isVisible('#sidebar'), true);
    await page.click('#conversations .conv-title >> text=Show me some HTML');
    assert.equal(await page.isVisible('#sidebar'), false);
    assert.equal(await page.textContent('#messages .user-text'), 'Show me some HTML');
    await page.screenshot({ path: path.join(artifacts, 'webui-narrow.png') });
  } finally {
    await page.setViewportSize({ width: 1200, height: 820 });
  }
});

test('with --api-key the page asks for the key, keeps it, and chats', { timeout: 90_000 }, async () => {
  const keyed = await startServer(['--api-key', 'sekret']);
  const b = await openBrowser();
  try {
    assert.equal((await fetch(`${keyed.url}/`)).status, 200);
    assert.equal((await fetch(`${keyed.url}/webui/app.js`)).status, 200);
    assert.equal((await fetch(`${keyed.url}/v1/models`)).status, 401);
    const p = b.page;
    await p.goto(keyed.url);
    await p.locator('#key-dialog[open]').waitFor();
    assert.match(await p.textContent('#key-message'), /needs an API key/);
    await p.fill('#key-input', 'wrong');
    await p.click('#key-save');
    await p.locator('#key-dialog[open] #key-message', { hasText: 'refused the key' }).waitFor();
    await p.fill('#key-input', 'sekret');
    await p.click('#key-save');
    await p.locator('#model', { hasText: 'tiny-shakespeare' }).waitFor();
    assert.equal(await p.evaluate(() => localStorage.getItem('dsv4.apiKey')), 'sekret');
    await settings(p, { maxTokens: 8 });
    await send(p, 'Hello');
    await done(p);
    assert.ok((await lastReply(p).locator('.content').textContent()).length > 0);
    assert.equal(await lastReply(p).locator('.error').isVisible(), false);
    assert.match(await lastReply(p).locator('.stats').textContent(), /8 generated/);
    // Only the two 401 answers to the wrong and the missing key are logged.
    assert.ok(b.errors.every((e) => /401/.test(e)), b.errors.join('\n'));
  } finally {
    await b.close();
    assert.equal(await keyed.stop(), 0, keyed.stderr());
  }
});

test('--no-webui answers 404 at / and for the files; the API stays', { timeout: 60_000 }, async () => {
  const off = await startServer(['--no-webui']);
  try {
    for (const p of ['/', '/webui/app.js']) {
      const res = await fetch(`${off.url}${p}`);
      assert.equal(res.status, 404, p);
      assert.match((await res.json()).error.message, /--no-webui/);
    }
    assert.equal((await fetch(`${off.url}/v1/models`)).status, 200);
  } finally {
    assert.equal(await off.stop(), 0, off.stderr());
  }
});
