/**
 * Parts kept in memory, in the buffers of a {@link PartBufferPool} (part-buffers.ts): the storage of the
 * ABS, Swift and OSS uploads, whose requests take a buffer as their body. A part's buffer goes back to the
 * pool once its request has settled and is filled again by a later part.
 */
import type { PartBufferPool } from './part-buffers.js';
import type { PartFilling, PartStorage, SealedPart, WholeObject } from './upload-parts.js';

export class MemoryParts implements PartStorage<Buffer> {
  readonly fillsAhead = false;

  /** `pool`: buffers of exactly the part size; this storage releases it when the upload ends. */
  constructor(private readonly pool: PartBufferPool) {}

  open(): PartFilling<Buffer> {
    return new BufferFilling(this.pool);
  }

  close(): void {
    this.pool.release();
  }
}

class BufferFilling implements PartFilling<Buffer> {
  private readonly buffer: Buffer;
  private filled = 0;

  constructor(private readonly pool: PartBufferPool) {
    this.buffer = pool.take();
  }

  get size(): number {
    return this.filled;
  }

  append(bytes: Buffer): void {
    this.filled += bytes.copy(this.buffer, this.filled);
  }

  seal(): Promise<SealedPart<Buffer>> {
    const { pool, buffer } = this;
    // The short last part is a view of a whole buffer, and that buffer is what goes back.
    return Promise.resolve({
      body: buffer.subarray(0, this.filled),
      size: this.filled,
      release: () => Promise.resolve(pool.give(buffer)),
    });
  }

  whole(): WholeObject {
    const { pool, buffer } = this;
    return { bytes: buffer.subarray(0, this.filled), release: () => pool.give(buffer) };
  }

  discard(): Promise<void> {
    // Never sent, so no request can still read it.
    this.pool.give(this.buffer);
    return Promise.resolve();
  }
}
