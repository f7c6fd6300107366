/**
 * Cuts the bytes a socket delivers into HTTP/2 frames for the lean client (lean-h2.ts). The socket reads into
 * one reusable buffer (net.connect's `onread`), so the common case, whole frames inside one read, costs no copy:
 * each frame is handed over where it lies. Only a frame split across reads is copied, into a carry buffer
 * that the next reads complete; it can be small, as the client allows frames of at most `maxFrameLength`.
 */
import { FRAME_HEADER_BYTES, frameLength } from './h2-frames.js';

/** What the reader hands frames to. Either callback returning false stops the reader for good (the connection failed). */
export interface FrameHandler {
  /**
   * A frame header, before its payload is read: whether the frame is welcome. It must refuse a frame longer
   * than the reader's `maxFrameLength` (the carry buffer holds no more).
   */
  accept(buf: Buffer, at: number, length: number): boolean;
  /** A whole frame, its header at `buf[at]` and `length` bytes of payload after it; valid during the call only. */
  frame(buf: Buffer, at: number, length: number): boolean;
}

export class FrameReader {
  /** Where the socket reads into; `read(n)` takes its first `n` bytes. */
  readonly buffer: Buffer;
  /** A frame split across reads, completed from the next read. */
  private readonly carry: Buffer;
  private carryLength = 0;
  /** Set when the handler refused a frame or stopped taking them: later reads are ignored. */
  private stopped = false;

  constructor(
    private readonly handler: FrameHandler,
    readBufferBytes: number,
    maxFrameLength: number,
  ) {
    this.buffer = Buffer.allocUnsafe(readBufferBytes);
    this.carry = Buffer.allocUnsafe(FRAME_HEADER_BYTES + maxFrameLength);
  }

  /** The socket read `n` bytes into `buffer`: hands over every frame they complete and keeps the rest. */
  read(n: number): void {
    if (this.stopped) return;
    const buf = this.buffer;
    let pos = 0;
    if (this.carryLength > 0) {
      pos = this.completeCarry(buf, n);
      if (pos < 0 || this.carryLength > 0) return;
    }
    while (n - pos >= FRAME_HEADER_BYTES) {
      const length = frameLength(buf, pos);
      if (!this.handler.accept(buf, pos, length)) return this.stop();
      if (n - pos < FRAME_HEADER_BYTES + length) break;
      if (!this.handler.frame(buf, pos, length)) return this.stop();
      pos += FRAME_HEADER_BYTES + length;
    }
    if (pos < n) {
      buf.copy(this.carry, 0, pos, n);
      this.carryLength = n - pos;
    }
  }

  /** Feeds the start of a read into the carried partial frame; returns the bytes used, -1 when reading stopped. */
  private completeCarry(buf: Buffer, n: number): number {
    const carry = this.carry;
    let used = 0;
    if (this.carryLength < FRAME_HEADER_BYTES) {
      used = Math.min(FRAME_HEADER_BYTES - this.carryLength, n);
      buf.copy(carry, this.carryLength, 0, used);
      this.carryLength += used;
      if (this.carryLength < FRAME_HEADER_BYTES) return used;
    }
    const length = frameLength(carry, 0);
    if (!this.handler.accept(carry, 0, length)) {
      this.stop();
      return -1;
    }
    const take = Math.min(FRAME_HEADER_BYTES + length - this.carryLength, n - used);
    buf.copy(carry, this.carryLength, used, used + take);
    this.carryLength += take;
    used += take;
    if (this.carryLength === FRAME_HEADER_BYTES + length) {
      this.carryLength = 0;
      if (!this.handler.frame(carry, 0, length)) {
        this.stop();
        return -1;
      }
    }
    return used;
  }

  private stop(): void {
    this.stopped = true;
  }
}
