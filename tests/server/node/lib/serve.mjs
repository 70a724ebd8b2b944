// Helpers for the OpenAI client tests: the server process and /metrics (server_process.mjs), the client.
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import { binary } from './server_process.mjs';

export { binary, startServer, metrics, idleMetrics, rssBytes } from './server_process.mjs';

export function client(url, options = {}) {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000, ...options });
}

// Token ids of the DeepSeek-V4 prompt for a chat document, as `dsv4 template` renders it.
export function templateIds(doc, { thinking = false } = {}) {
  const out = execFileSync(binary(), ['template', '--messages', '-', '--ids', '--json', ...(thinking ? ['--thinking'] : [])],
    { input: JSON.stringify(doc) });
  return JSON.parse(out.toString());
}
