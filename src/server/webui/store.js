// Conversations kept in the browser (localStorage), and their export / import as JSON.
//
// A conversation: {id, title, created, updated (ms since 1970), system (the system prompt), messages}.
// A message: {role: "user", content} or {role: "assistant", content, reasoning_content, tool_calls:
// [{id, type: "function", function: {name, arguments}}], stats: {prompt_tokens, completion_tokens,
// seconds, first_token_seconds, tokens_per_second, finish_reason}, stopped, error}. Everything read
// back (from storage or a file) goes through normalize(), which keeps only these fields with these
// types, so a hand-edited or foreign file cannot put anything else into the page.

const STORAGE_KEY = 'dsv4.conversations';
export const FORMAT = 'dsv4-chat';

export function newId() {
  return `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
}

class ImportError extends Error {}

function fail(where, what) {
  throw new ImportError(`${where}: ${what}`);
}

function str(v, where, { optional = true } = {}) {
  if (v === undefined || v === null) {
    if (!optional) fail(where, 'missing (expected a string)');
    return '';
  }
  if (typeof v !== 'string') fail(where, `expected a string, got ${typeof v}`);
  return v;
}

function num(v, where) {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) fail(where, 'expected a number');
  return v;
}

function toolCall(t, where) {
  if (typeof t !== 'object' || t === null) fail(where, 'expected an object');
  const f = t.function;
  if (typeof f !== 'object' || f === null) fail(`${where}.function`, 'expected an object');
  const args = typeof f.arguments === 'object' && f.arguments !== null ? JSON.stringify(f.arguments) : f.arguments;
  return {
    id: str(t.id, `${where}.id`),
    type: 'function',
    function: { name: str(f.name, `${where}.function.name`, { optional: false }), arguments: str(args, `${where}.function.arguments`) },
  };
}

function message(m, where) {
  if (typeof m !== 'object' || m === null) fail(where, 'expected an object');
  if (m.role !== 'user' && m.role !== 'assistant') fail(`${where}.role`, 'expected "user" or "assistant"');
  const out = { role: m.role, content: str(m.content, `${where}.content`) };
  if (m.role === 'user') return out;
  out.reasoning_content = str(m.reasoning_content, `${where}.reasoning_content`);
  if (m.tool_calls !== undefined && m.tool_calls !== null && !Array.isArray(m.tool_calls)) fail(`${where}.tool_calls`, 'expected a list');
  out.tool_calls = (m.tool_calls ?? []).map((t, i) => toolCall(t, `${where}.tool_calls[${i}]`));
  if (m.stats !== undefined && m.stats !== null) {
    if (typeof m.stats !== 'object') fail(`${where}.stats`, 'expected an object');
    out.stats = {};
    for (const k of ['prompt_tokens', 'completion_tokens', 'seconds', 'first_token_seconds', 'tokens_per_second']) {
      const v = num(m.stats[k], `${where}.stats.${k}`);
      if (v !== undefined) out.stats[k] = v;
    }
    if (m.stats.finish_reason !== undefined) out.stats.finish_reason = str(m.stats.finish_reason, `${where}.stats.finish_reason`);
  }
  if (m.stopped === true) out.stopped = true;
  if (m.error !== undefined) out.error = str(m.error, `${where}.error`);
  return out;
}

export function normalize(c, where) {
  if (typeof c !== 'object' || c === null || Array.isArray(c)) fail(where, 'expected a conversation object');
  if (!Array.isArray(c.messages)) fail(`${where}.messages`, 'expected a list');
  const now = Date.now();
  return {
    id: typeof c.id === 'string' && c.id ? c.id : newId(),
    title: str(c.title, `${where}.title`),
    created: num(c.created, `${where}.created`) ?? now,
    updated: num(c.updated, `${where}.updated`) ?? now,
    system: str(c.system, `${where}.system`),
    messages: c.messages.map((m, i) => message(m, `${where}.messages[${i}]`)),
  };
}

// The stored conversations, newest first; a damaged store reads as empty (and is reported).
export function load() {
  const text = localStorage.getItem(STORAGE_KEY);
  if (!text) return { conversations: [], error: null };
  try {
    const list = JSON.parse(text);
    if (!Array.isArray(list)) fail('stored conversations', 'expected a list');
    return { conversations: list.map((c, i) => normalize(c, `stored conversations[${i}]`)), error: null };
  } catch (e) {
    return { conversations: [], error: `the stored conversations could not be read (${e.message})` };
  }
}

// Throws when the browser's storage is full (the caller says so).
export function save(conversations) {
  localStorage.setItem(STORAGE_KEY, JSON.stringify(conversations));
}

export function exportDocument(conversations) {
  return { format: FORMAT, version: 1, exported: new Date().toISOString(), conversations };
}

// The conversations in an imported file: an export document, a list of conversations, or one
// conversation. Throws an Error whose message names the offending field.
export function parseImport(text) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new ImportError(`not JSON (${e.message})`);
  }
  if (Array.isArray(doc)) return doc.map((c, i) => normalize(c, `[${i}]`));
  if (typeof doc === 'object' && doc !== null && Array.isArray(doc.conversations)) {
    if (doc.format !== undefined && doc.format !== FORMAT) fail('format', `expected "${FORMAT}"`);
    return doc.conversations.map((c, i) => normalize(c, `conversations[${i}]`));
  }
  return [normalize(doc, 'conversation')];
}
