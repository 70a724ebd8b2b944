// Starts the real `dsv4 serve --port 0` for a test file and stops it; reads /metrics. The binary comes from
// $DSV4_BINARY (set by ctest). No npm packages: the browser tests (tests/server/browser) use it too.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

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

// The metrics once the server is idle (no running or queued sequence, no cache in use, no open HTTP
// stream), or the last sample after `ms`. The engine's gauges change before a reply's last event goes
// out, but an HTTP stream is closed by the server's I/O thread after it hands over the last bytes, so a
// client that has them can ask a moment too early; a stream that never closes still fails the caller's
// assertions after the deadline.
export async function idleMetrics(url, ms = 5000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const m = await metrics(url);
    const idle = m.dsv4_running_sequences === 0 && m.dsv4_queue_length === 0 && m.dsv4_cache_tokens_used === 0 &&
      m.dsv4_http_active_streams === 0;
    if (idle || Date.now() > deadline) return m;
    await new Promise((r) => setTimeout(r, 20));
  }
}
