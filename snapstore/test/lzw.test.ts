/**
 * LZW in Go's flavour (compress/lzw, LSB, 8-bit literals): unit cases with literal expectations, stream
 * behaviour (chunking, truncation, backpressure) and byte-for-byte agreement with Go's real encoder and decoder.
 */
import { createHash } from 'node:crypto';
import { createReadStream, readdirSync } from 'node:fs';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { LzwDecoder, LzwEncoder } from '../src/lzw.js';
import { goProgramOnFirstRun } from './support/go.js';
import { randomBytes, through } from './support/streams.js';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { UPSTREAM_V023 } from '../../test/support/fixtures.js';

/** Text with the repetitiveness of etcd's kube objects. */
function kubeText(n: number, seed: number): Buffer {
  const words = ['metadata', 'namespace', 'kube-system', 'labels', 'app', 'resourceVersion', 'spec', 'containers'];
  const rnd = randomBytes(n, seed);
  const parts: string[] = [];
  let len = 0;
  for (let i = 0; len < n; i++) {
    const w = words[rnd[i % n]! % words.length]!;
    const s = `{"${w}":"${w}-${rnd[(i * 7) % n]!.toString(16)}","n":${i % 1000}},`;
    parts.push(s);
    len += s.length;
  }
  return Buffer.from(parts.join('')).subarray(0, n);
}

const encode = (data: Buffer, chunkSize?: number): Promise<Buffer> => through(new LzwEncoder(), data, chunkSize);
const decode = (data: Buffer, chunkSize?: number): Promise<Buffer> => through(new LzwDecoder(), data, chunkSize);
const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** Packs codes LSB-first with the widths a Go decoder expects (hi bumps after every code but clear). */
function packCodes(codes: readonly number[]): Buffer {
  let width = 9;
  let hi = 257;
  let overflow = 512;
  let bits = 0;
  let nBits = 0;
  const out: number[] = [];
  for (const code of codes) {
    bits |= code << nBits;
    nBits += width;
    while (nBits >= 8) {
      out.push(bits & 0xff);
      bits >>>= 8;
      nBits -= 8;
    }
    if (code === 256) {
      width = 9;
      hi = 257;
      overflow = 512;
      continue;
    }
    if (code === 257) break;
    hi++;
    if (hi >= overflow) {
      if (width === 12) hi--;
      else {
        width++;
        overflow <<= 1;
      }
    }
  }
  if (nBits > 0) out.push(bits & 0xff);
  return Buffer.from(out);
}

/** The inverse of packCodes: the code sequence of a stream, up to and including EOF. */
function readCodes(data: Buffer): number[] {
  let width = 9;
  let hi = 257;
  let overflow = 512;
  let bits = 0;
  let nBits = 0;
  let i = 0;
  const codes: number[] = [];
  for (;;) {
    while (nBits < width && i < data.length) {
      bits |= data[i++]! << nBits;
      nBits += 8;
    }
    if (nBits < width) return codes;
    const code = bits & ((1 << width) - 1);
    bits >>>= width;
    nBits -= width;
    codes.push(code);
    if (code === 257) return codes;
    if (code === 256) {
      width = 9;
      hi = 257;
      overflow = 512;
      continue;
    }
    hi++;
    if (hi >= overflow) {
      if (width === 12) hi--;
      else {
        width++;
        overflow <<= 1;
      }
    }
  }
}

