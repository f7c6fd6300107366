/**
 * The delta-capture bench's load generator (e2e/bench/support/put-load.ts) speaks gRPC by hand, so its
 * encoding is checked here against a real etcd: every put lands as its own revision with the key and
 * value it claims, the revision it reports is etcd's, and etcd's errors are counted, not swallowed.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cleanupAfterEach } from '../test/support/cleanups.js';
import { startEtcdWithClient } from '../test/support/etcd.js';
import type { PutLoadResult as LoadResult } from './bench/support/put-load-result.js';

const SCRIPT = join(import.meta.dirname, 'bench/support/put-load.ts');

function runLoad(args: string[]): Promise<{ result: LoadResult; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', SCRIPT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) reject(new Error(`put-load exited with ${code}: ${stderr}`));
      else resolve({ result: JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as LoadResult, stderr });
    });
  });
}

const cleanups = cleanupAfterEach();

describe('bench load generator (put-load)', () => {
  it('puts one revision per value, with the keys and stamped values it reports', async () => {
    const env = await startEtcdWithClient('etcdbr-put-load-');
    cleanups.push(() => env.cleanup());
    const { result } = await runLoad([
      `--endpoint=${env.etcd.clientUrl}`,
      '--rate=200',
      '--seconds=1',
      '--value-bytes=100',
      '--keys=1000000',
      '--concurrency=8',
    ]);

    expect(result.errors).toBe(0);
    expect(result.puts).toBeGreaterThan(0);
    // A fresh etcd is at revision 1; each put is one request and so exactly one revision.
    expect(result.lastRevision).toBe(result.puts + 1);
    const status = await env.client.maintenance.status();
    expect(Number(status.header.revision)).toBe(result.lastRevision);

    const kvs = await env.client.getAll().prefix('/registry/load/').exec();
    expect(kvs.kvs).toHaveLength(result.puts);
    for (const kv of kvs.kvs) {
      const key = kv.key.toString();
      const n = Number(key.slice('/registry/load/key-'.length));
      expect(kv.value).toHaveLength(100);
      expect(kv.value.subarray(0, 12).toString('latin1')).toBe(String(n).padStart(12, '0'));
    }
  });

  it("counts etcd's rejections as errors and names the first", async () => {
    const env = await startEtcdWithClient('etcdbr-put-load-');
    cleanups.push(() => env.cleanup());
    // 2 MB is over etcd's default request limit (1.5 MiB), so every put is refused by etcd itself.
    const { result, stderr } = await runLoad([
      `--endpoint=${env.etcd.clientUrl}`,
      '--rate=20',
      '--seconds=1',
      '--value-bytes=2000000',
      '--concurrency=2',
    ]);

    expect(result.puts).toBe(0);
    expect(result.errors).toBeGreaterThan(0);
    // The generator does not decode gRPC status (no HPACK decoder), so it names the stream that ended bare.
    expect(stderr).toMatch(
      /the first: \/etcdserverpb\.KV\/Put on stream \d+ ended with no response message \(a gRPC error; status not decoded\)/,
    );
  });
});
