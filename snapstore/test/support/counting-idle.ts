import { IdleBuffers } from '../../src/providers/part-buffers.js';

/** Counts the buffers an upload got from the idle set instead of allocating them. */
export class CountingIdleBuffers extends IdleBuffers {
  hits = 0;

  override take(bytes: number): Buffer | undefined {
    const buf = super.take(bytes);
    if (buf) this.hits++;
    return buf;
  }
}
