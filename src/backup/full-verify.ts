import { CodedError, asError } from '../errors.js';
import { createHash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { OffThreadSha256 } from './sha256-worker.js';

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
 * Passes a payload (body ‖ sha256(body)) through unchanged while hashing it, and fails at the end if the
 * trailer is not the hash of what came before. Memory stays constant: only the last 32 bytes are held
 * back from the hash. Full snapshots also require the bbolt size rule (`512k + 32` bytes).
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

export class PayloadVerifier extends Transform {
  private readonly hash: RunningHash;
  /** The newest (up to) 32 bytes seen: the trailer candidate, kept out of the hash until more arrives. */
  private tail: Buffer = Buffer.alloc(0);
  private total = 0;
  private verified: FullSnapshotVerifyResult | undefined;

  constructor(
    private readonly what = 'full snapshot',
    private readonly kind: 'full' | 'delta' = 'full',
    opts: PayloadVerifierOptions = {},
  ) {
    super();
    this.hash = opts.offThread ? new OffThreadSha256() : inlineHash();
  }

  /** Defined once the stream ended and verified. */
  get result(): FullSnapshotVerifyResult | undefined {
    return this.verified;
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.total += chunk.length;
    this.push(chunk);
    const hashed = this.advance(chunk);
    if (hashed instanceof Promise) hashed.then(() => cb(), cb);
    else cb();
  }

  /**
   * Hashes everything but the newest 32 bytes. A chunk of at least 32 bytes releases the old tail and all
   * of itself but its own last 32 bytes, with no copy of the chunk; shorter chunks are joined (tiny).
   */
  private advance(chunk: Buffer): void | Promise<void> {
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

  override _destroy(err: Error | null, cb: (error: Error | null) => void): void {
    Promise.resolve(this.hash.close()).then(
      () => cb(err),
      () => cb(err),
    );
  }

  override _flush(cb: TransformCallback): void {
    this.finish().then(
      () => cb(),
      (err: unknown) => cb(asError(err)),
    );
  }

  private async finish(): Promise<void> {
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
    this.verified = { totalBytes: this.total, sha256: digest.toString('hex') };
  }
}

/**
 * The verifier for etcd's snapshot stream (bbolt size rule included); hashes on a worker thread unless
 * told otherwise.
 */
export class FullSnapshotVerifier extends PayloadVerifier {
  constructor(what = 'full snapshot', opts: PayloadVerifierOptions = { offThread: true }) {
    super(what, 'full', opts);
  }
}
