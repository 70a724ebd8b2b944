// The chat page of dsv4 serve: conversations in localStorage, streamed chat completions with the
// reasoning apart from the answer, tool calls as blocks, token counts and speed per reply, a stop
// button (aborting the fetch closes the connection; the server then cancels the request), export /
// import, and the API key asked for when a /v1 call answers 401.
import { api, apiKey, AuthError, events, applyDelta } from './api.js';
import { renderMarkdown } from './markdown.js';
import * as store from './store.js';

const $ = (id) => document.getElementById(id);
const SETTINGS_KEY = 'dsv4.settings';
const DEFAULTS = { thinking: false, effort: '', temperature: 0.7, top_p: 1, max_tokens: 1024, tools: '' };

const state = {
  conversations: [],
  current: null,   // the conversation shown
  model: null,     // the served model's id, from /v1/models
  running: null,   // {controller, conv, msg} while a reply streams
  views: new Map(),  // message -> MessageView of the conversation shown
};

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function notice(text, kind = 'info') {
  const n = $('notice');
  n.textContent = text;
  n.dataset.kind = kind;
}

// ---- settings ----

function loadSettings() {
  try {
    return { ...DEFAULTS, ...JSON.parse(localStorage.getItem(SETTINGS_KEY) ?? '{}') };
  } catch {
    return { ...DEFAULTS };
  }
}

function readSettings() {
  const numberOr = (id, fallback) => ($(id).value === '' ? fallback : Number($(id).value));
  return {
    thinking: $('thinking').checked,
    effort: $('effort').value,
    temperature: numberOr('temperature', DEFAULTS.temperature),
    top_p: numberOr('top-p', DEFAULTS.top_p),
    max_tokens: numberOr('max-tokens', null),
    tools: $('tools').value,
  };
}

function showSettings(s) {
  $('thinking').checked = s.thinking;
  $('effort').value = s.effort;
  $('effort').disabled = !s.thinking;
  $('temperature').value = s.temperature;
  $('top-p').value = s.top_p;
  $('max-tokens').value = s.max_tokens ?? '';
  $('tools').value = s.tools;
}

// ---- storage ----

let saveTimer = null;
function persist() {
  clearTimeout(saveTimer);
  saveTimer = null;
  try {
    store.save(state.conversations);
  } catch (e) {
    notice(`could not save the conversations (${e.message}): export them, then delete some`, 'error');
  }
}

// While a reply streams, at most one save a second.
function persistSoon() {
  saveTimer ??= setTimeout(persist, 1000);
}

// ---- the API key ----

function askKey(message) {
  const dialog = $('key-dialog');
  $('key-message').textContent = message;
  $('key-input').value = '';
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      const key = $('key-input').value.trim();
      resolve(dialog.returnValue === 'save' && key ? key : null);
    }, { once: true });
  });
}

// Runs a /v1 call; on 401 asks for the key (saved in localStorage) and runs it again.
async function withKey(call) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await call();
    } catch (e) {
      if (!(e instanceof AuthError)) throw e;
      const why = attempt === 0 && !apiKey.get()
        ? 'This server needs an API key (dsv4 serve --api-key).'
        : `The server refused the key: ${e.message}`;
      const key = await askKey(why);
      if (!key) throw new Error('no API key given');
      apiKey.set(key);
    }
  }
}

// ---- conversations ----

function titleOf(text) {
  const t = text.trim().replace(/\s+/g, ' ');
  return t.length > 48 ? `${t.slice(0, 47)}…` : t || 'New chat';
}

function newConversation() {
  const now = Date.now();
  return { id: store.newId(), title: '', created: now, updated: now, system: state.current?.system ?? '', messages: [] };
}

