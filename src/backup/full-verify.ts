import { CodedError, asError } from '../errors.js';
import { createHash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { OffThreadSha256 } from './sha256-worker.js';
import { cpuHashesSha256InHardware } from './sha256-hardware.js';

/** etcd appends sha256(db) to the snapshot stream; a bbolt db is a whole number of 512-byte units. */
export const SHA256_SIZE = 32;

export class FullSnapshotIntegrityError extends CodedError {
  readonly code = 'E_FULL_SNAPSHOT_INTEGRITY';
  override readonly name = 'FullSnapshotIntegrityError';
}

export interface FullSnapshotVerifyResult {
  /** Bytes seen, trailer included. */
  totalBytes: number;
  /** Hex sha256 of the database bytes. */
  sha256: string;
}

/**
 * How a payload (body ‖ sha256(body)) is checked: it fails at the end if the trailer is not the hash of what
 * came before. Full snapshots also require the bbolt size rule (`512k + 32` bytes).
 */
export interface PayloadVerifierOptions {
  /**
   * Hash on a worker thread (see sha256-worker.ts). Worth it for full snapshots (GiBs, where hashing is a
   * third of the CPU); deltas are small and hash inline.
   */
  offThread?: boolean;
}

/** What the verifier needs of a hash: the inline one answers at once, the worker one when it has caught up. */
interface RunningHash {
  update(data: Uint8Array): void | Promise<void>;
  digest(): Buffer | Promise<Buffer>;
  close(): void | Promise<void>;
}

function inlineHash(): RunningHash {
  const h = createHash('sha256');
  return { update: (d) => void h.update(d), digest: () => h.digest(), close: () => undefined };
}

/**
 * The check of a payload's sha256 trailer without a stream around it: bytes go in as they arrive, `finish`
 * says whether the last 32 were the hash of everything before (and, for a full snapshot, the bbolt size rule).
 * Memory stays constant: only the last 32 bytes are held back from the hash.
 */
export class TrailerHash {
  private readonly hash: RunningHash;
  /** The newest (up to) 32 bytes seen: the trailer candidate, kept out of the hash until more arrives. */
  private tail: Buffer = Buffer.alloc(0);
  private total = 0;

  constructor(
    private readonly what = 'full snapshot',
    private readonly kind: 'full' | 'delta' = 'full',
    opts: PayloadVerifierOptions = {},
  ) {
    this.hash = opts.offThread ? new OffThreadSha256() : inlineHash();
  }

  /**
   * Takes the next bytes; a promise only when hashing off-thread (wait for it before the next call). Hashes
   * everything but the newest 32 bytes: a chunk of at least 32 bytes releases the old tail and all of itself
   * but its own last 32 bytes, with no copy of the chunk; shorter chunks are joined (tiny).
   */
  update(chunk: Buffer): void | Promise<void> {
    this.total += chunk.length;
    if (chunk.length >= SHA256_SIZE) {
      const cut = chunk.length - SHA256_SIZE;
      const oldTail = this.tail;
      this.tail = Buffer.from(chunk.subarray(cut));
      const body = chunk.subarray(0, cut);
      if (oldTail.length === 0) return this.hash.update(body);
      const first = this.hash.update(oldTail);
      if (first instanceof Promise) return first.then(() => this.hash.update(body));
      return this.hash.update(body);
    }
    const joined = Buffer.concat([this.tail, chunk]);
    const hashable = joined.length - SHA256_SIZE;
    if (hashable <= 0) {
      this.tail = joined;
      return;
    }
    this.tail = Buffer.from(joined.subarray(hashable));
    return this.hash.update(joined.subarray(0, hashable));
  }

  /** After the last byte: the result, or FullSnapshotIntegrityError naming what is wrong. */
  async finish(): Promise<FullSnapshotVerifyResult> {
    if (this.kind === 'delta' && this.total <= SHA256_SIZE) {
      throw new FullSnapshotIntegrityError(`${this.what}: delta snapshot is missing hash`);
    }
    if (this.kind === 'full' && this.total % 512 !== SHA256_SIZE) {
      throw new FullSnapshotIntegrityError(
        `${this.what}: SHA256 hash seems to be missing from snapshot data (${this.total} bytes, expected 512·k + 32)`,
      );
    }
    const digest = await this.hash.digest();
    if (!digest.equals(this.tail)) {
      throw new FullSnapshotIntegrityError(
        `${this.what}: expected SHA256 for ${this.kind} snapshot: ${this.tail.toString('hex')}, got ${digest.toString('hex')}`,
      );
    }
    return { totalBytes: this.total, sha256: digest.toString('hex') };
  }

  /** Releases the hasher (the worker thread, when there is one); safe to call more than once. */
  close(): void | Promise<void> {
    return this.hash.close();
  }
}

/** Passes a payload (body ‖ sha256(body)) through unchanged while checking its trailer (TrailerHash). */
export class PayloadVerifier extends Transform {
  private readonly trailer: TrailerHash;
  private verified: FullSnapshotVerifyResult | undefined;

  constructor(what = 'full snapshot', kind: 'full' | 'delta' = 'full', opts: PayloadVerifierOptions = {}) {
    super();
    this.trailer = new TrailerHash(what, kind, opts);
  }

  /** Defined once the stream ended and verified. */
  get result(): FullSnapshotVerifyResult | undefined {
    return this.verified;
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.push(chunk);
    const hashed = this.trailer.update(chunk);
    if (hashed instanceof Promise) hashed.then(() => cb(), cb);
    else cb();
  }

  override _destroy(err: Error | null, cb: (error: Error | null) => void): void {
    Promise.resolve(this.trailer.close()).then(
      () => cb(err),
      () => cb(err),
    );
  }

  override _flush(cb: TransformCallback): void {
    this.trailer.finish().then(
      (result) => {
        this.verified = result;
        cb();
      },
      (err: unknown) => cb(asError(err)),
    );
  }
}

/**
 * The verifier for etcd's snapshot stream (bbolt size rule included); hashes on a worker thread unless the
 * CPU hashes SHA-256 in hardware (then inline is faster and smaller) or told otherwise.
 */
export class FullSnapshotVerifier extends PayloadVerifier {
  constructor(what = 'full snapshot', opts: PayloadVerifierOptions = { offThread: !cpuHashesSha256InHardware() }) {
    super(what, 'full', opts);
  }
}
