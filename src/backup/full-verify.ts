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
 * Passes a full snapshot stream (bbolt db ‖ sha256(db)) through unchanged while checking it, and fails
 * at the end if the size is not `512k + 32` or the trailer is not the hash of what came before.
 * Downstream saves commit only when the stream ends cleanly, so a bad snapshot is never published.
 * Memory stays constant: only the last 32 bytes are held back from the hash.
 */
export class FullSnapshotVerifier extends Transform {
  private readonly hash = createHash('sha256');
  private tail: Buffer = Buffer.alloc(0);
  private total = 0;
  private verified: FullSnapshotVerifyResult | undefined;

  constructor(private readonly what = 'full snapshot') {
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
    if (this.total % 512 !== SHA256_SIZE) {
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
          `${this.what}: expected SHA256 for full snapshot: ${this.tail.toString('hex')}, got ${digest.toString('hex')}`,
        ),
      );
      return;
    }
    this.verified = { totalBytes: this.total, sha256: digest.toString('hex') };
    cb();
  }
}
