// The server's OpenAI routes as the page uses them: the API key (localStorage), JSON errors, and the
// server-sent events of a streamed chat completion.

const KEY_STORAGE = 'dsv4.apiKey';

export const apiKey = {
  get: () => localStorage.getItem(KEY_STORAGE) ?? '',
  set: (k) => (k ? localStorage.setItem(KEY_STORAGE, k) : localStorage.removeItem(KEY_STORAGE)),
};

// A /v1 call answered 401: the page asks for the key and tries again.
export class AuthError extends Error {}

// The message of an OpenAI error body, or the HTTP status.
async function errorMessage(res) {
  try {
    const j = await res.json();
    if (typeof j?.error?.message === 'string') return j.error.message;
  } catch { /* not JSON */ }
  return `HTTP ${res.status} ${res.statusText}`;
}

// fetch() with the key; resolves to a 2xx Response, throws AuthError on 401 and Error otherwise.
export async function api(path, { method = 'GET', body, signal } = {}) {
  const headers = {};
  const key = apiKey.get();
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
  if (res.status === 401) throw new AuthError(await errorMessage(res));
  if (!res.ok) throw new Error(await errorMessage(res));
  return res;
}

// The JSON payloads of a text/event-stream body, up to `data: [DONE]`.
export async function* events(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value ?? new Uint8Array(), { stream: !done });
    buffer = buffer.replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (!data) continue;
      if (data === '[DONE]') return;
      yield JSON.parse(data);
    }
    if (done) {
      if (buffer.trim()) throw new Error('the stream ended inside an event');
      throw new Error('the stream ended without [DONE]');
    }
  }
}

// Adds one chat.completion.chunk's delta to `msg` (content, reasoning_content, tool_calls by index).
// Returns whether it carried generated text.
export function applyDelta(msg, delta) {
  let text = false;
  if (typeof delta.reasoning_content === 'string' && delta.reasoning_content) {
    msg.reasoning_content += delta.reasoning_content;
    text = true;
  }
  if (typeof delta.content === 'string' && delta.content) {
    msg.content += delta.content;
    text = true;
  }
  for (const t of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
    const i = Number.isInteger(t.index) ? t.index : msg.tool_calls.length;
    const call = (msg.tool_calls[i] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
    if (typeof t.id === 'string') call.id = t.id;
    if (typeof t.function?.name === 'string') call.function.name += t.function.name;
    if (typeof t.function?.arguments === 'string') call.function.arguments += t.function.arguments;
    text = true;
  }
  return text;
}
