/**
 * Compression policies as Node streams. Upstream picks the codec for reading from the name suffix only, so
 * everything here is keyed by suffix: `.gz` gzip, `.zlib` zlib, `.Z` Go's LSB/8-bit LZW, `.zst` zstd (ours, a
 * difference from upstream), '' uncompressed.
 *
 * Decoder failures (truncation, bad header, bad checksum, invalid codes) surface as SnapStoreError E_CORRUPT
 * naming the object and the codec; a stream that ends early always errors rather than ending quietly.
 */
import { PassThrough, Transform } from 'node:stream';
import type { TransformCallback } from 'node:stream';
import { createRequire } from 'node:module';
import * as zlib from 'node:zlib';
import { SnapStoreError } from './errors.js';
import { InternalError } from './internal-errors.js';
import { LzwDecoder, LzwEncoder } from './lzw.js';
import { PacedDecoder } from './paced-decoder.js';
import type { CompressionSuffix } from './snapshot.js';

export type CompressionPolicy = 'gzip' | 'lzw' | 'zlib' | 'zstd';

interface ZstdNapi {
  binding: typeof import('zstd-napi/binding.js');
}
let zstdNapi: ZstdNapi | undefined;

/**
 * zstd-napi (a native addon), for decoding only, loads on first use: restoring a gzip store, the default,
 * never loads it.
 */
function zstd(): ZstdNapi {
  if (zstdNapi === undefined) {
    const require = createRequire(import.meta.url);
    zstdNapi = {
      binding: require('zstd-napi/binding.js') as typeof import('zstd-napi/binding.js'),
    };
  }
  return zstdNapi;
}

export const COMPRESSION_POLICIES: readonly CompressionPolicy[] = ['gzip', 'lzw', 'zlib', 'zstd'];

/** Upstream's default `--compression-policy`. */
export const DEFAULT_COMPRESSION_POLICY: CompressionPolicy = 'gzip';

const SUFFIX_OF: Readonly<Record<CompressionPolicy, CompressionSuffix>> = {
  gzip: '.gz',
  lzw: '.Z',
  zlib: '.zlib',
  zstd: '.zst',
};

const CODEC_NAME: Readonly<Record<CompressionPolicy, string>> = {
  gzip: 'gzip',
  lzw: 'lzw',
  zlib: 'zlib',
  zstd: 'zstd',
};

/**
 * Options shared with the benchmark so "ours vs raw library" compares like with like.
 * Level 6 is both Go's and zlib's default level; 64 KiB chunks keep per-chunk stream overhead low.
 */
export const ZLIB_OPTIONS: Readonly<zlib.ZlibOptions> = { level: 6, chunkSize: 64 * 1024 };
/**
 * Decompression hands out 256 KiB chunks: a delta inflates to several times its size, and each chunk costs a
 * thread-pool round trip and a pass through every stream after it (the sha256 check, the file write). A
 * restore's fetch of a 6.9 MB delta (11 MB inflated), in one process: 100 -> 59 ms with 1 MiB reads and writes.
 */
export const INFLATE_OPTIONS: Readonly<zlib.ZlibOptions> = { chunkSize: 256 * 1024 };
/**
 * zstd level 1, not the library default 3: on etcd databases (kube objects, random ids, base64) level 3
 * compresses no better and costs about three times the CPU, and a full snapshot of a big database is
 * CPU-bound on the sidecar's one thread. The content checksum lets a decoder detect corrupt payloads.
 *
 * Compressed by Node's own `node:zlib` zstd, which runs each chunk on libuv's thread pool (so the JS thread
 * keeps reading etcd's snapshot stream meanwhile) and frees its native context as soon as the stream ends.
 * zstd-napi's stream, used before, kept its context (with a worker thread's ~20 MiB of job buffers) until
 * V8 happened to collect the small JS object that owns it, which in a quiet sidecar can be never: every full
 * snapshot with zstd left the sidecar ~20 MiB larger (142.6 MiB a minute after a 1 GiB full snapshot, idle
 * 79). The frames are the same (each library decodes the other's output, and so does the `zstd` CLI); no
 * zstd worker is asked for (`ZSTD_c_nbWorkers` breaks Node's stream, nodejs/node#59899), and none is needed:
 * on 512 MiB of a bench backend both took 3.1-4.1 CPU seconds.
 */
export const ZSTD_OPTIONS: Readonly<zlib.ZstdOptions> = {
  chunkSize: 64 * 1024,
  params: { [zlib.constants.ZSTD_c_compressionLevel]: 1, [zlib.constants.ZSTD_c_checksumFlag]: 1 },
};

