/**
 * A minimal HTTP/2 client for unary gRPC calls over cleartext TCP (h2c with prior knowledge, as gRPC
 * does), beside the one transport (grpc.ts) for the case that needs it: the restore's online replay sends its
 * transactions through it to the replay etcd it started (lean-txns.ts, src/restorer/replay-txns.ts), and the
 * benches' load generator (e2e/bench/support/put-load.ts) and replay floor (test/support/restore-chain.ts) use
 * it too. Per sequential call node:http2 alone costs this process 2-2.5x the CPU of speaking the frames
 * (RFC 9113) directly over a net.Socket, and the online replay through the one transport ran at 0.35-0.6x the
 * rate of this client (docs/design-decisions.md, "One etcd transport, and the replay's lean client").
 *
 * What it does: one HEADERS frame pre-encoded per path (HPACK static-table indexes and literals without
 * indexing, so no dynamic table on our side) and the request body as DATA, within the server's flow
 * control windows; writes of one event-loop turn go out as one socket write; frames are parsed from a
 * reusable read buffer.
 *
 * What it does not: decode response headers. A call succeeds when its stream ends after DATA that is
 * exactly one uncompressed gRPC message; a stream that ends without DATA is a gRPC error (trailers-only
 * response) whose grpc-status is not decoded, as that would need a full HPACK decoder (etcd's encoder uses
 * the dynamic table and Huffman strings). A unary gRPC error never carries a message, so this is exact in
 * telling success from failure; only the error's code and text are missing. Each call may carry the
 * caller's abort signal and a deadline (`LeanCallOptions`): either ends the call (RST_STREAM CANCEL) without
 * touching the connection's other streams.
 *
 * This module is the connection: the socket, the SETTINGS exchange, the frames that concern the connection as
 * a whole, and failing or closing it. Its parts: the frame format (h2-frames.ts), reading (h2-frame-reader.ts)
 * and writing frames (h2-frame-writer.ts), the request's header block (hpack-request.ts), and the calls on
 * their streams (lean-h2-calls.ts).
 */
import net from 'node:net';
import { FrameReader } from './h2-frame-reader.js';
import {
  CONTINUATION,
  DATA,
  dataLength,
  decodeGoAway,
  decodeRstStream,
  decodeSettings,
  decodeWindowUpdate,
  DEFAULT_WINDOW,
  FLAG_ACK,
  FLAG_END_HEADERS,
  FLAG_END_STREAM,
  FLAG_PADDED,
  FRAME_HEADER_BYTES,
  FRAME_SIZE_ERROR,
  frameFlags,
  frameStreamId,
  frameType,
  GOAWAY,
  HEADERS,
  headersFit,
  isFrameProblem,
  MAX_WINDOW,
  MIN_FRAME_SIZE_SETTING,
  NO_ERROR,
  PING,
  pingProblem,
  PROTOCOL_ERROR,
  PUSH_PROMISE,
  RST_STREAM,
  SETTINGS,
  SETTINGS_ENABLE_PUSH,
  SETTINGS_INITIAL_WINDOW_SIZE,
  WINDOW_UPDATE,
  FLOW_CONTROL_ERROR,
  type FrameProblem,
} from './h2-frames.js';
import { FrameWriter } from './h2-frame-writer.js';
import { CallStreams, type LeanCallOptions } from './lean-h2-calls.js';
import { LeanCallError } from './lean-errors.js';

export { LeanCallError, LeanDeadlineError } from './lean-errors.js';
export type { LeanCallOptions } from './lean-h2-calls.js';

/** How long close() waits for the server to close its side before cutting the connection. */
const CLOSE_GRACE_MS = 1000;
/** The largest frame we accept: the protocol default, as we never announce SETTINGS_MAX_FRAME_SIZE. */
const MAX_RECEIVE_FRAME = MIN_FRAME_SIZE_SETTING;
const READ_BUFFER_BYTES = 64 * 1024;
const SETTINGS_TIMEOUT_MS = 10_000;

export interface LeanH2Options {
  /**
   * How much the server may send before we acknowledge it, per stream and for the connection (bytes,
   * 65,535 to 2^31-1; default 16 MiB). We widen both windows when half is used.
   */
  receiveWindow?: number;
  /** Called once when an established connection fails (every pending and later call rejects). */
  onError?: (err: Error) => void;
}

