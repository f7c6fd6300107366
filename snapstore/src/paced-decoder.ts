/**
 * The back-pressure loop shared by our streaming decoders (zstd in codec.ts, LZW in lzw.ts). A decoder can
 * expand a small input chunk into far more output than the readable side wants at once, so it decodes in
 * steps and pauses between them while the readable side is full: the chunk's write callback is held back
 * until the chunk is used up, and the next read request resumes decoding exactly where it stopped.
 */
import { Transform } from 'node:stream';
import type { TransformCallback } from 'node:stream';

export abstract class PacedDecoder extends Transform {
  /** The chunk being decoded (null when idle); subclasses consume it in `decode`. */
  protected input: Buffer | null = null;
  /** The write callback to call once the current chunk is used up. */
  private pending: TransformCallback | null = null;
  private running = false;
  private readWanted = false;

  /**
   * Decodes from `input`, pushing output. Returns true when `push` asked to wait with input or buffered
   * output left (the state must be saved so a later call continues there), false when the chunk is used up.
   */
  protected abstract decode(): boolean;

  /** The error the stream reports for one thrown by `decode`. */
  protected decodeError(err: unknown): Error {
    return err as Error;
  }

  /** Starts decoding a chunk; `callback` is called once it is used up or decoding failed. */
  protected decodeChunk(chunk: Buffer, callback: TransformCallback): void {
    this.input = chunk;
    this.pending = callback;
    this.run();
  }

  override _read(size: number): void {
    if (this.running) {
      // Asked for more while we were pushing (a synchronous consumer): remember it, or a pause taken
      // right after this push would wait for a read request that has already happened.
      this.readWanted = true;
      return;
    }
    if (this.pending !== null) {
      this.run();
      // The chunk is done and its write callback may have parked the next write until a read
      // request (Transform's kCallback). This request may have produced no push at all (output is
      // batched), and the stream asks again only after a push: release the parked write now.
      if (this.pending === null) super._read(size);
      return;
    }
    super._read(size);
  }

  /** Decodes the current chunk until it is used up, an error occurs, or the readable side asks us to wait. */
  private run(): void {
    this.running = true;
    let paused = false;
    let error: Error | undefined;
    try {
      do {
        this.readWanted = false;
        paused = this.decode();
      } while (paused && this.readWanted);
    } catch (err) {
      error = this.decodeError(err);
    }
    this.running = false;
    if (paused) return;
    const callback = this.pending;
    this.pending = null;
    this.input = null;
    callback?.(error);
    // A read request swallowed while running must still reach Transform's own _read, which releases
    // the next buffered write; otherwise both sides wait for each other.
    if (this.readWanted && !error) {
      this.readWanted = false;
      super._read(this.readableHighWaterMark);
    }
  }
}
