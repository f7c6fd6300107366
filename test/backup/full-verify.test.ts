import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { gunzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { FullSnapshotVerifier } from '../../src/backup/full-verify.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';

const COMPAT = UPSTREAM_V023;

async function verify(chunks: Buffer[], offThread = true): Promise<{ out: Buffer; verifier: FullSnapshotVerifier }> {
  const got: Buffer[] = [];
  const verifier = new FullSnapshotVerifier('Full-test', { offThread });
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

  it.each([
    [1, true],
    [31, true],
    [32, true],
    [33, true],
    [4096, true],
    [65536, true],
    [31, false],
    [4096, false],
  ])('passes an upstream full snapshot through unchanged (chunks of %i, hash off-thread: %s)', async (size, offThread) => {
    const { out, verifier } = await verify(chunked(payload, size), offThread);
    expect(out.equals(payload)).toBe(true);
    expect(verifier.result?.totalBytes).toBe(payload.length);
    expect(verifier.result?.sha256).toBe(createHash('sha256').update(payload.subarray(0, -32)).digest('hex'));
  });

  it('rejects a stream without the hash trailer', async () => {
    await expect(verify([payload.subarray(0, payload.length - 32)])).rejects.toThrow(/Full-test.*hash seems to be missing/);
  });

  it.each([true, false])('rejects a stream whose trailer does not match (hash off-thread: %s)', async (offThread) => {
    const bad = Buffer.from(payload);
    bad[10_000]! ^= 0xff;
    await expect(verify(chunked(bad, 4096), offThread)).rejects.toThrow(/Full-test: expected SHA256/);
  });

  it('rejects a tampered trailer byte', async () => {
    const bad = Buffer.from(payload);
    bad[bad.length - 1]! ^= 0x01;
    await expect(verify(chunked(bad, 1000))).rejects.toThrow(/Full-test: expected SHA256/);
  });
});