/** One HTTP/2 connection carrying unary gRPC calls; see the module comment for what it decodes. */
export class LeanH2 {
  /** Connects to `endpoint` (http://host:port) and resolves once the server's SETTINGS have arrived. */
  static connect(endpoint: string, options: LeanH2Options = {}): Promise<LeanH2> {
    let url: URL;
    try {
      url = new URL(endpoint);
    } catch {
      return Promise.reject(new LeanCallError(`h2 client: endpoint ${JSON.stringify(endpoint)} is not a URL`));
    }
    if (url.protocol !== 'http:') {
      return Promise.reject(new LeanCallError(`h2 client: endpoint must be plain http:// (h2c), got ${endpoint}`));
    }
    const receiveWindow = options.receiveWindow ?? 16 * 1024 * 1024;
    if (!Number.isInteger(receiveWindow) || receiveWindow < DEFAULT_WINDOW || receiveWindow > MAX_WINDOW) {
      return Promise.reject(
        new LeanCallError(`h2 client: receiveWindow must be an integer from ${DEFAULT_WINDOW} to ${MAX_WINDOW}, got ${receiveWindow}`),
      );
    }
    const client = new LeanH2(url, receiveWindow, options.onError);
    return client.ready.then(() => client);
  }

  private readonly authority: string;
  private readonly receiveWindow: number;
  private readonly onError: ((err: Error) => void) | undefined;
  private readonly socket: net.Socket;
  private readonly reader: FrameReader;
  private readonly writer: FrameWriter;
  private readonly calls: CallStreams;
  private readonly closed: Promise<void>;
  private readonly ready: Promise<void>;
  private settleReady: ((err?: Error) => void) | undefined;

  private connectionUnacknowledged = 0;
  private sawServerSettings = false;
  /** Set once the connection is unusable: the reason every call rejects with. */
  private failure: string | undefined;
  /** The server's GOAWAY, once received: no new streams. */
  private goAway: string | undefined;
  /** The stream whose header block continues in CONTINUATION frames (0: none), and whether it then ends. */
  private continuationStream = 0;
  private continuationEndsStream = false;

  private constructor(url: URL, receiveWindow: number, onError: ((err: Error) => void) | undefined) {
    this.authority = url.host;
    this.receiveWindow = receiveWindow;
    this.onError = onError;
    this.ready = new Promise<void>((resolve, reject) => {
      // A server that accepts the connection but says nothing must not leave connect() pending forever.
      const timer = setTimeout(
        () => this.fail(`${this.authority} sent no HTTP/2 SETTINGS within ${SETTINGS_TIMEOUT_MS} ms`),
        SETTINGS_TIMEOUT_MS,
      );
      this.settleReady = (err) => {
        clearTimeout(timer);
        if (err === undefined) resolve();
        else reject(err);
      };
    });
    this.reader = new FrameReader(
      { accept: (buf, at, length) => this.acceptFrame(buf, at, length), frame: (buf, at, length) => this.onFrame(buf, at, length) },
      READ_BUFFER_BYTES,
      MAX_RECEIVE_FRAME,
    );
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    this.socket = net.connect({
      host,
      port: Number(url.port || 80),
      onread: {
        buffer: this.reader.buffer,
        callback: (n: number) => {
          if (this.failure === undefined) this.reader.read(n);
          return true; // keep reading: flow control, not read pauses, bounds what the server sends
        },
      },
    });
    this.socket.setNoDelay(true);
    this.writer = new FrameWriter(this.socket);
    this.calls = new CallStreams(this.writer, this.authority, receiveWindow);
    this.closed = new Promise((resolve) => this.socket.once('close', () => resolve()));
    this.socket.on('error', (err) => this.fail(`HTTP/2 connection to ${this.authority} failed: ${err.message}`));
    this.socket.on('close', () => {
      const after = this.goAway === undefined ? '' : ` after ${this.goAway}`;
      this.fail(`HTTP/2 connection to ${this.authority} was closed by the server${after}`);
    });

    // The preface, our SETTINGS, and a connection window as large as the per-stream one we announce.
    this.writer.preface();
    this.writer.settings([
      [SETTINGS_ENABLE_PUSH, 0],
      [SETTINGS_INITIAL_WINDOW_SIZE, receiveWindow],
    ]);
    if (receiveWindow > DEFAULT_WINDOW) this.writer.windowUpdate(0, receiveWindow - DEFAULT_WINDOW);
  }

