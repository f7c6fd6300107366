/**
 * Upload part buffers shared by the S3 multipart uploader and the ABS block stager: a fixed number per
 * upload, reused part after part, and kept between the uploads of one store. Both stores send one
 * buffer per request and must not touch it again until that request has settled.
 */
import { InternalError } from '../internal-errors.js';

/**
 * At most `capacity` buffers of `size` bytes, allocated on first need and then reused. Lazily, so a
 * small delta snapshot costs one buffer, not the whole pool (and allocUnsafeSlow leaves pages that are
 * never written out of RSS). The counter is what tests check.
 */
export class PartBufferPool {
  private readonly free: Buffer[] = [];
  private count = 0;

  constructor(
    readonly size: number,
    readonly capacity: number,
    private readonly idle?: IdleBuffers,
  ) {}

  /** Buffers this upload has held (fresh or from the idle set). */
  get allocated(): number {
    return this.count;
  }

  take(): Buffer {
    const reused = this.free.pop();
    if (reused) return reused;
    // The caller's slot accounting makes this unreachable; a bug there must not turn into unbounded memory.
    if (this.count >= this.capacity) throw new InternalError('E_INVARIANT', `part buffer pool of ${this.capacity} exhausted`);
    this.count++;
    return this.idle?.take(this.size) ?? Buffer.allocUnsafeSlow(this.size);
  }

  give(buf: Buffer): void {
    // Giving one buffer back twice would let two parts fill it at once.
    if (!this.free.includes(buf)) this.free.push(buf);
  }

  /** Hands the buffers given back so far to the idle set; call once no request can read them any more. */
  release(): void {
    for (const buf of this.free.splice(0)) this.idle?.keep(buf);
  }
}

/**
 * Part buffers kept between the uploads of one store, at most `capacity` of them. Without it every
 * upload allocated its own 5 MiB buffers, and the previous upload's were freed only by a major GC, which
 * a quiet sidecar rarely runs: repeated full snapshots to S3 peaked near 200 MiB RSS with two uploads'
 * worth of buffers alive. Reused, they stay one pool's worth. Concurrent uploads still allocate their own
 * beyond what is idle; only `capacity` are kept afterwards.
 */
export class IdleBuffers {
  private readonly buffers: Buffer[] = [];

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.buffers.length;
  }

  /** An idle buffer of exactly `bytes`, or undefined. */
  take(bytes: number): Buffer | undefined {
    const i = this.buffers.findIndex((b) => b.length === bytes);
    return i < 0 ? undefined : this.buffers.splice(i, 1)[0];
  }

  keep(buf: Buffer): void {
    if (this.buffers.length < this.capacity && !this.buffers.includes(buf)) this.buffers.push(buf);
  }
}
