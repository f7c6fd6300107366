/**
 * The unary gRPC calls of one lean HTTP/2 connection (lean-h2.ts) on their streams: opening a stream per call
 * within the server's limit on concurrent streams (queueing the calls beyond it), framing each request as
 * HEADERS and DATA within the server's flow-control windows, gathering each response's DATA, and settling
 * the call when its stream ends, is reset, hits its deadline or is aborted. The connection decodes the frames
 * and tells this class what concerns a stream; what concerns the connection as a whole stays there.
 */
import { asError } from '../errors.js';
import type { FrameWriter } from './h2-frame-writer.js';
import {
  CANCEL,
  DATA,
  DEFAULT_WINDOW,
  errorName,
  FLAG_END_HEADERS,
  FLAG_END_STREAM,
  FLOW_CONTROL_ERROR,
  FRAME_HEADER_BYTES,
  HEADERS,
  MAX_STREAM_ID,
  MAX_WINDOW,
  MIN_FRAME_SIZE_SETTING,
  PROTOCOL_ERROR,
  writeFrameHeader,
  type PeerSettings,
} from './h2-frames.js';
import { grpcRequestHeaderBlock } from './hpack-request.js';
import { LeanCallError, LeanDeadlineError } from './lean-errors.js';

/** What may end one call early besides the server: the caller's signal (rejects with its reason) and a deadline. */
export interface LeanCallOptions {
  signal?: AbortSignal | undefined;
  /** Milliseconds from the call to its response; none: wait as long as the connection lives. */
  timeoutMs?: number | undefined;
}

interface Call {
  path: string;
  body: Buffer;
  resolve: (response: Buffer) => void;
  reject: (err: Error) => void;
  /** 0 until the stream is opened. */
  id: number;
  /** Bytes of `body` already framed as DATA. */
  sent: number;
  /** What the server still lets this stream send; negative when a SETTINGS change shrank it. */
  sendWindow: number;
  /** DATA payloads received so far (copied out of the read buffer). */
  chunks: Buffer[];
  receivedBytes: number;
  /** Bytes received on this stream since we last widened its window. */
  unacknowledged: number;
}

export class CallStreams {
  /** HEADERS frames per path, stream id left 0 and patched per call. */
  private readonly headerFrames = new Map<string, Buffer>();
  private readonly streams = new Map<number, Call>();
  /** Calls waiting for the server's concurrent-stream limit. */
  private waiting: Call[] = [];
  /** Open streams whose body is not fully sent for lack of window. */
  private blocked: Call[] = [];
  private nextStreamId = 1;

  private peerMaxConcurrentStreams = Infinity;
  private peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrameSize = MIN_FRAME_SIZE_SETTING;
  private connectionSendWindow = DEFAULT_WINDOW;
  /** Set once the connection is closed or failed (`rejectAll`): no stream is opened or reset any more. */
  private stopped = false;

  constructor(
    private readonly writer: FrameWriter,
    /** The server's host:port, for the header block and messages. */
    private readonly authority: string,
    /** The per-stream receive window we announced; a stream's is widened when half is used. */
    private readonly receiveWindow: number,
  ) {}

  /** A call on an open connection; see LeanH2.call. */
  call(path: string, body: Buffer, options?: LeanCallOptions): Promise<Buffer> {
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(asError(signal.reason));
    return new Promise((resolve, reject) => {
      const call: Call = { path, body, resolve, reject, id: 0, sent: 0, sendWindow: 0, chunks: [], receivedBytes: 0, unacknowledged: 0 };
      if (signal !== undefined || options?.timeoutMs !== undefined) this.bound(call, signal, options?.timeoutMs);
      if (this.streams.size < this.peerMaxConcurrentStreams) this.open(call);
      else this.waiting.push(call);
    });
  }

