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
 */
import { asError } from '../errors.js';
import { LeanCallError, LeanDeadlineError } from './lean-errors.js';

export { LeanCallError, LeanDeadlineError } from './lean-errors.js';
import net from 'node:net';

/** What may end one call early besides the server: the caller's signal (rejects with its reason) and a deadline. */
export interface LeanCallOptions {
  signal?: AbortSignal | undefined;
  /** Milliseconds from the call to its response; none: wait as long as the connection lives. */
  timeoutMs?: number | undefined;
}

const FRAME_HEADER_BYTES = 9;
const DATA = 0x0;
const HEADERS = 0x1;
const RST_STREAM = 0x3;
const SETTINGS = 0x4;
const PUSH_PROMISE = 0x5;
const PING = 0x6;
const GOAWAY = 0x7;
const WINDOW_UPDATE = 0x8;
const CONTINUATION = 0x9;
/** How long close() waits for the server to close its side before cutting the connection. */
const CLOSE_GRACE_MS = 1000;

const FLAG_END_STREAM = 0x1;
const FLAG_ACK = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;

const SETTINGS_ENABLE_PUSH = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
const SETTINGS_MAX_FRAME_SIZE = 0x5;

const NO_ERROR = 0x0;
const PROTOCOL_ERROR = 0x1;
const FLOW_CONTROL_ERROR = 0x3;
const FRAME_SIZE_ERROR = 0x6;
const CANCEL = 0x8;
const ERROR_NAMES = [
  'NO_ERROR',
  'PROTOCOL_ERROR',
  'INTERNAL_ERROR',
  'FLOW_CONTROL_ERROR',
  'SETTINGS_TIMEOUT',
  'STREAM_CLOSED',
  'FRAME_SIZE_ERROR',
  'REFUSED_STREAM',
  'CANCEL',
  'COMPRESSION_ERROR',
  'CONNECT_ERROR',
  'ENHANCE_YOUR_CALM',
  'INADEQUATE_SECURITY',
  'HTTP_1_1_REQUIRED',
];

const DEFAULT_WINDOW = 65_535;
const MAX_WINDOW = 2 ** 31 - 1;
const MAX_STREAM_ID = 2 ** 31 - 1;
/** The largest frame we accept: the protocol default, as we never announce SETTINGS_MAX_FRAME_SIZE. */
const MAX_RECEIVE_FRAME = 16_384;
const MIN_FRAME_SIZE_SETTING = 16_384;
const MAX_FRAME_SIZE_SETTING = 16_777_215;
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
/** Size of each outgoing staging buffer; a new one is taken when full, as written bytes stay with the socket. */
const OUT_CHUNK_BYTES = 256 * 1024;
const READ_BUFFER_BYTES = 64 * 1024;
const SETTINGS_TIMEOUT_MS = 10_000;

function errorName(code: number): string {
  return `${code} (${ERROR_NAMES[code] ?? 'unknown'})`;
}

/** Appends an HPACK integer (RFC 7541 §5.1) with a `prefixBits` prefix under the pattern `flags`. */
function hpackInteger(out: number[], value: number, prefixBits: number, flags: number): void {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out.push(flags | value);
    return;
  }
  out.push(flags | max);
  let rest = value - max;
  while (rest >= 0x80) {
    out.push((rest & 0x7f) | 0x80);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
}

/** An HPACK string literal without Huffman coding. */
function hpackString(out: number[], text: string): void {
  const bytes = Buffer.from(text, 'latin1');
  hpackInteger(out, bytes.length, 7, 0x00);
  for (const b of bytes) out.push(b);
}

/**
 * The header block of a gRPC request to `path` at `authority`: static-table entries and literals "without
 * indexing", so the server's decoder needs no state from us and the block can be reused for every call.
 */