  /**
   * One unary call: `body` is the request as gRPC puts it on the wire (a 5-byte prefix and the message).
   * Resolves with the response body in the same form, checked to be exactly one uncompressed message;
   * rejects when the stream ends without one (a gRPC error), is reset, or the connection fails.
   */
  call(path: string, body: Buffer, options?: LeanCallOptions): Promise<Buffer> {
    if (this.failure !== undefined) return Promise.reject(new LeanCallError(`cannot call ${path}: ${this.failure}`));
    if (this.goAway !== undefined) return Promise.reject(new LeanCallError(`cannot call ${path}: the server sent ${this.goAway}`));
    return this.calls.call(path, body, options);
  }

  /**
   * Rejects pending calls, sends GOAWAY and ends the connection; resolves once the socket is closed. A server
   * that never closes its side (stalled, or stopped by SIGSTOP) is cut off after `graceMs`: closing must not
   * wait on the peer it is giving up on.
   */
  async close(graceMs = CLOSE_GRACE_MS): Promise<void> {
    if (this.failure === undefined) {
      this.failure = 'the client was closed';
      this.calls.rejectAll(this.failure);
      this.writer.goAway(0, NO_ERROR); // we accept no pushed streams, so the last one we processed is 0
      this.writer.flush();
      this.socket.end();
    }
    if (!this.socket.destroyed) {
      const cut = setTimeout(() => this.socket.destroy(), graceMs);
      cut.unref();
      await this.closed;
      clearTimeout(cut);
      return;
    }
    await this.closed;
  }

  // ---- reading ----

  /** Rejects a frame we cannot take before reading its payload; false when the connection failed. */
  private acceptFrame(buf: Buffer, at: number, length: number): boolean {
    if (!this.sawServerSettings && frameType(buf, at) !== SETTINGS) {
      const first = buf.toString('latin1', at, at + FRAME_HEADER_BYTES).replace(/[^\x20-\x7e]/g, '.');
      this.fail(
        `${this.authority} did not answer with HTTP/2 SETTINGS (is it an h2c/gRPC server?); it sent ${JSON.stringify(first)}`,
        PROTOCOL_ERROR,
      );
      return false;
    }
    if (length > MAX_RECEIVE_FRAME) {
      this.fail(`${this.authority} sent a frame of ${length} bytes, over the ${MAX_RECEIVE_FRAME} we allow`, FRAME_SIZE_ERROR);
      return false;
    }
    return true;
  }

  /** Acts on one frame; false once the connection failed. */
  private onFrame(buf: Buffer, at: number, length: number): boolean {
    this.dispatch(buf, at, length);
    return this.failure === undefined;
  }

  private dispatch(buf: Buffer, at: number, length: number): void {
    const type = frameType(buf, at);
    const flags = frameFlags(buf, at);
    const streamId = frameStreamId(buf, at);
    const p = at + FRAME_HEADER_BYTES;
    if (this.continuationStream !== 0 && (type !== CONTINUATION || streamId !== this.continuationStream)) {
      this.fail(
        `${this.authority} interrupted the header block of stream ${this.continuationStream} with a frame of type ${type}`,
        PROTOCOL_ERROR,
      );
      return;
    }
    switch (type) {
      case DATA:
        this.onData(buf, p, length, flags, streamId);
        return;
      case HEADERS:
        this.onHeaders(buf, p, length, flags, streamId);
        return;
      case CONTINUATION:
        if (streamId === 0 || streamId !== this.continuationStream) {
          this.fail(`${this.authority} sent CONTINUATION for stream ${streamId} without a header block in progress`, PROTOCOL_ERROR);
          return;
        }
        if ((flags & FLAG_END_HEADERS) !== 0) {
          this.continuationStream = 0;
          if (this.continuationEndsStream) this.calls.ended(streamId);
        }
        return;
      case RST_STREAM: {
        const code = decodeRstStream(buf, p, length, streamId);
        if (isFrameProblem(code)) this.failOn(code);
        else this.calls.reset(streamId, code);
        return;
      }
      case SETTINGS:
        this.onSettings(buf, p, length, flags, streamId);
        return;
      case PING: {
        const problem = pingProblem(length, streamId);
        if (problem !== undefined) this.failOn(problem);
        else if ((flags & FLAG_ACK) === 0) this.writer.pingAck(buf, p);
        return;
      }
      case GOAWAY: {
        const goAway = decodeGoAway(buf, p, length);
        if (isFrameProblem(goAway)) {
          this.failOn(goAway);
          return;
        }
        this.goAway = goAway.description;
        this.calls.goAway(goAway.lastStreamId, goAway.description);
        return;
      }
      case WINDOW_UPDATE:
        this.onWindowUpdate(buf, p, length, streamId);
        return;
      case PUSH_PROMISE:
        this.fail(`${this.authority} sent PUSH_PROMISE although we disabled push`, PROTOCOL_ERROR);
        return;
      default:
        // PRIORITY and unknown frame types carry nothing we act on (RFC 9113 §4.1: ignore unknown types).
        return;
    }
  }