function renderList() {
  const ul = $('conversations');
  ul.replaceChildren();
  const sorted = [...state.conversations].sort((a, b) => b.updated - a.updated);
  for (const c of sorted) {
    const li = el('li', c === state.current ? 'current' : '');
    const open = el('button', 'conv-title', c.title || 'New chat');
    open.type = 'button';
    open.title = new Date(c.updated).toLocaleString();
    open.addEventListener('click', () => select(c));
    const del = el('button', 'conv-delete', '×');
    del.type = 'button';
    del.title = 'Delete this conversation';
    del.setAttribute('aria-label', `Delete ${c.title || 'conversation'}`);
    del.disabled = state.running?.conv === c;
    del.addEventListener('click', () => remove(c));
    li.append(open, del);
    ul.append(li);
  }
}

function select(c) {
  state.current = c;
  $('system').value = c?.system ?? '';
  renderList();
  renderMessages();
}

function remove(c) {
  if (!confirm(`Delete "${c.title || 'New chat'}"?`)) return;
  state.conversations = state.conversations.filter((x) => x !== c);
  persist();
  if (state.current === c) select(null);
  else renderList();
}

// ---- messages ----

function formatStats(msg) {
  const s = msg.stats ?? {};
  const parts = [];
  if (s.prompt_tokens !== undefined) parts.push(`${s.prompt_tokens} prompt tokens`);
  if (s.completion_tokens !== undefined) parts.push(`${s.completion_tokens} generated`);
  if (s.tokens_per_second !== undefined) parts.push(`${s.tokens_per_second.toFixed(1)} tok/s`);
  if (s.first_token_seconds !== undefined) parts.push(`first token ${s.first_token_seconds.toFixed(2)} s`);
  if (s.seconds !== undefined) parts.push(`${s.seconds.toFixed(1)} s`);
  if (s.finish_reason) parts.push(`finish: ${s.finish_reason}`);
  if (msg.stopped) parts.push('stopped');
  return parts.join(' · ');
}

function toolCallBlock(call) {
  const box = el('div', 'tool-call');
  const head = el('div', 'tool-head');
  head.append(el('span', 'tool-label', 'tool call'), el('span', 'tool-name', call.function.name || '(unnamed)'));
  if (call.id) head.append(el('span', 'tool-id', call.id));
  let args = call.function.arguments;
  try {
    args = JSON.stringify(JSON.parse(args), null, 2);
  } catch { /* still streaming, or not JSON: shown as generated */ }
  const pre = el('pre', 'tool-args');
  pre.textContent = args;
  box.append(head, pre);
  return box;
}

// One message's element, updated in place while its reply streams (so that an opened or closed
// reasoning block stays as the reader left it).
class MessageView {
  constructor(msg) {
    this.msg = msg;
    this.root = el('article', `message ${msg.role}`);
    if (msg.role === 'user') {
      this.root.append(el('div', 'user-text', msg.content));
      return;
    }
    this.reasoning = el('details', 'reasoning');
    this.reasoningTitle = el('summary', '', 'Thinking');
    this.reasoningBody = el('div', 'reasoning-text');
    this.reasoning.append(this.reasoningTitle, this.reasoningBody);
    this.reasoning.open = !!msg.pending;
    this.content = el('div', 'content');
    this.tools = el('div', 'tool-calls');
    this.error = el('div', 'error');
    this.stats = el('div', 'stats');
    this.root.append(this.reasoning, this.content, this.tools, this.error, this.stats);
    this.update();
  }

  update() {
    const m = this.msg;
    if (m.role === 'user') return;
    this.reasoning.hidden = !m.reasoning_content;
    this.reasoningBody.textContent = m.reasoning_content;
    this.reasoningTitle.textContent = m.pending && !m.content ? 'Thinking…' : `Thought (${m.reasoning_content.length} characters)`;
    this.content.replaceChildren(renderMarkdown(m.content));
    this.root.classList.toggle('pending', !!m.pending);
    this.tools.replaceChildren(...m.tool_calls.filter(Boolean).map(toolCallBlock));
    this.error.hidden = !m.error;
    this.error.textContent = m.error ?? '';
    this.stats.textContent = m.pending ? 'generating…' : formatStats(m);
  }
}