export function grpcRequestHeaderBlock(path: string, authority: string): Buffer {
  const out: number[] = [];
  out.push(0x80 | 3); // static index 3, ":method: POST"
  out.push(0x80 | 6); // static index 6, ":scheme: http"
  hpackInteger(out, 4, 4, 0x00); // literal without indexing, name = static index 4, ":path"
  hpackString(out, path);
  hpackInteger(out, 1, 4, 0x00); // ":authority"
  hpackString(out, authority);
  hpackInteger(out, 31, 4, 0x00); // "content-type"
  hpackString(out, 'application/grpc');
  out.push(0x00); // literal without indexing, new name: "te" is not in the static table
  hpackString(out, 'te');
  hpackString(out, 'trailers');
  return Buffer.from(out);
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
  private readonly closed: Promise<void>;
  private readonly ready: Promise<void>;
  private settleReady: ((err?: Error) => void) | undefined;

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
  private connectionUnacknowledged = 0;
  private sawServerSettings = false;
  /** Set once the connection is unusable: the reason every call rejects with. */
  private failure: string | undefined;
  /** The server's GOAWAY, once received: no new streams. */
  private goAway: string | undefined;

  private out = Buffer.allocUnsafe(OUT_CHUNK_BYTES);
  private outStart = 0;
  private outEnd = 0;
  private flushScheduled = false;

  private readonly readBuffer = Buffer.allocUnsafe(READ_BUFFER_BYTES);
  /** A frame split across reads, completed from the next read. */
  private readonly carry = Buffer.allocUnsafe(FRAME_HEADER_BYTES + MAX_RECEIVE_FRAME);
  private carryLength = 0;
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
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    this.socket = net.connect({
      host,
      port: Number(url.port || 80),
      onread: {
        buffer: this.readBuffer,
        callback: (n: number) => {
          this.onRead(n);
          return true; // keep reading: flow control, not read pauses, bounds what the server sends
        },
      },
    });
    this.socket.setNoDelay(true);
    this.closed = new Promise((resolve) => this.socket.once('close', () => resolve()));
    this.socket.on('error', (err) => this.fail(`HTTP/2 connection to ${this.authority} failed: ${err.message}`));
    this.socket.on('close', () => {
      const after = this.goAway === undefined ? '' : ` after ${this.goAway}`;
      this.fail(`HTTP/2 connection to ${this.authority} was closed by the server${after}`);
    });

    // The preface, our SETTINGS, and a connection window as large as the per-stream one we announce.
    const at = this.reserve(PREFACE.length);
    PREFACE.copy(this.out, at);
    const settings = this.frame(12, SETTINGS, 0, 0);
    this.out.writeUInt16BE(SETTINGS_ENABLE_PUSH, settings);
    this.out.writeUInt32BE(0, settings + 2);
    this.out.writeUInt16BE(SETTINGS_INITIAL_WINDOW_SIZE, settings + 6);
    this.out.writeUInt32BE(receiveWindow, settings + 8);
    if (receiveWindow > DEFAULT_WINDOW) this.windowUpdate(0, receiveWindow - DEFAULT_WINDOW);
  }

  /**
   * One unary call: `body` is the request as gRPC puts it on the wire (a 5-byte prefix and the message).
   * Resolves with the response body in the same form, checked to be exactly one uncompressed message;
   * rejects when the stream ends without one (a gRPC error), is reset, or the connection fails.
   */
  call(path: string, body: Buffer, options?: LeanCallOptions): Promise<Buffer> {
    if (this.failure !== undefined) return Promise.reject(new LeanCallError(`cannot call ${path}: ${this.failure}`));
    if (this.goAway !== undefined) return Promise.reject(new LeanCallError(`cannot call ${path}: the server sent ${this.goAway}`));
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
      if (this.failure === undefined) this.resetStream(call.id, CANCEL);
      this.openWaiting();
    } else {
      const i = this.waiting.indexOf(call);
      if (i < 0) return;
      this.waiting.splice(i, 1);
    }
    call.reject(err);
  }

  /**
   * Rejects pending calls, sends GOAWAY and ends the connection; resolves once the socket is closed. A server
   * that never closes its side (stalled, or stopped by SIGSTOP) is cut off after `graceMs`: closing must not
   * wait on the peer it is giving up on.
   */
  async close(graceMs = CLOSE_GRACE_MS): Promise<void> {
    if (this.failure === undefined) {
      this.failure = 'the client was closed';
      this.rejectAll(this.failure);
      const at = this.frame(8, GOAWAY, 0, 0);
      this.out.writeUInt32BE(0, at); // we accept no pushed streams, so the last one we processed is 0
      this.out.writeUInt32BE(NO_ERROR, at + 4);
      this.flush();
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
      template.writeUIntBE(block.length, 0, 3);
      template[3] = HEADERS;
      template[4] = FLAG_END_HEADERS;
      block.copy(template, FRAME_HEADER_BYTES);
      this.headerFrames.set(call.path, template);
    }
    const at = this.reserve(template.length);
    template.copy(this.out, at);
    this.out.writeUInt32BE(call.id, at + 5);
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
      const at = this.frame(n, DATA, last ? FLAG_END_STREAM : 0, call.id);
      call.body.copy(this.out, at, call.sent, call.sent + n);
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
    while (this.waiting.length > 0 && this.streams.size < this.peerMaxConcurrentStreams && this.failure === undefined) {
      this.open(this.waiting.shift()!);
    }
  }

  // ---- writing ----

  /** Room for `n` bytes in the staging buffer; returns their offset and schedules a flush. */
  private reserve(n: number): number {
    if (this.outEnd + n > this.out.length) {
      // Bytes before outStart belong to earlier writes and may still be in use by the socket.
      const pending = this.outEnd - this.outStart;
      const next = Buffer.allocUnsafe(Math.max(OUT_CHUNK_BYTES, 2 * (pending + n)));
      this.out.copy(next, 0, this.outStart, this.outEnd);
      this.out = next;
      this.outStart = 0;
      this.outEnd = pending;
    }
    const at = this.outEnd;
    this.outEnd += n;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(this.flush);
    }
    return at;
  }

  /** A frame header for a `length`-byte payload; returns the payload's offset in `this.out`. */
  private frame(length: number, type: number, flags: number, streamId: number): number {
    const at = this.reserve(FRAME_HEADER_BYTES + length);
    const out = this.out;
    out[at] = length >>> 16;
    out[at + 1] = (length >>> 8) & 0xff;
    out[at + 2] = length & 0xff;
    out[at + 3] = type;
    out[at + 4] = flags;
    out.writeUInt32BE(streamId, at + 5);
    return at + FRAME_HEADER_BYTES;
  }

  private windowUpdate(streamId: number, increment: number): void {
    this.out.writeUInt32BE(increment, this.frame(4, WINDOW_UPDATE, 0, streamId));
  }

  private resetStream(streamId: number, code: number): void {
    this.out.writeUInt32BE(code, this.frame(4, RST_STREAM, 0, streamId));
  }

  private readonly flush = (): void => {
    this.flushScheduled = false;
    if (this.outEnd === this.outStart || this.socket.destroyed || this.socket.writableEnded) return;
    this.socket.write(this.out.subarray(this.outStart, this.outEnd));
    this.outStart = this.outEnd;
  };

  // ---- reading ----

  private onRead(n: number): void {
    if (this.failure !== undefined) return;
    const buf = this.readBuffer;
    let pos = 0;
    if (this.carryLength > 0) {
      pos = this.completeCarry(buf, n);
      if (this.carryLength > 0 || this.failure !== undefined) return;
    }
    while (n - pos >= FRAME_HEADER_BYTES) {
      const length = (buf[pos]! << 16) | (buf[pos + 1]! << 8) | buf[pos + 2]!;
      if (!this.checkFrameHeader(buf, pos, length)) return;
      if (n - pos < FRAME_HEADER_BYTES + length) break;
      this.onFrame(buf, pos, length);
      if (this.failure !== undefined) return;
      pos += FRAME_HEADER_BYTES + length;
    }
    if (pos < n) {
      buf.copy(this.carry, 0, pos, n);
      this.carryLength = n - pos;
    }
  }

  /** Feeds the start of a read into the carried partial frame; returns the bytes used. */
  private completeCarry(buf: Buffer, n: number): number {
    const carry = this.carry;
    let used = 0;
    if (this.carryLength < FRAME_HEADER_BYTES) {
      used = Math.min(FRAME_HEADER_BYTES - this.carryLength, n);
      buf.copy(carry, this.carryLength, 0, used);
      this.carryLength += used;
      if (this.carryLength < FRAME_HEADER_BYTES) return used;
    }
    const length = (carry[0]! << 16) | (carry[1]! << 8) | carry[2]!;
    if (!this.checkFrameHeader(carry, 0, length)) return used;
    const take = Math.min(FRAME_HEADER_BYTES + length - this.carryLength, n - used);
    buf.copy(carry, this.carryLength, used, used + take);
    this.carryLength += take;
    used += take;
    if (this.carryLength === FRAME_HEADER_BYTES + length) {
      this.carryLength = 0;
      this.onFrame(carry, 0, length);
    }
    return used;
  }

  /** Rejects a frame we cannot take before reading its payload; false when the connection failed. */
  private checkFrameHeader(buf: Buffer, at: number, length: number): boolean {
    if (!this.sawServerSettings && buf[at + 3] !== SETTINGS) {
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

  private onFrame(buf: Buffer, at: number, length: number): void {
    const type = buf[at + 3]!;
    const flags = buf[at + 4]!;
    const streamId = buf.readUInt32BE(at + 5) & 0x7fffffff;
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
          if (this.continuationEndsStream) this.endOfStream(streamId);
        }
        return;
      case RST_STREAM:
        this.onRstStream(buf, p, length, streamId);
        return;
      case SETTINGS:
        this.onSettings(buf, p, length, flags, streamId);
        return;
      case PING:
        if (length !== 8 || streamId !== 0) {
          this.fail(
            `${this.authority} sent a malformed PING (${length} bytes, stream ${streamId})`,
            length !== 8 ? FRAME_SIZE_ERROR : PROTOCOL_ERROR,
          );
          return;
        }
        if ((flags & FLAG_ACK) === 0) buf.copy(this.out, this.frame(8, PING, FLAG_ACK, 0), p, p + 8);
        return;
      case GOAWAY:
        this.onGoAway(buf, p, length);
        return;
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
    let start = p;
    let size = length;
    if ((flags & FLAG_PADDED) !== 0) {
      const pad = length > 0 ? buf[p]! : 0;
      if (length === 0 || 1 + pad > length) {
        this.fail(`${this.authority} sent DATA on stream ${streamId} whose padding exceeds the frame`, PROTOCOL_ERROR);
        return;
      }
      start = p + 1;
      size = length - 1 - pad;
    }
    // Flow control counts the whole payload, padding included, and DATA of streams we already closed.
    this.connectionUnacknowledged += length;
    if (this.connectionUnacknowledged >= this.receiveWindow / 2) {
      this.windowUpdate(0, this.connectionUnacknowledged);
      this.connectionUnacknowledged = 0;
    }
    const call = this.streams.get(streamId);
    if (call === undefined) return;
    if (size > 0) {
      const chunk = Buffer.allocUnsafe(size);
      buf.copy(chunk, 0, start, start + size);
      call.chunks.push(chunk);
      call.receivedBytes += size;
    }
    if ((flags & FLAG_END_STREAM) !== 0) {
      this.endOfStream(streamId);
      return;
    }
    call.unacknowledged += length;
    if (call.unacknowledged >= this.receiveWindow / 2) {
      this.windowUpdate(streamId, call.unacknowledged);
      call.unacknowledged = 0;
    }
  }

  /** Response headers and trailers are skipped unread (see the module comment); only END_STREAM matters. */
  private onHeaders(buf: Buffer, p: number, length: number, flags: number, streamId: number): void {
    if (streamId === 0) {
      this.fail(`${this.authority} sent HEADERS on stream 0`, PROTOCOL_ERROR);
      return;
    }
    let overhead = 0;
    if ((flags & FLAG_PADDED) !== 0) overhead += 1 + (length > 0 ? buf[p]! : 0);
    if ((flags & FLAG_PRIORITY) !== 0) overhead += 5;
    if (overhead > length) {
      this.fail(`${this.authority} sent HEADERS on stream ${streamId} whose padding and priority exceed the frame`, PROTOCOL_ERROR);
      return;
    }
    const endsStream = (flags & FLAG_END_STREAM) !== 0;
    if ((flags & FLAG_END_HEADERS) === 0) {
      this.continuationStream = streamId;
      this.continuationEndsStream = endsStream;
      return;
    }
    if (endsStream) this.endOfStream(streamId);
  }

  private onRstStream(buf: Buffer, p: number, length: number, streamId: number): void {
    if (length !== 4 || streamId === 0) {
      this.fail(
        `${this.authority} sent a malformed RST_STREAM (${length} bytes, stream ${streamId})`,
        length !== 4 ? FRAME_SIZE_ERROR : PROTOCOL_ERROR,
      );
      return;
    }
    const call = this.streams.get(streamId);
    if (call === undefined) return;
    this.streams.delete(streamId);
    call.reject(
      new LeanCallError(`${call.path} on stream ${streamId} was reset by the server: RST_STREAM code ${errorName(buf.readUInt32BE(p))}`),
    );
    this.openWaiting();
  }

  private onSettings(buf: Buffer, p: number, length: number, flags: number, streamId: number): void {
    if (streamId !== 0) {
      this.fail(`${this.authority} sent SETTINGS on stream ${streamId}`, PROTOCOL_ERROR);
      return;
    }
    if ((flags & FLAG_ACK) !== 0) {
      if (length !== 0) this.fail(`${this.authority} sent a SETTINGS ACK with a payload`, FRAME_SIZE_ERROR);
      return;
    }
    if (length % 6 !== 0) {
      this.fail(`${this.authority} sent SETTINGS of ${length} bytes, not a multiple of 6`, FRAME_SIZE_ERROR);
      return;
    }
    for (let i = p; i < p + length; i += 6) {
      const id = buf.readUInt16BE(i);
      const value = buf.readUInt32BE(i + 2);
      if (id === SETTINGS_MAX_CONCURRENT_STREAMS) {
        this.peerMaxConcurrentStreams = value;
      } else if (id === SETTINGS_INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW) {
          this.fail(`${this.authority} announced an initial window of ${value}, over 2^31-1`, FLOW_CONTROL_ERROR);
          return;
        }
        // Applies to open streams too, and may drive their windows negative (RFC 9113 §6.9.2).
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const call of this.streams.values()) call.sendWindow += delta;
      } else if (id === SETTINGS_MAX_FRAME_SIZE) {
        if (value < MIN_FRAME_SIZE_SETTING || value > MAX_FRAME_SIZE_SETTING) {
          this.fail(
            `${this.authority} announced a max frame size of ${value}, outside ${MIN_FRAME_SIZE_SETTING}..${MAX_FRAME_SIZE_SETTING}`,
            PROTOCOL_ERROR,
          );
          return;
        }
        this.peerMaxFrameSize = value;
      }
    }
    this.frame(0, SETTINGS, FLAG_ACK, 0);
    if (!this.sawServerSettings) {
      this.sawServerSettings = true;
      this.settleReady?.();
      this.settleReady = undefined;
    }
    this.pump();
    this.openWaiting();
  }

  private onGoAway(buf: Buffer, p: number, length: number): void {
    if (length < 8) {
      this.fail(`${this.authority} sent a GOAWAY of ${length} bytes`, FRAME_SIZE_ERROR);
      return;
    }
    const lastStreamId = buf.readUInt32BE(p) & 0x7fffffff;
    const debug = buf.toString('utf8', p + 8, p + length);
    this.goAway = `GOAWAY code ${errorName(buf.readUInt32BE(p + 4))}${debug === '' ? '' : ` "${debug}"`}`;
    // Streams up to lastStreamId may still complete; later ones were never processed.
    for (const [id, call] of this.streams) {
      if (id <= lastStreamId) continue;
      this.streams.delete(id);
      call.reject(new LeanCallError(`${call.path} on stream ${id} was not processed: the server sent ${this.goAway}`));
    }
    const waiting = this.waiting;
    this.waiting = [];
    for (const call of waiting) call.reject(new LeanCallError(`cannot call ${call.path}: the server sent ${this.goAway}`));
  }

  private onWindowUpdate(buf: Buffer, p: number, length: number, streamId: number): void {
    if (length !== 4) {
      this.fail(`${this.authority} sent a WINDOW_UPDATE of ${length} bytes`, FRAME_SIZE_ERROR);
      return;
    }
    const increment = buf.readUInt32BE(p) & 0x7fffffff;
    if (streamId === 0) {
      if (increment === 0) {
        this.fail(`${this.authority} sent a connection WINDOW_UPDATE of 0`, PROTOCOL_ERROR);
        return;
      }
      this.connectionSendWindow += increment;
      if (this.connectionSendWindow > MAX_WINDOW) {
        this.fail(`${this.authority} widened the connection window past 2^31-1`, FLOW_CONTROL_ERROR);
        return;
      }
    } else {
      const call = this.streams.get(streamId);
      if (call === undefined) return;
      call.sendWindow += increment;
      if (increment === 0 || call.sendWindow > MAX_WINDOW) {
        this.streams.delete(streamId);
        this.resetStream(streamId, increment === 0 ? PROTOCOL_ERROR : FLOW_CONTROL_ERROR);
        call.reject(
          new LeanCallError(`${call.path} on stream ${streamId}: the server sent an invalid WINDOW_UPDATE (increment ${increment})`),
        );
        this.openWaiting();
        return;
      }
    }
    this.pump();
  }

  /** The server ended the stream: a complete gRPC message in its DATA is the answer, anything else an error. */
  private endOfStream(streamId: number): void {
    const call = this.streams.get(streamId);
    if (call === undefined) return;
    this.streams.delete(streamId);
    // The server may answer before taking the whole request (e.g. rejecting it); stop sending the rest.
    if (call.sent < call.body.length) this.resetStream(streamId, CANCEL);
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

  // ---- failure ----

  private rejectAll(reason: string): void {
    const streams = [...this.streams.values()];
    const waiting = this.waiting;
    this.streams.clear();
    this.waiting = [];
    this.blocked = [];
    for (const call of streams) call.reject(new LeanCallError(`${call.path} on stream ${call.id}: ${reason}`));
    for (const call of waiting) call.reject(new LeanCallError(`cannot call ${call.path}: ${reason}`));
  }

  /** Makes the connection unusable: every call rejects with `reason`; a protocol error is told with GOAWAY. */
  private fail(reason: string, goAwayCode?: number): void {
    if (this.failure !== undefined) return;
    this.failure = reason;
    this.rejectAll(reason);
    if (goAwayCode !== undefined && !this.socket.destroyed) {
      const at = this.frame(8, GOAWAY, 0, 0);
      this.out.writeUInt32BE(0, at);
      this.out.writeUInt32BE(goAwayCode, at + 4);
      this.flush();
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
