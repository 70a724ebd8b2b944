// Starts the real `dsv4 serve --port 0` for a test file and stops it; helpers for the OpenAI client
// and /metrics. The binary comes from $DSV4_BINARY (set by ctest).
import { spawn, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

export const binary = () => {
  const bin = process.env.DSV4_BINARY;
  if (!bin) throw new Error('set DSV4_BINARY to the dsv4 executable');
  return bin;
};

export async function startServer(args = [], { timeoutMs = 60_000 } = {}) {
  const child = spawn(binary(), ['serve', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve(signal ? -1 : code)));
  const url = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`dsv4 serve did not start in time: ${stderr}`)), timeoutMs);
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:\d+/);
      if (m && out.includes('\n')) {
        clearTimeout(timer);
        resolve(m[0]);
      }
    });
    exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`dsv4 serve exited with ${code}: ${stderr}`));
    });
  });
  return {
    url,
    pid: child.pid,
    stderr: () => stderr,
    // SIGTERM, then the exit status (SIGKILL after `ms`).
    async stop(ms = 30_000) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), ms);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

export function client(url, options = {}) {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000, ...options });
}

// Resident memory of a process in bytes (VmRSS in /proc/PID/status).
export function rssBytes(pid) {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m);
  return Number(m[1]) * 1024;
}

// First sample of each metric name in the Prometheus text.
export async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const values = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const name = line.match(/^[a-zA-Z_:][a-zA-Z0-9_:]*/)[0];
    if (!(name in values)) values[name] = Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return values;
}

// Token ids of the DeepSeek-V4 prompt for a chat document, as `dsv4 template` renders it.
export function templateIds(doc, { thinking = false } = {}) {
  const out = execFileSync(binary(), ['template', '--messages', '-', '--ids', '--json', ...(thinking ? ['--thinking'] : [])],
    { input: JSON.stringify(doc) });
  return JSON.parse(out.toString());
}
