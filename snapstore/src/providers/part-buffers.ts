/**
 * Upload part buffers of the ABS, Swift and OSS uploads (their part storage, memory-parts.ts): a fixed number
 * per upload, reused part after part, shared by the uploads of one store that overlap, and freed when the
 * store has no upload running. Each sends one buffer per request and must not touch it again until that
 * request has settled. (S3 writes its parts to files instead: spooled-parts.ts.)
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
  private ended = false;

  constructor(
    readonly size: number,
    readonly capacity: number,
    private readonly idle?: IdleBuffers,
  ) {
    idle?.enter();
  }

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

  /**
   * Hands the buffers given back so far to the idle set, or frees them when there is none; call once, when no
   * request can read them any more.
   */
  release(): void {
    if (this.ended) return;
    this.ended = true;
    const free = this.free.splice(0);
    if (this.idle) {
      for (const buf of free) this.idle.keep(buf);
      this.idle.leave();
    } else {
      for (const buf of free) freeNow(buf);
    }
  }

  /**
   * Ends this pool without handing anything back (requests may still read its buffers, which the garbage
   * collector frees once they let go): the store's idle set no longer waits for it.
   */
  abandon(): void {
    if (this.ended) return;
    this.ended = true;
    this.free.length = 0;
    this.idle?.leave();
  }
}

/**
 * Gives a buffer's memory back at once instead of at the next major GC, which a quiet sidecar may not run for
 * hours: detaching the ArrayBuffer (transfer to length 0) drops its backing store, and allocUnsafeSlow's
 * buffers of part size are mmapped pages that go straight back to the system. Only for a buffer that owns
 * its whole ArrayBuffer (allocUnsafeSlow's), never a slice of Node's shared pool. Afterwards `buf` is empty.
 */
export function freeNow(buf: Buffer): void {
  const owned = buf.buffer;
  // ES2024's ArrayBuffer.prototype.transfer (Node 21+); the project's lib is ES2023.
  if (buf.byteOffset === 0 && owned.byteLength === buf.length && owned instanceof ArrayBuffer)
    (owned as ArrayBuffer & { transfer(length: number): ArrayBuffer }).transfer(0);
}

/**
 * Part buffers of one store between its overlapping uploads (a delta saved while a full snapshot uploads), at
 * most `capacity` of them; freed as soon as no upload of the store runs. Before, every upload's 5 MiB buffers
 * were freed only by a major GC, which a quiet sidecar rarely runs: repeated full snapshots to S3 peaked near
 * 200 MiB RSS with two uploads' worth alive. Keeping one pool's worth for good fixed the peak but left an idle
 * S3 sidecar ~25 MiB larger after its first full snapshot; freeing them when the last upload ends keeps both
 * down (a new upload maps fresh pages, which costs next to nothing beside a 5 MiB request).
 */
export class IdleBuffers {
  private readonly buffers: Buffer[] = [];
  /** Uploads (part pools) that have not released yet. */
  private users = 0;

  constructor(readonly capacity: number) {}

  /** A part pool of this store starts. */
  enter(): void {
    this.users++;
  }

  /** A part pool released its buffers; the last one out frees what is kept. */
  leave(): void {
    this.users = Math.max(0, this.users - 1);
    if (this.users === 0) for (const buf of this.buffers.splice(0)) freeNow(buf);
  }

  get size(): number {
    return this.buffers.length;
  }

  /** An idle buffer of exactly `bytes`, or undefined. */
  take(bytes: number): Buffer | undefined {
    const i = this.buffers.findIndex((b) => b.length === bytes);
    return i < 0 ? undefined : this.buffers.splice(i, 1)[0];
  }

  keep(buf: Buffer): void {
    if (this.buffers.includes(buf)) return;
    if (this.buffers.length < this.capacity) this.buffers.push(buf);
    else freeNow(buf);
  }
}
