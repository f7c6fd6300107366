import { createHash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';

/** etcd appends sha256(db) to the snapshot stream; a bbolt db is a whole number of 512-byte units. */
export const SHA256_SIZE = 32;

export class FullSnapshotIntegrityError extends Error {
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
export class PayloadVerifier extends Transform {
  private readonly hash = createHash('sha256');
  private tail: Buffer = Buffer.alloc(0);
  private total = 0;
  private verified: FullSnapshotVerifyResult | undefined;

  constructor(
    private readonly what = 'full snapshot',
    private readonly kind: 'full' | 'delta' = 'full',
  ) {
    super();
  }

  /** Defined once the stream ended and verified. */
  get result(): FullSnapshotVerifyResult | undefined {
    return this.verified;
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.total += chunk.length;
    // Hash everything except the newest 32 bytes, which may be the trailer.
    const joined = this.tail.length > 0 ? Buffer.concat([this.tail, chunk]) : chunk;
    const hashable = joined.length - SHA256_SIZE;
    if (hashable > 0) {
      this.hash.update(joined.subarray(0, hashable));
      this.tail = Buffer.from(joined.subarray(hashable));
    } else {
      this.tail = Buffer.from(joined);
    }
    cb(null, chunk);
  }

  override _flush(cb: TransformCallback): void {
    if (this.kind === 'delta' && this.total <= SHA256_SIZE) {
      cb(new FullSnapshotIntegrityError(`${this.what}: delta snapshot is missing hash`));
      return;
    }
    if (this.kind === 'full' && this.total % 512 !== SHA256_SIZE) {
      cb(
        new FullSnapshotIntegrityError(
          `${this.what}: SHA256 hash seems to be missing from snapshot data (${this.total} bytes, expected 512·k + 32)`,
        ),
      );
      return;
    }
    const digest = this.hash.digest();
    if (!digest.equals(this.tail)) {
      cb(
        new FullSnapshotIntegrityError(
          `${this.what}: expected SHA256 for ${this.kind} snapshot: ${this.tail.toString('hex')}, got ${digest.toString('hex')}`,
        ),
      );
      return;
    }
    this.verified = { totalBytes: this.total, sha256: digest.toString('hex') };
    cb();
  }
}

/** The verifier for etcd's snapshot stream (bbolt size rule included). */
export class FullSnapshotVerifier extends PayloadVerifier {
  constructor(what = 'full snapshot') {
    super(what, 'full');
  }
}
