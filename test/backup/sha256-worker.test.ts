import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { OffThreadSha256 } from '../../src/backup/sha256-worker.js';

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

describe('sha256 on a worker thread', () => {
  it('hashes nothing like createHash does', async () => {
    const h = new OffThreadSha256();
    expect((await h.digest()).toString('hex')).toBe(sha(Buffer.alloc(0)));
  });

  it.each([
    ['pieces smaller than a batch', 1000, 7],
    ['pieces that straddle batches', 4096, 1500],
    ['pieces larger than several batches', 4096, 40_000],
  ])('matches createHash for %s', async (_name, batchBytes, piece) => {
    // maxInFlight 2 with tiny batches forces update() to wait for the worker many times.
    const h = new OffThreadSha256({ batchBytes, maxInFlight: 2 });
    const data = randomBytes(300_001);
    for (let i = 0; i < data.length; i += piece) await h.update(data.subarray(i, i + piece));
    expect((await h.digest()).toString('hex')).toBe(sha(data));
  });

  it("does not keep an abandoned hasher's process alive", () => {
    // A snapshot aborted mid-stream never calls digest(); the process must still be able to exit.
    const url = new URL('../../src/backup/sha256-worker.ts', import.meta.url).href;
    const script = `const { OffThreadSha256 } = await import(${JSON.stringify(url)});
const h = new OffThreadSha256({ batchBytes: 16 });
await h.update(Buffer.alloc(64, 1));
console.log('updated');`;
    const res = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(res.stdout).toContain('updated');
    expect(res.signal).toBeNull();
    expect(res.status).toBe(0);
  });

  it('fails updates after close instead of hanging', async () => {
    const h = new OffThreadSha256({ batchBytes: 16 });
    await h.close();
    await expect(h.update(Buffer.alloc(64))).rejects.toThrow();
  });
});
