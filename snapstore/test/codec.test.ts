/**
 * Compression policies as streams: suffix mapping, round trips, header bytes, corrupt/truncated input as
 * E_CORRUPT, backpressure, and cross-decoding with Go's compress/{gzip,zlib,lzw} as upstream uses them.
 */
import { createHash } from 'node:crypto';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as zlib from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { CompressStream, Decompressor } from 'zstd-napi';
import {
  createCompressStream,
  createDecompressStream,
  decompressBuffer,
  isCompressionPolicy,
  policyForSuffix,
  suffixForPolicy,
} from '../src/codec.js';
import type { CompressionPolicy } from '../src/codec.js';
import { SnapStoreError, isSnapStoreError } from '../src/errors.js';
import { goProgramOnFirstRun } from './support/go.js';
import { randomBytes, through } from './support/streams.js';

const POLICIES: CompressionPolicy[] = ['gzip', 'lzw', 'zlib', 'zstd'];
const SUFFIX: Record<CompressionPolicy, string> = { gzip: '.gz', lzw: '.Z', zlib: '.zlib', zstd: '.zst' };

/** Repetitive JSON like etcd's kube objects. */
function kubeText(n: number, seed: number): Buffer {
  const rnd = randomBytes(4096, seed);
  const parts: string[] = [];
  let len = 0;
  for (let i = 0; len < n; i++) {
    const s =
      `{"kind":"Pod","metadata":{"name":"pod-${rnd[i % 4096]!.toString(16)}${i % 97}",` +
      `"namespace":"ns-${i % 13}","resourceVersion":"${1000 + i}"},"spec":{"nodeName":"node-${rnd[(i * 3) % 4096]}"}},`;
    parts.push(s);
    len += s.length;
  }
  return Buffer.from(parts.join('')).subarray(0, n);
}

const compress = (policy: CompressionPolicy | undefined, data: Buffer, chunkSize?: number): Promise<Buffer> =>
  through(createCompressStream(policy), data, chunkSize);
const decompress = (suffix: string, name: string, data: Buffer, chunkSize?: number): Promise<Buffer> =>
  through(createDecompressStream(suffix, name), data, chunkSize);
const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