  private onData(buf: Buffer, p: number, length: number, flags: number, streamId: number): void {
    if (streamId === 0) {
      this.fail(`${this.authority} sent DATA on stream 0`, PROTOCOL_ERROR);
      return;
    }
    const size = dataLength(buf, p, length, flags);
    if (size < 0) {
      this.fail(`${this.authority} sent DATA on stream ${streamId} whose padding exceeds the frame`, PROTOCOL_ERROR);
      return;
    }
    // Flow control counts the whole payload, padding included, and DATA of streams we already closed.
    this.connectionUnacknowledged += length;
    if (this.connectionUnacknowledged >= this.receiveWindow / 2) {
      this.writer.windowUpdate(0, this.connectionUnacknowledged);
      this.connectionUnacknowledged = 0;
    }
    const start = (flags & FLAG_PADDED) !== 0 ? p + 1 : p;
    this.calls.data(streamId, buf, start, size, length, (flags & FLAG_END_STREAM) !== 0);
  }

  /** Response headers and trailers are skipped unread (see the module comment); only END_STREAM matters. */
  private onHeaders(buf: Buffer, p: number, length: number, flags: number, streamId: number): void {
    if (streamId === 0) {
      this.fail(`${this.authority} sent HEADERS on stream 0`, PROTOCOL_ERROR);
      return;
    }
    if (!headersFit(buf, p, length, flags)) {
      this.fail(`${this.authority} sent HEADERS on stream ${streamId} whose padding and priority exceed the frame`, PROTOCOL_ERROR);
      return;
    }
    const endsStream = (flags & FLAG_END_STREAM) !== 0;
    if ((flags & FLAG_END_HEADERS) === 0) {
      this.continuationStream = streamId;
      this.continuationEndsStream = endsStream;
      return;
    }
    if (endsStream) this.calls.ended(streamId);
  }

  private onSettings(buf: Buffer, p: number, length: number, flags: number, streamId: number): void {
    const settings = decodeSettings(buf, p, length, flags, streamId);
    if (settings === 'ack') return;
    if (isFrameProblem(settings)) {
      this.failOn(settings);
      return;
    }
    this.calls.applySettings(settings);
    this.writer.settingsAck();
    if (!this.sawServerSettings) {
      this.sawServerSettings = true;
      this.settleReady?.();
      this.settleReady = undefined;
    }
    this.calls.resume();
  }

  private onWindowUpdate(buf: Buffer, p: number, length: number, streamId: number): void {
    const increment = decodeWindowUpdate(buf, p, length);
    if (isFrameProblem(increment)) {
      this.failOn(increment);
      return;
    }
    if (streamId !== 0) {
      this.calls.widenStream(streamId, increment);
      return;
    }
    if (increment === 0) {
      this.fail(`${this.authority} sent a connection WINDOW_UPDATE of 0`, PROTOCOL_ERROR);
      return;
    }
    if (!this.calls.widenConnection(increment)) {
      this.fail(`${this.authority} widened the connection window past 2^31-1`, FLOW_CONTROL_ERROR);
    }
  }

  // ---- failure ----

  /** Fails the connection for a malformed frame of the server's. */
  private failOn(problem: FrameProblem): void {
    this.fail(`${this.authority} ${problem.problem}`, problem.code);
  }

  /** Makes the connection unusable: every call rejects with `reason`; a protocol error is told with GOAWAY. */
  private fail(reason: string, goAwayCode?: number): void {
    if (this.failure !== undefined) return;
    this.failure = reason;
    this.calls.rejectAll(reason);
    if (goAwayCode !== undefined && !this.socket.destroyed) {
      this.writer.goAway(0, goAwayCode);
      this.writer.flush();
      this.socket.end();
      // A server that never closes its side must not keep us open.
      setTimeout(() => this.socket.destroy(), CLOSE_GRACE_MS).unref();
    } else {
      this.socket.destroy();
    }
    const err = new LeanCallError(reason);
    if (this.settleReady !== undefined) {
      this.settleReady(err);
      this.settleReady = undefined;
    } else {
      this.onError?.(err);
    }
  }
}