export function isCompressionPolicy(value: string): value is CompressionPolicy {
  return (COMPRESSION_POLICIES as readonly string[]).includes(value);
}

/** The name suffix for a policy; '' when compression is disabled (undefined). */
export function suffixForPolicy(policy: CompressionPolicy | undefined): CompressionSuffix {
  return policy === undefined ? '' : SUFFIX_OF[policy];
}

/** The policy for a name suffix; undefined for '' (uncompressed). Unknown suffixes are E_UNSUPPORTED_COMPRESSION. */
export function policyForSuffix(suffix: string): CompressionPolicy | undefined {
  if (suffix === '') return undefined;
  for (const policy of COMPRESSION_POLICIES) {
    if (SUFFIX_OF[policy] === suffix) return policy;
  }
  throw new SnapStoreError(
    'E_UNSUPPORTED_COMPRESSION',
    `unsupported compression suffix ${JSON.stringify(suffix)} (known: .gz, .Z, .zlib, .zst)`,
  );
}

/** A compressing Transform for the policy; a pass-through when compression is disabled (undefined). */
export function createCompressStream(policy: CompressionPolicy | undefined): Transform {
  switch (policy) {
    case undefined:
      return new PassThrough();
    case 'gzip':
      return goGzipHeader(zlib.createGzip(ZLIB_OPTIONS));
    case 'zlib':
      return zlib.createDeflate(ZLIB_OPTIONS);
    case 'lzw':
      return new LzwEncoder();
    case 'zstd':
      return zlib.createZstdCompress(ZSTD_OPTIONS);
    default:
      throw new SnapStoreError('E_UNSUPPORTED_COMPRESSION', `unsupported compression policy ${JSON.stringify(policy)}`);
  }
}

/**
 * A decompressing Transform for a name's compression suffix ('' gives a pass-through). `objectName` only goes
 * into error messages. Throws E_UNSUPPORTED_COMPRESSION for unknown suffixes; stream errors are E_CORRUPT.
 */
export function createDecompressStream(suffix: string, objectName: string): Transform {
  const policy = decompressionPolicy(suffix, objectName);
  if (policy === undefined) return new PassThrough();
  const corrupt = (cause: unknown): SnapStoreError => corruptError(objectName, policy, cause);
  switch (policy) {
    case 'gzip':
      return relabelZlibErrors(zlib.createGunzip(INFLATE_OPTIONS), corrupt);
    case 'zlib':
      return relabelZlibErrors(zlib.createInflate(INFLATE_OPTIONS), corrupt);
    case 'lzw':
      return new LzwDecoder({ makeError: (message) => corrupt(new InternalError('E_CORRUPT_STREAM', message)) });
    case 'zstd':
      return new ZstdDecoder(corrupt);
  }
}

/**
 * Decompresses a small object held whole in memory, synchronously: for objects of a few KiB (the typical delta
 * snapshot), a stream's setup and its thread-pool round trips cost many times the inflating itself. Returns
 * undefined when there is no synchronous path (lzw, zstd) or the result would exceed `maxOutputBytes`: the
 * caller streams instead. Corrupt input fails as the stream would (E_CORRUPT, naming the object).
 */
export function decompressBuffer(suffix: string, objectName: string, data: Buffer, maxOutputBytes = 64 * 1024 * 1024): Buffer | undefined {
  const policy = decompressionPolicy(suffix, objectName);
  if (policy === undefined) return data;
  if (policy !== 'gzip' && policy !== 'zlib') return undefined;
  try {
    const options = { ...ZLIB_OPTIONS, maxOutputLength: maxOutputBytes };
    return policy === 'gzip' ? zlib.gunzipSync(data, options) : zlib.inflateSync(data, options);
  } catch (err) {
    if ((err as { code?: unknown }).code === 'ERR_BUFFER_TOO_LARGE') return undefined;
    throw corruptError(objectName, policy, err);
  }
}

/** The policy that reads `objectName` by its suffix (undefined: uncompressed); E_UNSUPPORTED_COMPRESSION for unknown ones. */
function decompressionPolicy(suffix: string, objectName: string): CompressionPolicy | undefined {
  try {
    return policyForSuffix(suffix);
  } catch (err) {
    throw new SnapStoreError('E_UNSUPPORTED_COMPRESSION', `cannot decompress ${objectName}: ${(err as Error).message}`, { cause: err });
  }
}

/** What a decoder's failure on `objectName` is reported as. */
function corruptError(objectName: string, policy: CompressionPolicy, cause: unknown): SnapStoreError {
  const detail = cause instanceof Error ? cause.message : String(cause);
  return new SnapStoreError('E_CORRUPT', `${objectName}: corrupt or truncated ${CODEC_NAME[policy]} stream: ${detail}`, { cause });
}