describe('lzw encoder', () => {
  it('writes exactly what Go writes for known inputs', async () => {
    // Expected bytes produced by Go 1.19 lzw.NewWriter(w, lzw.LSB, 8).
    expect((await encode(Buffer.alloc(0))).toString('hex')).toBe('000302');
    expect((await encode(Buffer.from('a'))).toString('hex')).toBe('00c30404');
    expect((await encode(Buffer.from('TOBEORNOTTOBEORTOBEORNOT'))).toString('hex')).toBe('00a93c1152e48914274fa80824687061c183090302');
  });

  it('starts with a clear code, ends with EOF and zero padding', async () => {
    const codes = readCodes(await encode(Buffer.from('hello hello hello')));
    expect(codes[0]).toBe(256);
    expect(codes.at(-1)).toBe(257);
    expect(codes.slice(1, 7)).toEqual([...'hello '].map((c) => c.charCodeAt(0)));
  });

  it('emits a clear code when the table is full, at next code 4095 and width 12', async () => {
    const data = randomBytes(20_000, 1);
    const codes = readCodes(await encode(data));
    const clears = codes.flatMap((c, i) => (c === 256 ? [i] : []));
    expect(clears.length).toBeGreaterThanOrEqual(4);
    // Between clears there are exactly 4095 - 258 + 1 codes: the first literal plus one per new table entry.
    for (let k = 1; k < clears.length; k++) expect(clears[k]! - clears[k - 1]! - 1).toBe(3838);
  });

  it('output does not depend on how the input is chunked', async () => {
    const data = kubeText(300_000, 2);
    const whole = await encode(data, data.length);
    for (const size of [1, 7, 255, 4093, 65537]) {
      const input = size === 1 ? data.subarray(0, 20_000) : data;
      const expected = size === 1 ? await encode(input, input.length) : whole;
      expect((await encode(input, size)).equals(expected)).toBe(true);
    }
  });
});

describe('lzw decoder', () => {
  it('round-trips empty, 1 byte, random, repetitive and multi-megabyte inputs in odd chunk sizes', async () => {
    const cases: Array<[string, Buffer]> = [
      ['empty', Buffer.alloc(0)],
      ['one byte', Buffer.from([0xff])],
      ['random 1 MiB', randomBytes(1 << 20, 3)],
      ['zeros 3 MiB', Buffer.alloc(3 << 20)],
      ['kube text 5 MiB', kubeText(5 << 20, 4)],
    ];
    for (const [name, data] of cases) {
      const enc = await encode(data, 65537);
      for (const size of [3, 4093, 1 << 20]) {
        const dec = await decode(enc, size);
        expect(dec.length, name).toBe(data.length);
        expect(dec.equals(data), `${name} chunk ${size}`).toBe(true);
      }
    }
  });

  it('decodes byte-sized chunks', async () => {
    const data = kubeText(50_000, 5);
    expect((await decode(await encode(data), 1)).equals(data)).toBe(true);
  });

  it('fails when the stream is cut anywhere before the end-of-stream code', async () => {
    const enc = await encode(kubeText(4_000, 6));
    for (let cut = 0; cut < enc.length; cut++) {
      await expect(decode(enc.subarray(0, cut)), `cut at ${cut}`).rejects.toThrow(/end of stream/);
    }
  });

  it('reports truncation through makeError', async () => {
    const enc = await encode(Buffer.from('some data'));
    const err = await through(
      new LzwDecoder({ makeError: (m) => Object.assign(new Error(`wrapped: ${m}`), { code: 'X' }) }),
      enc.subarray(0, enc.length - 1),
    ).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'X', message: expect.stringMatching(/^wrapped: unexpected end of stream/) });
  });

  it('ignores bytes after the end-of-stream code, as Go does', async () => {
    const data = Buffer.from('payload payload payload');
    const enc = await encode(data);
    expect((await decode(Buffer.concat([enc, Buffer.from('trailing garbage')]))).equals(data)).toBe(true);
  });

  it('rejects a code that is not defined yet', async () => {
    // After clear and 'a' the next code to be assigned is 258; 300 is invalid.
    await expect(decode(packCodes([256, 97, 300, 257]))).rejects.toThrow(/invalid code 300/);
  });

  it('accepts a stream without a leading clear code', async () => {
    // 97 'a', 258 = "aa" (defined by this very code), 98 'b', 259 = "aab"... as Go's reader does.
    expect((await decode(packCodes([97, 258, 98, 257]))).toString()).toBe('aaab');
  });

  it('pauses on backpressure instead of buffering a whole chunk worth of output', async () => {
    // 16 MiB of zeros encode to ~13 KB; fed as one chunk, the decoder must not queue the whole expansion (64
    // times the 256 KiB allowed below, so a decoder that does is caught).
    const size = 16 << 20;
    const enc = await encode(Buffer.alloc(size));
    expect(enc.length).toBeLessThan(100_000);
    const dec = new LzwDecoder();
    let maxQueued = 0;
    let total = 0;
    let nonZero = 0;
    await pipeline(
      Readable.from([enc]),
      dec,
      new Writable({
        highWaterMark: 64 * 1024,
        write(chunk: Buffer, _enc, cb) {
          maxQueued = Math.max(maxQueued, dec.readableLength);
          total += chunk.length;
          if (chunk.some((b) => b !== 0)) nonZero++;
          setImmediate(cb);
        },
      }),
    );
    expect(total).toBe(size);
    expect(nonZero).toBe(0);
    expect(maxQueued).toBeLessThanOrEqual(256 * 1024);
  });
});

