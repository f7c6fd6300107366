import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { gunzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { FullSnapshotVerifier } from '../../src/backup/full-verify.js';

const COMPAT = join(import.meta.dirname, '../../../shared/compat/upstream-v0.23');

async function verify(chunks: Buffer[]): Promise<{ out: Buffer; verifier: FullSnapshotVerifier }> {
  const got: Buffer[] = [];
  const verifier = new FullSnapshotVerifier('Full-test');
  await pipeline(
    Readable.from(chunks),
    verifier,
    new Writable({
      write(c: Buffer, _e, cb) {
        got.push(c);
        cb();
      },
    }),
  );
  return { out: Buffer.concat(got), verifier };
}

function chunked(buf: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < buf.length; i += size) out.push(buf.subarray(i, i + size));
  return out;
}

describe('full snapshot verifier', () => {
  const payload = gunzipSync(readFileSync(join(COMPAT, 'gzip/snapstore/v2/Full-00000000-00000301-1795219404.gz')));

  it.each([31, 32, 33, 4096, 65536])('passes an upstream full snapshot through unchanged (chunks of %i)', async (size) => {
    const { out, verifier } = await verify(chunked(payload, size));
    expect(out.equals(payload)).toBe(true);
    expect(verifier.result?.totalBytes).toBe(payload.length);
    expect(verifier.result?.sha256).toBe(createHash('sha256').update(payload.subarray(0, -32)).digest('hex'));
  });

  it('rejects a stream without the hash trailer', async () => {
    await expect(verify([payload.subarray(0, payload.length - 32)])).rejects.toThrow(/Full-test.*hash seems to be missing/);
  });

  it('rejects a stream whose trailer does not match', async () => {
    const bad = Buffer.from(payload);
    bad[10_000]! ^= 0xff;
    await expect(verify(chunked(bad, 4096))).rejects.toThrow(/Full-test: expected SHA256/);
  });
});