/**
 * zlib writes OS byte 03 (Unix) into the gzip header; Go writes 0xff ("unknown"). Patch byte 9 as it passes so
 * our header is `1f 8b 08 00 00 00 00 00 00 ff` like upstream's. XFL (byte 8) is already 0 at level 6 in both.
 */
function goGzipHeader(gzip: zlib.Gzip): zlib.Gzip {
  const push = gzip.push.bind(gzip);
  let offset = 0;
  gzip.push = (chunk: unknown, encoding?: BufferEncoding): boolean => {
    if (offset <= 9 && Buffer.isBuffer(chunk)) {
      // zlib's output slices are never reused after being pushed, so patching in place is safe.
      if (offset + chunk.length > 9) chunk[9 - offset] = 0xff;
      offset += chunk.length;
    }
    return push(chunk, encoding);
  };
  return gzip;
}

/**
 * Node's zlib streams report decoder failures through `destroy(err)` with a `Z_*` code. Turning exactly those
 * into E_CORRUPT there keeps the stream's own errored state and 'error' event consistent, while errors handed
 * in from outside (e.g. a pipeline tearing down after another stream failed) pass through unchanged.
 */
function relabelZlibErrors<T extends zlib.Gunzip | zlib.Inflate>(stream: T, relabel: (err: Error) => Error): T {
  const destroy = stream.destroy.bind(stream);
  stream.destroy = (error?: Error): T => {
    const code = (error as { code?: unknown } | undefined)?.code;
    const fromZlib = typeof code === 'string' && code.startsWith('Z_') && !(error instanceof SnapStoreError);
    destroy(fromZlib ? relabel(error as Error) : error);
    return stream;
  };
  return stream;
}

const ZSTD_MIN_ROOM = 16 * 1024;

/**
 * zstd decoder on zstd-napi's native context. zstd-napi's own DecompressStream accepts empty input and pushes
 * a whole chunk's output at once (zstd can expand 64 KiB into gigabytes); this one errors on empty or
 * unfinished frames and pauses between output blocks while the readable side is full.
 */
class ZstdDecoder extends PacedDecoder {
  private readonly dctx = new (zstd().binding.DCtx)();
  private readonly corrupt: (cause: unknown) => Error;
  private sawInput = false;
  /** True while a frame has started but not fully been decoded and flushed. */
  private inFrame = false;
  private out = Buffer.allocUnsafe(zstd().binding.dStreamOutSize());
  private outPos = 0;

  constructor(corrupt: (cause: unknown) => Error) {
    super();
    this.corrupt = corrupt;
  }

  override _transform(chunk: unknown, _encoding: BufferEncoding, callback: TransformCallback): void {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    if (buf.length === 0) {
      callback();
      return;
    }
    this.sawInput = true;
    this.decodeChunk(buf, callback);
  }

  override _flush(callback: TransformCallback): void {
    if (!this.sawInput) {
      callback(this.corrupt(new InternalError('E_CORRUPT_STREAM', 'empty input, no zstd frame')));
      return;
    }
    if (this.inFrame) {
      callback(this.corrupt(new InternalError('E_CORRUPT_STREAM', 'stream ended in the middle of a frame')));
      return;
    }
    callback();
  }

  protected override decodeError(err: unknown): Error {
    return this.corrupt(err);
  }

  /** Returns true when paused for backpressure with input or buffered output left. */
  protected decode(): boolean {
    let src = this.input ?? Buffer.alloc(0);
    for (;;) {
      if (this.out.length - this.outPos < ZSTD_MIN_ROOM) {
        this.out = Buffer.allocUnsafe(zstd().binding.dStreamOutSize());
        this.outPos = 0;
      }
      // Decode into the unused tail of the current block; pushed slices before it are never touched again.
      const dst = this.out.subarray(this.outPos);
      const [hint, produced, consumed] = this.dctx.decompressStream(dst, src);
      src = src.subarray(consumed);
      this.input = src;
      // hint 0 means a frame was completely decoded and flushed. A call that made no progress says nothing
      // about frames: right after a frame ends it returns the header size of a possible next frame.
      if (consumed > 0 || produced > 0) this.inFrame = hint !== 0;
      let more = true;
      if (produced > 0) {
        more = this.push(dst.subarray(0, produced));
        this.outPos += produced;
      }
      // A full output area means zstd may hold more output even with no input left.
      if (src.length === 0 && produced < dst.length) return false;
      if (!more) return true;
    }
  }
}
