/**
 * The body of one UploadPart request: its part file, read into a few buffers that are used again as soon as
 * the request has written them.
 *
 * Why: a file read stream allocates a fresh buffer for every chunk. A GiB sent that way is a GiB of short-lived
 * buffers outside the JavaScript heap, and V8 runs a scavenge for every 4 MiB of them at the sidecar's young
 * generation setting (bin/etcdbrctl): measured with `perf` on `server`, the spooled S3 upload spent ~1.5 s of
 * main-thread time per GiB on the stream's chunks and ~1.2 s of GC threads on those scavenges.
 *
 * How it knows a buffer is free: the AWS SDK's Node HTTP handler sends a stream body with `body.pipe(request)`.
 * This class answers `pipe` by writing to the request itself, with a callback per write; a Writable calls it
 * once the chunk has been handed on (for a socket: once the kernel or the TLS layer has it), and only then is
 * the buffer read into again. Any other consumer (a `for await`, `pipeline`, a future SDK) gets the ordinary
 * Readable, a fresh buffer per chunk, so a change in how the SDK sends bodies costs speed, never bytes.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { Readable, type Writable } from 'node:stream';
import { InternalError } from '../internal-errors.js';
import { freeNow } from './part-buffers.js';

/** Bytes per read of the part file. */
export const BODY_CHUNK_BYTES = 256 * 1024;
/** Buffers one request holds at most: one being read while the others are being written. */
export const BODY_CHUNKS = 4;

/**
 * The read buffers of one upload's bodies, reused part after part: allocated once, so they neither churn V8's
 * young generation nor, living as long as a part takes to send, get promoted and wait for a full GC (measured:
 * fresh buffers per body cost the GC threads ~0.25 s more per GiB than a read stream's chunks). A body gives a
 * buffer back only when its write has called back; one that never calls back (its request was torn down) is
 * left to the garbage collector. `release` frees the buffers at once when the upload ends.
 */
export class BodyBufferPool {
  private readonly free: Buffer[] = [];
  private released = false;
  /** Buffers allocated over the pool's life; tests check it. */
  made = 0;

  take(): Buffer {
    const buf = this.free.pop();
    if (buf) return buf;
    this.made++;
    return Buffer.allocUnsafeSlow(BODY_CHUNK_BYTES);
  }

  give(buf: Buffer): void {
    if (this.released) freeNow(buf);
    else this.free.push(buf);
  }

  /** Frees every buffer given back, and each one given back from now on. */
  release(): void {
    this.released = true;
    for (const buf of this.free.splice(0)) freeNow(buf);
  }
}

/** Counters for tests: buffers made by the pipe path and chunks the ordinary Readable path pushed. */
export interface PartFileBodyStats {
  buffersMade: number;
  readableChunks: number;
}

export class PartFileBody extends Readable {
  private file: Promise<FileHandle> | undefined;
  private position = 0;
  private piped = false;
  /** The file operation under way; closing the file waits for it. */
  private busy: Promise<unknown> = Promise.resolve();
  readonly stats: PartFileBodyStats = { buffersMade: 0, readableChunks: 0 };
  /**
   * Bodies sent by `pipe` and chunks sent by the ordinary Readable path, over the process's life: tests check
   * that the SDK still pipes, as a silent switch to the Readable path would only show as lost speed.
   */
  static readonly totals = { piped: 0, readableChunks: 0 };

  /** `buffers`: the upload's pool; without one the body has its own, freed when the body has been sent. */
  constructor(
    readonly path: string,
    readonly size: number,
    private readonly buffers?: BodyBufferPool,
  ) {
    super({ highWaterMark: BODY_CHUNK_BYTES });
  }

  /** Writes the whole file to `dest` and ends it, as `Readable.pipe` does, with reused buffers. */
  override pipe<T extends NodeJS.WritableStream>(dest: T): T {
    if (this.piped) throw new InternalError('E_INVARIANT', `part file body ${this.path} piped twice`);
    this.piped = true;
    PartFileBody.totals.piped++;
    void this.pump(dest as unknown as Writable);
    return dest;
  }

  override _read(): void {
    const want = Math.min(BODY_CHUNK_BYTES, this.size - this.position);
    if (want <= 0) {
      this.push(null);
      return;
    }
    this.readAt(Buffer.allocUnsafe(want), want).then(
      (chunk) => {
        this.stats.readableChunks++;
        PartFileBody.totals.readableChunks++;
        this.push(chunk);
      },
      (err: unknown) => this.destroy(err as Error),
    );
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    const file = this.file;
    if (!file) return callback(err);
    this.busy
      .catch(() => undefined)
      .then(() => file)
      .then((fh) => fh.close())
      .then(
        () => callback(err),
        () => callback(err),
      );
  }

  /**
   * Reads the next `want` bytes of the file into `buf`; a file shorter than the part it holds is an error, as
   * the request's Content-Length promised `size` bytes.
   */
  private async readAt(buf: Buffer, want: number): Promise<Buffer> {
    this.file ??= open(this.path, 'r');
    const op = this.file.then((fh) => fh.read(buf, 0, want, this.position));
    this.busy = op;
    const { bytesRead } = await op;
    if (bytesRead === 0) {
      throw new InternalError('E_SPOOL', `part file ${this.path} ends at byte ${this.position} of the ${this.size} written to it`);
    }
    this.position += bytesRead;
    return buf.subarray(0, bytesRead);
  }

  private async pump(dest: Writable): Promise<void> {
    const pool = this.buffers ?? new BodyBufferPool();
    /** Buffers of this body that are being read into or written. */
    let held = 0;
    let wake: (() => void) | undefined;
    let gone = false;
    const onClose = (): void => {
      gone = true;
      wake?.();
    };
    dest.once('close', onClose);
    try {
      while (this.position < this.size) {
        if (gone || this.destroyed) return;
        if (held >= BODY_CHUNKS) {
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
          continue;
        }
        const made = pool.made;
        const owned = pool.take();
        if (pool.made > made) this.stats.buffersMade++;
        held++;
        let chunk: Buffer;
        try {
          chunk = await this.readAt(owned, Math.min(owned.length, this.size - this.position));
        } catch (err) {
          held--;
          pool.give(owned);
          throw err;
        }
        if (gone || this.destroyed) {
          held--;
          pool.give(owned);
          return;
        }
        dest.write(chunk, () => {
          held--;
          pool.give(owned);
          wake?.();
        });
      }
      dest.end();
    } catch (err) {
      // The request cannot be completed with the bytes it announced; failing it makes the SDK reject at once.
      // The error goes to the request only: nobody listens on a piped body, and an 'error' there would be
      // unhandled.
      dest.destroy(err as Error);
      this.destroy();
    } finally {
      dest.removeListener('close', onClose);
      // A pool of its own is freed now; buffers still being written are freed as their writes call back.
      if (!this.buffers) pool.release();
    }
  }
}
