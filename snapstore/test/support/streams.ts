/** Byte sources and a stream driver for the codec and encryption tests. */
import { Readable, Writable } from 'node:stream';
import type { Duplex } from 'node:stream';
import { pipeline } from 'node:stream/promises';

/** Deterministic pseudo-random bytes (mulberry32), so failures reproduce. */
export function randomBytes(n: number, seed: number): Buffer {
  const out = Buffer.allocUnsafe(n);
  let a = seed >>> 0;
  for (let i = 0; i < n; i++) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = (t ^ (t >>> 14)) & 0xff;
  }
  return out;
}

export function* chunksOf(data: Buffer, size: number): Generator<Buffer> {
  for (let i = 0; i < data.length; i += size) yield data.subarray(i, i + size);
}

/** Pipes `data`, cut into `chunkSize` writes, through `t` and collects what comes out. */
export async function through(t: Duplex, data: Buffer, chunkSize = 65536): Promise<Buffer> {
  const out: Buffer[] = [];
  await pipeline(
    Readable.from(chunksOf(data, chunkSize)),
    t,
    new Writable({
      write(chunk: Buffer, _enc, cb) {
        out.push(chunk);
        cb();
      },
    }),
  );
  return Buffer.concat(out);
}
