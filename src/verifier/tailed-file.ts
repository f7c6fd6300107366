/**
 * A file written from a stream that a reader follows while it grows: `waitFor(end)` resolves once the
 * first `end` bytes are on disk (in the page cache, so the reader's reads are cheap), or once nothing more
 * will come (the stream ended or failed; the reader then sees a short read and reports the file's end).
 */
import type { FileHandle } from 'node:fs/promises';
import { Writable } from 'node:stream';

export class TailedFile extends Writable {
  private written = 0;
  private done = false;
  private waiters: Array<{ end: number; resolve: () => void }> = [];

  constructor(private readonly fh: FileHandle) {
    super({ highWaterMark: 1 << 20 });
  }

  get bytesWritten(): number {
    return this.written;
  }

  waitFor(end: number): Promise<void> {
    if (this.done || this.written >= end) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ end, resolve }));
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.writeAll(chunk).then(() => cb(), cb);
  }

  /** Everything buffered while the previous write ran goes out as one writev. */
  override _writev(chunks: Array<{ chunk: Buffer }>, cb: (err?: Error | null) => void): void {
    this.writeAllv(chunks.map((c) => c.chunk)).then(() => cb(), cb);
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.finish();
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.finish();
    cb(err);
  }

  private async writeAll(chunk: Buffer): Promise<void> {
    let off = 0;
    while (off < chunk.length) {
      const { bytesWritten } = await this.fh.write(chunk, off, chunk.length - off, this.written);
      off += bytesWritten;
      this.written += bytesWritten;
    }
    this.wake();
  }

  private async writeAllv(bufs: Buffer[]): Promise<void> {
    const total = bufs.reduce((n, b) => n + b.length, 0);
    let done = 0;
    while (done < total) {
      const { bytesWritten } = await this.fh.writev(done === 0 ? bufs : remainder(bufs, done), this.written);
      done += bytesWritten;
      this.written += bytesWritten;
    }
    this.wake();
  }

  private finish(): void {
    this.done = true;
    this.wake();
  }

  private wake(): void {
    if (this.waiters.length === 0) return;
    const still: typeof this.waiters = [];
    for (const w of this.waiters) {
      if (this.done || this.written >= w.end) w.resolve();
      else still.push(w);
    }
    this.waiters = still;
  }
}

/** The buffers after the first `skip` bytes (a short writev resumes there). */
function remainder(bufs: readonly Buffer[], skip: number): Buffer[] {
  const out: Buffer[] = [];
  for (const b of bufs) {
    if (skip >= b.length) {
      skip -= b.length;
      continue;
    }
    out.push(skip > 0 ? b.subarray(skip) : b);
    skip = 0;
  }
  return out;
}