  /** Ends `call` on its deadline or the caller's abort, whichever comes first; both are let go when it settles. */
  private bound(call: Call, signal: AbortSignal | undefined, timeoutMs: number | undefined): void {
    const { resolve, reject } = call;
    const timer =
      timeoutMs === undefined
        ? undefined
        : setTimeout(
            () => this.cancel(call, new LeanDeadlineError(`${call.path}: ${this.authority} did not answer within ${timeoutMs} ms`)),
            timeoutMs,
          );
    const onAbort = (): void => this.cancel(call, asError(signal?.reason));
    signal?.addEventListener('abort', onAbort, { once: true });
    const release = (): void => {
      if (timer !== undefined) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    call.resolve = (response) => {
      release();
      resolve(response);
    };
    call.reject = (err) => {
      release();
      reject(err);
    };
  }

  /** Gives up on a call that is still pending: its stream (if open) is reset, the connection goes on. */
  private cancel(call: Call, err: Error): void {
    if (call.id !== 0) {
      if (this.streams.get(call.id) !== call) return; // already settled
      this.streams.delete(call.id);
      this.blocked = this.blocked.filter((c) => c !== call);
      if (!this.stopped) this.writer.rstStream(call.id, CANCEL);
      this.openWaiting();
    } else {
      const i = this.waiting.indexOf(call);
      if (i < 0) return;
      this.waiting.splice(i, 1);
    }
    call.reject(err);
  }

  private open(call: Call): void {
    if (this.nextStreamId > MAX_STREAM_ID) {
      call.reject(new LeanCallError(`cannot call ${call.path}: this connection has used all its stream ids`));
      return;
    }
    call.id = this.nextStreamId;
    this.nextStreamId += 2;
    call.sendWindow = this.peerInitialWindow;
    this.streams.set(call.id, call);
    let template = this.headerFrames.get(call.path);
    if (template === undefined) {
      const block = grpcRequestHeaderBlock(call.path, this.authority);
      if (block.length > MIN_FRAME_SIZE_SETTING) {
        this.streams.delete(call.id);
        call.reject(new LeanCallError(`cannot call ${call.path}: its header block (${block.length} bytes) does not fit one frame`));
        return;
      }
      template = Buffer.alloc(FRAME_HEADER_BYTES + block.length);
      writeFrameHeader(template, 0, block.length, HEADERS, FLAG_END_HEADERS, 0);
      block.copy(template, FRAME_HEADER_BYTES);
      this.headerFrames.set(call.path, template);
    }
    const at = this.writer.reserve(template.length);
    const out = this.writer.out;
    template.copy(out, at);
    out.writeUInt32BE(call.id, at + 5);
    if (!this.sendData(call)) this.blocked.push(call);
  }

  /** Frames as much of the call's body as the windows allow; true once all of it (with END_STREAM) is out. */
  private sendData(call: Call): boolean {
    const total = call.body.length;
    for (;;) {
      const remaining = total - call.sent;
      const n = Math.min(remaining, this.connectionSendWindow, call.sendWindow, this.peerMaxFrameSize);
      if (remaining > 0 && n <= 0) return false;
      const last = call.sent + n === total;
      const at = this.writer.frame(n, DATA, last ? FLAG_END_STREAM : 0, call.id);
      call.body.copy(this.writer.out, at, call.sent, call.sent + n);
      call.sent += n;
      call.sendWindow -= n;
      this.connectionSendWindow -= n;
      if (last) return true;
    }
  }

  /** Sends what the windows now allow for blocked streams (after WINDOW_UPDATE or SETTINGS). */
  private pump(): void {
    if (this.blocked.length === 0) return;
    const still: Call[] = [];
    for (const call of this.blocked) {
      if (this.streams.get(call.id) === call && !this.sendData(call)) still.push(call);
    }
    this.blocked = still;
  }

  private openWaiting(): void {
    while (this.waiting.length > 0 && this.streams.size < this.peerMaxConcurrentStreams && !this.stopped) {
      this.open(this.waiting.shift()!);
    }
  }

  // ---- what the server sent ----

  /** The server's settings (before we acknowledge them); `resume` then sends and opens what they allow. */
  applySettings(settings: PeerSettings): void {
    if (settings.maxConcurrentStreams !== undefined) this.peerMaxConcurrentStreams = settings.maxConcurrentStreams;
    if (settings.initialWindow !== undefined) {
      // Applies to open streams too, and may drive their windows negative (RFC 9113 §6.9.2).
      const delta = settings.initialWindow - this.peerInitialWindow;
      this.peerInitialWindow = settings.initialWindow;
      for (const call of this.streams.values()) call.sendWindow += delta;
    }
    if (settings.maxFrameSize !== undefined) this.peerMaxFrameSize = settings.maxFrameSize;
  }

  /** Sends what the windows allow and opens the streams the server's limit allows. */
  resume(): void {
    this.pump();
    this.openWaiting();
  }

  /**
   * `size` bytes of response data at `buf[start]`, from a DATA frame of `length` payload bytes (padding
   * included, which counts against the window too) on `streamId`.
   */
  data(streamId: number, buf: Buffer, start: number, size: number, length: number, endStream: boolean): void {
    const call = this.streams.get(streamId);
    if (call === undefined) return;
    if (size > 0) {
      const chunk = Buffer.allocUnsafe(size);
      buf.copy(chunk, 0, start, start + size);
      call.chunks.push(chunk);
      call.receivedBytes += size;
    }
    if (endStream) {
      this.ended(streamId);
      return;
    }
    call.unacknowledged += length;
    if (call.unacknowledged >= this.receiveWindow / 2) {
      this.writer.windowUpdate(streamId, call.unacknowledged);
      call.unacknowledged = 0;
    }
  }

  /** The server ended the stream: a complete gRPC message in its DATA is the answer, anything else an error. */
  ended(streamId: number): void {
    const call = this.streams.get(streamId);
    if (call === undefined) return;
    this.streams.delete(streamId);
    // The server may answer before taking the whole request (e.g. rejecting it); stop sending the rest.
    if (call.sent < call.body.length) this.writer.rstStream(streamId, CANCEL);
    const body = call.chunks.length === 1 ? call.chunks[0]! : Buffer.concat(call.chunks, call.receivedBytes);
    const where = `${call.path} on stream ${streamId}`;
    if (body.length === 0) {
      call.reject(new LeanCallError(`${where} ended with no response message (a gRPC error; status not decoded)`));
    } else if (body.length < 5 || body.readUInt32BE(1) + 5 !== body.length) {
      call.reject(new LeanCallError(`${where} ended with ${body.length} bytes of DATA, not exactly one gRPC message`));
    } else if (body[0] !== 0) {
      call.reject(new LeanCallError(`${where} answered with a compressed gRPC message, which this client does not decode`));
    } else {
      call.resolve(body);
    }
    this.openWaiting();
  }

  /** The server reset the stream with error `code`. */
  reset(streamId: number, code: number): void {
    const call = this.streams.get(streamId);
    if (call === undefined) return;
    this.streams.delete(streamId);
    call.reject(new LeanCallError(`${call.path} on stream ${streamId} was reset by the server: RST_STREAM code ${errorName(code)}`));
    this.openWaiting();
  }

  /** The server widened a stream's send window; an invalid increment resets that stream alone. */
  widenStream(streamId: number, increment: number): void {
    const call = this.streams.get(streamId);
    if (call === undefined) return;
    call.sendWindow += increment;
    if (increment === 0 || call.sendWindow > MAX_WINDOW) {
      this.streams.delete(streamId);
      this.writer.rstStream(streamId, increment === 0 ? PROTOCOL_ERROR : FLOW_CONTROL_ERROR);
      call.reject(
        new LeanCallError(`${call.path} on stream ${streamId}: the server sent an invalid WINDOW_UPDATE (increment ${increment})`),
      );
      this.openWaiting();
      return;
    }
    this.pump();
  }

  /** The server widened the connection's send window; false when that took it past 2^31-1 (a connection error). */
  widenConnection(increment: number): boolean {
    this.connectionSendWindow += increment;
    if (this.connectionSendWindow > MAX_WINDOW) return false;
    this.pump();
    return true;
  }

  /** The server's GOAWAY, described as `goAway`: streams after `lastStreamId` and the queued calls fail. */
  goAway(lastStreamId: number, goAway: string): void {
    // Streams up to lastStreamId may still complete; later ones were never processed.
    for (const [id, call] of this.streams) {
      if (id <= lastStreamId) continue;
      this.streams.delete(id);
      call.reject(new LeanCallError(`${call.path} on stream ${id} was not processed: the server sent ${goAway}`));
    }
    const waiting = this.waiting;
    this.waiting = [];
    for (const call of waiting) call.reject(new LeanCallError(`cannot call ${call.path}: the server sent ${goAway}`));
  }

  /** The connection is closed or failed: every pending call rejects with `reason`, and nothing more is sent. */
  rejectAll(reason: string): void {
    this.stopped = true;
    const streams = [...this.streams.values()];
    const waiting = this.waiting;
    this.streams.clear();
    this.waiting = [];
    this.blocked = [];
    for (const call of streams) call.reject(new LeanCallError(`${call.path} on stream ${call.id}: ${reason}`));
    for (const call of waiting) call.reject(new LeanCallError(`cannot call ${call.path}: ${reason}`));
  }
}
