/**
 * Stages the lean client's outgoing HTTP/2 frames (lean-h2.ts) and writes what one event-loop turn staged as
 * one socket write: a write per frame cost more CPU than the frames themselves when the online replay keeps
 * dozens of calls in flight. Frames are built in place in a staging buffer; the control frames the client
 * sends have their encoders here.
 */
import { FLAG_ACK, FRAME_HEADER_BYTES, GOAWAY, PING, PREFACE, RST_STREAM, SETTINGS, WINDOW_UPDATE, writeFrameHeader } from './h2-frames.js';

/** Where staged bytes go: a net.Socket, or what a test puts in its place. */
export interface ByteSink {
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
  write(bytes: Buffer): unknown;
}

/** Size of each staging buffer; a new one is taken when full, as written bytes stay with the socket. */
const OUT_CHUNK_BYTES = 256 * 1024;

export class FrameWriter {
  private staged: Buffer;
  private start = 0;
  private end = 0;
  private flushScheduled = false;

  constructor(
    private readonly sink: ByteSink,
    private readonly chunkBytes = OUT_CHUNK_BYTES,
  ) {
    this.staged = Buffer.allocUnsafe(chunkBytes);
  }

  /**
   * The staging buffer a payload offset from `reserve` or `frame` refers to. Read it after each of those
   * calls, never in the same expression (`out.writeUInt32BE(v, frame(...))` reads `out` first): either may
   * move to a new buffer, and bytes written to the old one are lost.
   */
  get out(): Buffer {
    return this.staged;
  }

  /** Room for `n` bytes in the staging buffer; returns their offset and schedules a flush. */
  reserve(n: number): number {
    if (this.end + n > this.staged.length) {
      // Bytes before `start` belong to earlier writes and may still be in use by the socket.
      const pending = this.end - this.start;
      const next = Buffer.allocUnsafe(Math.max(this.chunkBytes, 2 * (pending + n)));
      this.staged.copy(next, 0, this.start, this.end);
      this.staged = next;
      this.start = 0;
      this.end = pending;
    }
    const at = this.end;
    this.end += n;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(this.flush);
    }
    return at;
  }

  /** A frame header for a `length`-byte payload; returns the payload's offset in `out`. */
  frame(length: number, type: number, flags: number, streamId: number): number {
    const at = this.reserve(FRAME_HEADER_BYTES + length);
    return writeFrameHeader(this.staged, at, length, type, flags, streamId);
  }

  /** Writes what is staged now rather than at the end of the turn (before the socket is ended). */
  readonly flush = (): void => {
    this.flushScheduled = false;
    if (this.end === this.start || this.sink.destroyed || this.sink.writableEnded) return;
    this.sink.write(this.staged.subarray(this.start, this.end));
    this.start = this.end;
  };

  /** The client's connection preface (RFC 9113 §3.4), to be followed by its SETTINGS. */
  preface(): void {
    const at = this.reserve(PREFACE.length);
    PREFACE.copy(this.staged, at);
  }

  /** A SETTINGS frame of `[identifier, value]` pairs. */
  settings(entries: ReadonlyArray<readonly [number, number]>): void {
    let at = this.frame(6 * entries.length, SETTINGS, 0, 0);
    for (const [id, value] of entries) {
      this.staged.writeUInt16BE(id, at);
      this.staged.writeUInt32BE(value, at + 2);
      at += 6;
    }
  }

  settingsAck(): void {
    this.frame(0, SETTINGS, FLAG_ACK, 0);
  }

  /** The answer to a PING whose 8 bytes of payload start at `buf[p]`. */
  pingAck(buf: Buffer, p: number): void {
    const at = this.frame(8, PING, FLAG_ACK, 0);
    buf.copy(this.staged, at, p, p + 8);
  }

  windowUpdate(streamId: number, increment: number): void {
    const at = this.frame(4, WINDOW_UPDATE, 0, streamId);
    this.staged.writeUInt32BE(increment, at);
  }

  rstStream(streamId: number, code: number): void {
    const at = this.frame(4, RST_STREAM, 0, streamId);
    this.staged.writeUInt32BE(code, at);
  }

  goAway(lastStreamId: number, code: number): void {
    const at = this.frame(8, GOAWAY, 0, 0);
    this.staged.writeUInt32BE(lastStreamId, at);
    this.staged.writeUInt32BE(code, at + 4);
  }
}