function renderMessages() {
  const box = $('messages');
  state.views.clear();
  box.replaceChildren();
  if (!state.current || state.current.messages.length === 0) {
    box.append(el('div', 'empty', state.model ? `Chat with ${state.model}.` : 'Chat with dsv4.'));
    return;
  }
  for (const m of state.current.messages) {
    const v = new MessageView(m);
    state.views.set(m, v);
    box.append(v.root);
  }
  box.scrollTop = box.scrollHeight;
}

let frame = null;
function redraw(msg) {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = null;
    const box = $('messages');
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    state.views.get(msg)?.update();
    if (atBottom) box.scrollTop = box.scrollHeight;
  });
}

// ---- a reply ----

function apiMessages(conv) {
  const out = conv.system ? [{ role: 'system', content: conv.system }] : [];
  for (const m of conv.messages) {
    if (m.role === 'user') {
      out.push({ role: 'user', content: m.content });
      continue;
    }
    const calls = m.tool_calls.filter(Boolean);
    if (!m.content && !calls.length && !m.reasoning_content) continue;  // a failed reply
    const a = { role: 'assistant', content: m.content || (calls.length ? null : '') };
    if (m.reasoning_content) a.reasoning_content = m.reasoning_content;
    if (calls.length) a.tool_calls = calls;
    out.push(a);
  }
  return out;
}

// The tools setting as a list (empty: none); throws naming the setting.
function parseTools(text) {
  if (!text.trim()) return [];
  let tools;
  try {
    tools = JSON.parse(text);
  } catch (e) {
    throw new Error(`Settings, tools: not JSON (${e.message})`);
  }
  if (!Array.isArray(tools)) throw new Error('Settings, tools: expected a JSON list');
  return tools;
}

function requestBody(conv, s, tools) {
  const body = { messages: apiMessages(conv), stream: true, stream_options: { include_usage: true } };
  if (state.model) body.model = state.model;
  body.temperature = s.temperature;
  body.top_p = s.top_p;
  if (s.max_tokens) body.max_tokens = s.max_tokens;
  body.chat_template_kwargs = { thinking: s.thinking };
  if (s.thinking && s.effort) body.reasoning_effort = s.effort;
  if (tools.length) body.tools = tools;
  return body;
}

function setRunning(r) {
  state.running = r;
  $('send').hidden = !!r;
  $('stop').hidden = !r;
  renderList();
}

async function reply(conv, settings, tools) {
  const body = requestBody(conv, settings, tools);
  const msg = { role: 'assistant', content: '', reasoning_content: '', tool_calls: [], pending: true };
  conv.messages.push(msg);
  conv.updated = Date.now();
  const controller = new AbortController();
  setRunning({ controller, conv, msg });
  if (state.current === conv) renderMessages();
  persist();

  const t0 = performance.now();
  let tFirst = null, tLast = null, usage = null, finish = null;
  try {
    const res = await withKey(() => api('/v1/chat/completions', { method: 'POST', body, signal: controller.signal }));
    for await (const chunk of events(res)) {
      if (chunk.error) throw new Error(chunk.error.message ?? 'the server reported an error');
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      if (applyDelta(msg, choice.delta ?? {})) {
        tLast = performance.now();
        tFirst ??= tLast;
      }
      if (choice.finish_reason) finish = choice.finish_reason;
      redraw(msg);
      persistSoon();
    }
  } catch (e) {
    if (e.name === 'AbortError') msg.stopped = true;
    else msg.error = e.message;
  }
  const end = performance.now();
  msg.stats = { seconds: (end - t0) / 1000 };
  if (tFirst !== null) msg.stats.first_token_seconds = (tFirst - t0) / 1000;
  if (finish) msg.stats.finish_reason = finish;
  if (usage) {
    msg.stats.prompt_tokens = usage.prompt_tokens;
    msg.stats.completion_tokens = usage.completion_tokens;
    // Decode speed: the tokens after the first over the time after the first (the first token's
    // time is the prompt's).
    if (usage.completion_tokens > 1 && tLast > tFirst)
      msg.stats.tokens_per_second = (usage.completion_tokens - 1) / ((tLast - tFirst) / 1000);
  }
  msg.tool_calls = msg.tool_calls.filter(Boolean);
  delete msg.pending;
  conv.updated = Date.now();
  setRunning(null);
  persist();
  state.views.get(msg)?.update();
}