describe('lzw against Go compress/lzw (LSB, 8)', () => {
  const go = goProgramOnFirstRun('codechelper');
  afterAll(() => go.cleanup());

  const inputs = (): Array<[string, Buffer]> => [
    ['empty', Buffer.alloc(0)],
    ['one byte', Buffer.from([0x42])],
    ['random 2 MiB', randomBytes(2 << 20, 7)],
    ['zeros 4 MiB', Buffer.alloc(4 << 20)],
    ['kube text 3 MiB', kubeText(3 << 20, 8)],
  ];

  it('our bytes are identical to Go encoder bytes', async () => {
    for (const [name, data] of inputs()) {
      const ours = await encode(data, 4093);
      const theirs = await go.run(['encode', 'lzw'], data);
      expect(ours.length, name).toBe(theirs.length);
      expect(ours.equals(theirs), name).toBe(true);
    }
  });

  it('Go decodes what we write and we decode what Go writes', async () => {
    for (const [name, data] of inputs()) {
      const expected = `${sha(data)} ${data.length}`;
      expect((await go.run(['decode', 'lzw'], await encode(data))).toString().trim(), name).toBe(expected);
      const fromGo = await go.run(['encode', 'lzw'], data);
      expect(sha(await decode(fromGo, 999)), name).toBe(sha(data));
    }
  });

  it('matches Go for every input length across width changes and table-full clears at close', async () => {
    const data = randomBytes(8_000, 9);
    const ranges: Array<[number, number]> = [
      [0, 700],
      [3_600, 4_300],
      [7_500, 8_000],
    ];
    let clearBeforeEof = 0;
    for (const [from, to] of ranges) {
      const goSums = (await go.run(['encode-prefixes', 'lzw', String(from), String(to)], data)).toString().trim().split('\n');
      expect(goSums.length).toBe(to - from);
      for (let n = from; n < to; n++) {
        const ours = await encode(data.subarray(0, n));
        expect(sha(ours), `prefix of ${n} bytes`).toBe(goSums[n - from]);
        const codes = readCodes(ours);
        if (codes.length >= 3 && codes.at(-2) === 256 && n > 0) clearBeforeEof++;
      }
    }
    // The sweep really covered Go's Close-time clear (table filled by the very last code).
    expect(clearBeforeEof).toBeGreaterThan(0);
  });

  it('decodes like Go when the table fills without a clear (frozen table)', async () => {
    const lits = [...randomBytes(4_200, 10)];
    const stream = packCodes([256, ...lits, 300, 4000, 4095, 65, 4095, 257]);
    const goOut = (await go.run(['decode', 'lzw'], stream)).toString().trim();
    const ours = await decode(stream, 17);
    expect(`${sha(ours)} ${ours.length}`).toBe(goOut);
  });

  it('Go also rejects what we reject', async () => {
    await expect(go.run(['decode', 'lzw'], packCodes([256, 97, 300, 257]))).rejects.toThrow(/invalid code/);
    const enc = await encode(Buffer.from('truncated'));
    await expect(go.run(['decode', 'lzw'], enc.subarray(0, enc.length - 1))).rejects.toThrow(/unexpected EOF/);
  });
});

describe('LzwDecoder in a pipeline with a slow consumer (regression: a parked write was never released)', () => {
  const dir = pathToFileURL(join(UPSTREAM_V023, 'lzw', 'snapstore', 'v2') + '/');
  const files = readdirSync(dir).map((f) => new URL(f, dir));
  it.each(files.map((f) => [f.pathname.split('/').at(-1)!, f] as const))('%s decodes completely', async (_name, file) => {
    let total = 0;
    const slow = new Writable({
      highWaterMark: 1024,
      write(chunk: Buffer, _enc, cb) {
        total += chunk.length;
        setImmediate(cb);
      },
    });
    await pipeline(createReadStream(file), new LzwDecoder(), slow);
    expect(total).toBeGreaterThan(0);
  });
});