async function errorOf(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

describe('policies and suffixes', () => {
  it('maps policies to upstream suffixes (and .zst for our zstd)', () => {
    expect(suffixForPolicy('gzip')).toBe('.gz');
    expect(suffixForPolicy('lzw')).toBe('.Z');
    expect(suffixForPolicy('zlib')).toBe('.zlib');
    expect(suffixForPolicy('zstd')).toBe('.zst');
    expect(suffixForPolicy(undefined)).toBe('');
  });

  it('maps suffixes back; "" is uncompressed', () => {
    expect(policyForSuffix('.gz')).toBe('gzip');
    expect(policyForSuffix('.Z')).toBe('lzw');
    expect(policyForSuffix('.zlib')).toBe('zlib');
    expect(policyForSuffix('.zst')).toBe('zstd');
    expect(policyForSuffix('')).toBeUndefined();
  });

  it('rejects unknown suffixes with E_UNSUPPORTED_COMPRESSION naming the suffix', () => {
    for (const suffix of ['.bz2', '.z', '.GZ', '.final', 'gz']) {
      let err: unknown;
      try {
        policyForSuffix(suffix);
      } catch (e) {
        err = e;
      }
      expect(isSnapStoreError(err, 'E_UNSUPPORTED_COMPRESSION'), suffix).toBe(true);
      expect((err as Error).message).toContain(JSON.stringify(suffix));
    }
  });

  it('createDecompressStream rejects unknown suffixes naming suffix and object', () => {
    let err: unknown;
    try {
      createDecompressStream('.xz', 'Full-00000000-00000010-1700000000.xz');
    } catch (e) {
      err = e;
    }
    expect(isSnapStoreError(err, 'E_UNSUPPORTED_COMPRESSION')).toBe(true);
    expect((err as Error).message).toContain('".xz"');
    expect((err as Error).message).toContain('Full-00000000-00000010-1700000000.xz');
  });

  it('knows the policy names', () => {
    expect(POLICIES.every(isCompressionPolicy)).toBe(true);
    expect(isCompressionPolicy('bzip2')).toBe(false);
    expect(isCompressionPolicy('GZIP')).toBe(false);
  });
});

describe('round trips', () => {
  const small: Array<[string, Buffer]> = [
    ['empty', Buffer.alloc(0)],
    ['one byte', Buffer.from([0x00])],
    ['random 1 MiB', randomBytes(1 << 20, 1)],
    ['zeros 2 MiB', Buffer.alloc(2 << 20)],
    ['kube text 1 MiB', kubeText(1 << 20, 2)],
  ];

  for (const policy of [...POLICIES, undefined]) {
    const suffix = suffixForPolicy(policy);
    it(`${policy ?? 'none'}: empty, 1 byte, random and repetitive inputs`, async () => {
      for (const [name, data] of small) {
        const packed = await compress(policy, data);
        if (policy !== undefined) expect(packed.length, name).toBeGreaterThan(0);
        const back = await decompress(suffix, `obj${suffix}`, packed);
        expect(back.length, name).toBe(data.length);
        expect(back.equals(data), name).toBe(true);
      }
    });

    it(`${policy ?? 'none'}: multi-megabyte input fed in odd chunk sizes both ways`, async () => {
      const data = kubeText(6 << 20, 3);
      for (const [inSize, outSize] of [
        [13, 65537],
        [4093, 7],
        [(1 << 20) + 3, 4093],
      ] as const) {
        // 13-byte writes over 6 MiB are slow through streams; 1 MiB of them is enough to prove the point. The
        // 7-byte writes into the decoder likewise get 2 MiB (still multi-megabyte); the last pair takes all 6 MiB.
        const input = inSize === 13 ? data.subarray(0, 1 << 20) : outSize === 7 ? data.subarray(0, 2 << 20) : data;
        const packed = await compress(policy, input, inSize);
        const back = await decompress(suffix, `obj${suffix}`, packed, outSize === 7 ? 7 : outSize);
        expect(sha(back), `${inSize}/${outSize}`).toBe(sha(input));
      }
    });

    it(`${policy ?? 'none'}: single-byte writes`, async () => {
      const data = kubeText(20_000, 4);
      const packed = await compress(policy, data, 1);
      expect((await decompress(suffix, `obj${suffix}`, packed, 1)).equals(data)).toBe(true);
    });
  }
});

describe('headers', () => {
  it('gzip writes the header Go writes: 1f 8b 08 00 00000000 00 ff', async () => {
    for (const [data, chunk] of [
      [Buffer.alloc(0), 1],
      [Buffer.from('x'), 1],
      [kubeText(20_000, 5), 1],
      [randomBytes(300_000, 6), 65536],
    ] as const) {
      const out = await compress('gzip', data, chunk);
      expect(out.subarray(0, 10).toString('hex')).toBe('1f8b08000000000000ff');
    }
  });

  it('zlib writes 78 9c', async () => {
    expect((await compress('zlib', kubeText(10_000, 7))).subarray(0, 2).toString('hex')).toBe('789c');
    expect((await compress('zlib', Buffer.alloc(0))).subarray(0, 2).toString('hex')).toBe('789c');
  });

  it('zstd writes a zstd frame with a content checksum', async () => {
    const out = await compress('zstd', kubeText(10_000, 8));
    expect(out.subarray(0, 4).toString('hex')).toBe('28b52ffd');
    // Frame header descriptor: bit 2 = content checksum flag.
    expect(out[4]! & 0x04).toBe(0x04);
  });

  it('zstd frames are interchangeable with the zstd-napi addon, which wrote the .zst objects of earlier versions', async () => {
    const data = Buffer.concat([kubeText(100_000, 11), randomBytes(300_000, 12)]);
    // Several MiB, so the frame has many blocks (and several of the addon's worker jobs).
    const big = Buffer.concat(Array.from({ length: 4 }, () => data));
    const ours = await compress('zstd', big);
    expect(sha(new Decompressor().decompress(ours))).toBe(sha(big));
    // What earlier versions stored: the addon's stream with one worker thread.
    const earlier = Buffer.concat(
      await Readable.from([big])
        .pipe(new CompressStream({ compressionLevel: 1, checksumFlag: true, nbWorkers: 1 }))
        .toArray(),
    );
    expect(sha(await decompress('.zst', 'Full-00000001-00000002-1700000000.zst', earlier))).toBe(sha(big));
    // And a frame of Node's one-shot API.
    const oneShot = zlib.zstdCompressSync(big, { params: { [zlib.constants.ZSTD_c_checksumFlag]: 1 } });
    expect(sha(await decompress('.zst', 'Full-00000001-00000002-1700000000.zst', oneShot))).toBe(sha(big));
  });
});

describe('corrupt and truncated input', () => {
  const data = Buffer.concat([kubeText(150_000, 9), randomBytes(50_000, 10)]);

  for (const policy of POLICIES) {
    const suffix = SUFFIX[policy];
    const name = `Incr-00000101-00000200-1700000000${suffix}`;

    it(`${policy}: truncation anywhere is E_CORRUPT naming the object and codec`, async () => {
      const packed = await compress(policy, data);
      const cuts = [0, 1, 2, 5, 10, 17, packed.length >> 2, packed.length >> 1, packed.length - 9, packed.length - 5];
      cuts.push(packed.length - 4, packed.length - 1);
      for (const cut of cuts) {
        const err = await errorOf(decompress(suffix, name, packed.subarray(0, cut), 4093));
        expect(isSnapStoreError(err, 'E_CORRUPT'), `cut at ${cut}: ${String(err)}`).toBe(true);
        expect((err as Error).message).toContain(name);
        expect((err as Error).message).toContain(policy);
      }
    });

    it(`${policy}: garbage input is E_CORRUPT`, async () => {
      const garbage = Buffer.from('this is not a compressed stream at all; '.repeat(20));
      // lzw has no header, so garbage decodes until an undefined code or the missing EOF code.
      const err = await errorOf(decompress(suffix, name, garbage));
      expect(isSnapStoreError(err, 'E_CORRUPT'), String(err)).toBe(true);
      expect((err as Error).message).toContain(name);
    });

    it(`${policy}: errors handed in from elsewhere in a pipeline are not relabelled`, async () => {
      const packed = await compress(policy, data);
      const boom = Object.assign(new Error('network reset'), { code: 'ECONNRESET' });
      const source = new Readable({
        read() {
          this.push(packed.subarray(0, 1000));
          this.destroy(boom);
        },
      });
      const err = await errorOf(pipeline(source, createDecompressStream(suffix, name), new Writable({ write: (_c, _e, cb) => cb() })));
      expect(err).toBe(boom);
    });

    it(`${policy}: the stream itself emits the E_CORRUPT error (no pipeline)`, async () => {
      const packed = await compress(policy, data);
      const stream = createDecompressStream(suffix, name);
      const errored = new Promise<unknown>((resolve) => stream.on('error', resolve));
      stream.resume();
      stream.end(packed.subarray(0, packed.length >> 1));
      const err = await errored;
      expect(err).toBeInstanceOf(SnapStoreError);
      expect((err as SnapStoreError).code).toBe('E_CORRUPT');
      expect(stream.errored).toBe(err);
    });
  }

  it('gzip: a bad CRC is E_CORRUPT', async () => {
    const packed = Buffer.from(await compress('gzip', data));
    packed[packed.length - 6]! ^= 0x01;
    expect(isSnapStoreError(await errorOf(decompress('.gz', 'a.gz', packed)), 'E_CORRUPT')).toBe(true);
  });

  it('zlib: a bad Adler-32 is E_CORRUPT', async () => {
    const packed = Buffer.from(await compress('zlib', data));
    packed[packed.length - 1]! ^= 0x01;
    expect(isSnapStoreError(await errorOf(decompress('.zlib', 'a.zlib', packed)), 'E_CORRUPT')).toBe(true);
  });

  it('zstd: a bad content checksum is E_CORRUPT', async () => {
    const packed = Buffer.from(await compress('zstd', data));
    packed[packed.length - 1]! ^= 0x01;
    const err = await errorOf(decompress('.zst', 'a.zst', packed));
    expect(isSnapStoreError(err, 'E_CORRUPT'), String(err)).toBe(true);
  });

  it('zstd: trailing partial frame after a complete one is E_CORRUPT', async () => {
    const one = await compress('zstd', Buffer.from('first frame'));
    const two = await compress('zstd', Buffer.from('second frame'));
    const err = await errorOf(decompress('.zst', 'a.zst', Buffer.concat([one, two.subarray(0, 6)])));
    expect(isSnapStoreError(err, 'E_CORRUPT'), String(err)).toBe(true);
    // Concatenated complete frames are one valid stream.
    expect((await decompress('.zst', 'a.zst', Buffer.concat([one, two]))).toString()).toBe('first framesecond frame');
  });

  it('lzw: an undefined code is E_CORRUPT', async () => {
    // clear(256), 'a', then 300 while the next free code is 258 (9-bit LSB packing done by hand).
    const codes = [256, 97, 300, 257];
    let bits = 0n;
    codes.forEach((c, i) => (bits |= BigInt(c) << BigInt(9 * i)));
    const bytes = Buffer.alloc(5);
    for (let i = 0; i < 5; i++) bytes[i] = Number((bits >> BigInt(8 * i)) & 0xffn);
    const err = await errorOf(decompress('.Z', 'x.Z', bytes));
    expect(isSnapStoreError(err, 'E_CORRUPT')).toBe(true);
    expect((err as Error).message).toMatch(/x\.Z.*lzw.*invalid code 300/);
  });
});

describe('backpressure', () => {
  // 16 MiB of zeros compress to almost nothing; fed as one chunk to a slow consumer, a decoder must not queue
  // the whole expansion (16 times the 1 MiB allowed below, so a decoder that does is caught).
  const size = 16 << 20;
  for (const policy of POLICIES) {
    it(`${policy}: decompression output waits for a slow consumer`, async () => {
      const packed = await compress(policy, Buffer.alloc(size), 1 << 20);
      expect(packed.length).toBeLessThan(200_000);
      const dec = createDecompressStream(SUFFIX[policy], `zeros${SUFFIX[policy]}`);
      let maxQueued = 0;
      let total = 0;
      await pipeline(
        Readable.from([packed]),
        dec,
        new Writable({
          highWaterMark: 64 * 1024,
          write(chunk: Buffer, _enc, cb) {
            maxQueued = Math.max(maxQueued, dec.readableLength);
            total += chunk.length;
            setImmediate(cb);
          },
        }),
      );
      expect(total).toBe(size);
      expect(maxQueued).toBeLessThanOrEqual(1 << 20);
    });
  }
});

describe('against Go compress/{gzip,zlib,lzw} as upstream uses them', () => {
  const go = goProgramOnFirstRun('codechelper');
  afterAll(() => go.cleanup());

  const inputs = (): Array<[string, Buffer]> => [
    ['empty', Buffer.alloc(0)],
    ['one byte', Buffer.from([0x7f])],
    ['random 1 MiB', randomBytes(1 << 20, 11)],
    ['kube text 3 MiB', kubeText(3 << 20, 12)],
  ];
  const goCodecs = ['gzip', 'zlib', 'lzw'] as const;

  it('Go decodes what we write', async () => {
    for (const codec of goCodecs) {
      for (const [name, data] of inputs()) {
        const ours = await compress(codec, data, 4093);
        const res = (await go.run(['decode', codec], ours)).toString().trim();
        expect(res, `${codec} ${name}`).toBe(`${sha(data)} ${data.length}`);
      }
    }
  });

  it('we decode what Go writes', async () => {
    for (const codec of goCodecs) {
      for (const [name, data] of inputs()) {
        const theirs = await go.run(['encode', codec], data);
        const back = await decompress(SUFFIX[codec], `go${SUFFIX[codec]}`, theirs, 4093);
        expect(sha(back), `${codec} ${name}`).toBe(sha(data));
      }
    }
  });

  it('lzw bytes are identical to Go; gzip and zlib headers are identical to Go', async () => {
    for (const [name, data] of inputs()) {
      const lzwOurs = await compress('lzw', data);
      expect(lzwOurs.equals(await go.run(['encode', 'lzw'], data)), name).toBe(true);
      // The deflate bodies come from different implementations (zlib vs Go's compress/flate) and differ;
      // both sides decode each other's (above), and the framing bytes match exactly.
      const gzOurs = await compress('gzip', data);
      const gzGo = await go.run(['encode', 'gzip'], data);
      expect(gzOurs.subarray(0, 10).toString('hex'), name).toBe(gzGo.subarray(0, 10).toString('hex'));
      expect(gzOurs.subarray(-8).equals(gzGo.subarray(-8)), `${name}: CRC-32 and ISIZE trailer`).toBe(true);
      const zOurs = await compress('zlib', data);
      const zGo = await go.run(['encode', 'zlib'], data);
      expect(zOurs.subarray(0, 2).toString('hex'), name).toBe(zGo.subarray(0, 2).toString('hex'));
      expect(zOurs.subarray(-4).equals(zGo.subarray(-4)), `${name}: Adler-32 trailer`).toBe(true);
    }
  });
});

describe('decompressBuffer (small objects held whole)', () => {
  const data = Buffer.from('{"etcdEvent":{"kv":{"key":"YQ=="}}}'.repeat(200));

  it('inflates gzip and zlib like the streams, passes uncompressed bytes through, and leaves lzw and zstd to the streams', () => {
    expect(decompressBuffer('.gz', 'Incr-1', zlib.gzipSync(data))?.equals(data)).toBe(true);
    expect(decompressBuffer('.zlib', 'Incr-1', zlib.deflateSync(data))?.equals(data)).toBe(true);
    expect(decompressBuffer('', 'Incr-1', data)).toBe(data);
    expect(decompressBuffer('.Z', 'Incr-1', data)).toBeUndefined();
    expect(decompressBuffer('.zst', 'Incr-1', data)).toBeUndefined();
  });

  it('leaves a result above the limit to the streams instead of holding it', () => {
    expect(decompressBuffer('.gz', 'Incr-1', zlib.gzipSync(data), 100)).toBeUndefined();
  });

  it('names the object when it is corrupt or truncated, with the streams’ error code', () => {
    const gz = zlib.gzipSync(data);
    let caught: unknown;
    try {
      decompressBuffer('.gz', 'Incr-7', gz.subarray(0, gz.length - 10));
    } catch (err) {
      caught = err;
    }
    expect(isSnapStoreError(caught)).toBe(true);
    expect((caught as SnapStoreError).code).toBe('E_CORRUPT');
    expect((caught as Error).message).toMatch(/^Incr-7: corrupt or truncated gzip stream: unexpected end of file/);
    expect(() => decompressBuffer('.bz2', 'Incr-7', gz)).toThrow(/cannot decompress Incr-7/);
  });
});