function send() {
  const text = $('input').value;
  if (!text.trim() || state.running) return;
  const settings = readSettings();
  let tools;
  try {
    tools = parseTools(settings.tools);
  } catch (e) {
    notice(e.message, 'error');  // nothing is sent, the message stays in the input
    return;
  }
  let conv = state.current;
  if (!conv) {
    conv = newConversation();
    conv.system = $('system').value;
    state.conversations.push(conv);
    state.current = conv;
  }
  if (!conv.title) conv.title = titleOf(text);
  conv.messages.push({ role: 'user', content: text });
  $('input').value = '';
  notice('');
  reply(conv, settings, tools);
}

// ---- export / import ----

function exportAll() {
  const doc = store.exportDocument(state.conversations);
  const blob = new Blob([JSON.stringify(doc, null, 2)], { type: 'application/json' });
  const a = el('a');
  a.href = URL.createObjectURL(blob);
  a.download = `dsv4-conversations-${new Date().toISOString().slice(0, 10)}.json`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

async function importFile(file) {
  try {
    const added = store.parseImport(await file.text());
    const ids = new Set(state.conversations.map((c) => c.id));
    for (const c of added) {
      if (ids.has(c.id)) c.id = store.newId();  // an import never replaces a conversation
      ids.add(c.id);
    }
    state.conversations.push(...added);
    persist();
    select(added[0] ?? state.current);
    notice(`imported ${added.length} conversation${added.length === 1 ? '' : 's'}`);
  } catch (e) {
    notice(`import of ${file.name}: ${e.message}`, 'error');
  }
}

// ---- start ----

async function loadModel() {
  try {
    const res = await withKey(() => api('/v1/models'));
    const list = await res.json();
    const m = list.data?.[0];
    if (m) {
      state.model = m.id;
      $('model').textContent = m.max_model_len ? `${m.id} · context ${m.max_model_len}` : m.id;
      if (!state.current?.messages.length) renderMessages();
    }
  } catch (e) {
    notice(`the model list could not be read: ${e.message}`, 'error');
  }
}

function start() {
  const loaded = store.load();
  state.conversations = loaded.conversations;
  // A reply that was streaming when the page went away ends there.
  for (const c of state.conversations)
    for (const m of c.messages) if (m.role === 'assistant' && !m.stats && !m.error) m.stopped = true;
  if (loaded.error) notice(loaded.error, 'error');
  showSettings(loadSettings());
  const newest = [...state.conversations].sort((a, b) => b.updated - a.updated)[0] ?? null;
  select(newest);

  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    send();
  });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  $('stop').addEventListener('click', () => state.running?.controller.abort());
  $('new-chat').addEventListener('click', () => {
    select(null);
    $('input').focus();
  });
  $('sidebar-toggle').addEventListener('click', () => document.body.classList.toggle('sidebar-open'));
  $('conversations').addEventListener('click', () => document.body.classList.remove('sidebar-open'));
  $('settings-toggle').addEventListener('click', () => {
    const s = $('settings');
    s.hidden = !s.hidden;
    $('settings-toggle').setAttribute('aria-expanded', String(!s.hidden));
  });
  $('settings').addEventListener('change', () => {
    const s = readSettings();
    $('effort').disabled = !s.thinking;
    localStorage.setItem(SETTINGS_KEY, JSON.stringify(s));
  });
  $('system').addEventListener('input', () => {
    if (!state.current) return;
    state.current.system = $('system').value;
    persistSoon();
  });
  $('forget-key').addEventListener('click', () => {
    apiKey.set('');
    notice('the API key is forgotten');
  });
  $('export').addEventListener('click', exportAll);
  $('import').addEventListener('change', (e) => {
    const f = e.target.files?.[0];
    e.target.value = '';
    if (f) importFile(f);
  });
  window.addEventListener('beforeunload', persist);
  loadModel();
}

start();
