/**
 * gRPC over Node's built-in HTTP/2 client (node:http2 does HPACK, TLS and flow control), the one transport of
 * every call this project makes to etcd. One connection to the first reachable of several endpoints; each call
 * is an HTTP/2 stream (`POST /<service>/<method>`, `content-type: application/grpc`, `te: trailers`, 5-byte
 * length-prefixed messages), its status read from `grpc-status` and `grpc-message` in the trailers or in a
 * trailers-only response. Messages are encoded and decoded by the code generated from etcd's .proto files
 * (src/etcd/gen, `npm run proto`). A broken connection is dropped; the next call dials again, from the
 * endpoint after the one that failed. Every failure is an EtcdError.
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type SecureClientSessionOptions } from 'node:http2';
import { EtcdError, etcdErrorFromStatus } from './errors.js';
import { frame, type MessageCodec } from './grpc-frame.js';

const GRPC_OK = 0;
const GRPC_CANCELLED = 1;
const GRPC_DEADLINE_EXCEEDED = 4;
const GRPC_UNAVAILABLE = 14;
const DEFAULT_DIAL_TIMEOUT_MS = 5_000;

/** A method etcd serves (`KV.range` in methods.ts): where it is called and the codecs of what it carries. */
export interface GrpcMethod<I, O> {
  /** `/etcdserverpb.KV/Range`. */
  readonly path: string;
  readonly input: MessageCodec<I>;
  readonly output: MessageCodec<O>;
}

export interface TransportOptions {
  /** http:// or https:// URLs; with `tls` every one is dialled with TLS. */
  endpoints: readonly string[];
  /** TLS settings (CA, client certificate, verification); plain HTTP/2 (h2c) when absent. */
  tls?: SecureClientSessionOptions;
  /** How long one endpoint may take to connect. */
  dialTimeoutMs?: number;
  /** Per-connection and per-stream HTTP/2 receive window in bytes. */
  receiveWindow?: number;
}

export interface CallSettings {
  /** Bounds the whole call, the connection included (sent as grpc-timeout too). */
  timeoutMs?: number | undefined;
  /** Ends the call with E_ETCD_CANCELLED when aborted. */
  signal?: AbortSignal | undefined;
  /** Extra request headers (the auth token). */
  metadata?: Readonly<Record<string, string>> | undefined;
}

/** A streaming call in flight: responses arrive through the handler it was opened with. */
export interface GrpcCall<I> {
  send(message: I): void;
  /** Half-closes our side (no more requests). */
  end(): void;
  /** Stops reading (etcd stops sending once the HTTP/2 window is used up) and reads on. */
  pause(): void;
  resume(): void;
  /** Ends the call from our side; `done` rejects with `err` (default: E_ETCD_CANCELLED). */
  cancel(err?: EtcdError): void;
  /** Settles with the call's status: resolves on OK, rejects with the EtcdError of any other end. */
  readonly done: Promise<void>;
}

/** What the client needs of a transport: GrpcTransport, or another carrying the same generated code (a bench's). */
export interface Transport {
  unary<I, O>(method: GrpcMethod<I, O>, request: I, settings?: CallSettings): Promise<O>;
  open<I, O>(method: GrpcMethod<I, O>, onMessage: (message: O) => void, settings?: CallSettings): Promise<GrpcCall<I>>;
  close(): void;
}

export class GrpcTransport implements Transport {
  private session: ClientHttp2Session | undefined;
  private connecting: Promise<ClientHttp2Session> | undefined;
  private next = 0;
  private closed = false;
  private readonly calls = new Set<{ cancel(err: EtcdError): void }>();

  constructor(private readonly opts: TransportOptions) {
    if (opts.endpoints.length === 0) throw new EtcdError('E_ETCD_UNAVAILABLE', 'no etcd endpoints');
  }

  /** A unary call: one request, exactly one response. */
  async unary<I, O>(method: GrpcMethod<I, O>, request: I, settings: CallSettings = {}): Promise<O> {
    const { path } = method;
    const bytes = frame(method.input, request);
    let response: Buffer | undefined;
    let count = 0;
    const started = Date.now();
    const session = this.ready() ?? (await this.connectWithin(path, settings));
    await this.start(session, path, started, settings, bytes, true, (msg) => {
      response = msg;
      count++;
    }).done;
    if (count !== 1) throw new EtcdError('E_ETCD_REQUEST', `${path}: expected one response message, got ${count}`);
    return method.output.decode(response!);
  }

  /**
   * Opens a streaming call (server-streaming or bidirectional); `onMessage` gets each response, decoded. A
   * handler that throws ends the call with that error.
   */
  async open<I, O>(method: GrpcMethod<I, O>, onMessage: (message: O) => void, settings: CallSettings = {}): Promise<GrpcCall<I>> {
    const { path } = method;
    const started = Date.now();
    const session = this.ready() ?? (await this.connectWithin(path, settings));
    const call = this.start(session, path, started, settings, undefined, false, (msg) => onMessage(method.output.decode(msg)));
    return {
      send: (message) => call.write(frame(method.input, message)),
      end: () => call.end(),
      pause: () => call.pause(),
      resume: () => call.resume(),
      cancel: (err) => call.cancel(err),
      done: call.done,
    };
  }

  close(): void {
    this.closed = true;
    for (const c of [...this.calls]) c.cancel(new EtcdError('E_ETCD_CLOSED', 'the etcd client is closed'));
    this.session?.destroy();
    this.session = undefined;
  }

  /** The open connection, if there is one that can take a call now. */
  private ready(): ClientHttp2Session | undefined {
    const s = this.session;
    return !this.closed && s && !s.closed && !s.destroyed ? s : undefined;
  }

  /** Connects, within the call's deadline and until its signal: the connection counts against the call. */
  private connectWithin(path: string, settings: CallSettings): Promise<ClientHttp2Session> {
    const { timeoutMs, signal } = settings;
    if (signal?.aborted) return Promise.reject(cancelled(path));
    if (timeoutMs === undefined && !signal) return this.connect();
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    return new Promise<ClientHttp2Session>((resolve, reject) => {
      if (timeoutMs !== undefined) timer = setTimeout(() => reject(deadlineExceeded(path, timeoutMs)), timeoutMs);
      onAbort = () => reject(cancelled(path));
      signal?.addEventListener('abort', onAbort, { once: true });
      this.connect().then(resolve, reject);
    }).finally(() => {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener('abort', onAbort);
    });
  }

  private connect(): Promise<ClientHttp2Session> {
    if (this.closed) return Promise.reject(new EtcdError('E_ETCD_CLOSED', 'the etcd client is closed'));
    const ready = this.ready();
    if (ready) return Promise.resolve(ready);
    this.connecting ??= this.dialAny().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  /** The first endpoint that connects, from the one after the last that failed. */
  private async dialAny(): Promise<ClientHttp2Session> {
    const { endpoints } = this.opts;
    const failures: string[] = [];
    for (let i = 0; i < endpoints.length; i++) {
      const index = (this.next + i) % endpoints.length;
      const endpoint = endpoints[index]!;
      try {
        const session = await this.dial(endpoint);
        if (this.closed) {
          session.destroy();
          throw new EtcdError('E_ETCD_CLOSED', 'the etcd client is closed');
        }
        this.session = session;
        const drop = () => {
          if (this.session === session) {
            this.session = undefined;
            this.next = (index + 1) % endpoints.length;
          }
        };
        session.on('close', drop);
        session.on('goaway', drop);
        session.on('error', drop);
        return session;
      } catch (err) {
        if (err instanceof EtcdError && err.code === 'E_ETCD_CLOSED') throw err;
        failures.push(`${endpoint}: ${(err as Error).message}`);
      }
    }
    this.next = (this.next + 1) % endpoints.length;
    throw new EtcdError('E_ETCD_UNAVAILABLE', `cannot connect to etcd (${failures.join('; ')})`);
  }

  private dial(endpoint: string): Promise<ClientHttp2Session> {
    const { tls, receiveWindow } = this.opts;
    const url = endpoint.replace(/^(https?:\/\/)?/, tls ? 'https://' : 'http://');
    const dialTimeoutMs = this.opts.dialTimeoutMs || DEFAULT_DIAL_TIMEOUT_MS;
    return new Promise((resolve, reject) => {
      const session = http2.connect(url, {
        ...(tls ?? {}),
        ...(receiveWindow ? { settings: { initialWindowSize: receiveWindow } } : {}),
      });
      const timer = setTimeout(() => {
        session.destroy();
        reject(new EtcdError('E_ETCD_UNAVAILABLE', `no connection within ${dialTimeoutMs} ms`));
      }, dialTimeoutMs);
      session.once('connect', () => {
        clearTimeout(timer);
        session.removeListener('error', onError);
        // Stays as a listener: an 'error' without one would be thrown; the call's stream reports it.
        session.on('error', () => undefined);
        if (receiveWindow) session.setLocalWindowSize(receiveWindow);
        resolve(session);
      });
      const onError = (err: Error) => {
        clearTimeout(timer);
        session.destroy();
        reject(new EtcdError('E_ETCD_UNAVAILABLE', err.message, { cause: err }));
      };
      session.once('error', onError);
    });
  }

  /**
   * Starts a call on `session`. With `request` (a unary call) the request goes out with the end of our side in
   * one write. `started` is when the call began, so the time spent connecting counts against its deadline.
   */
  private start(
    session: ClientHttp2Session,
    path: string,
    started: number,
    settings: CallSettings,
    request: Buffer | undefined,
    unary: boolean,
    onMessage: (msg: Buffer) => void,
  ): RawCall {
    const { signal, metadata } = settings;
    const timeoutMs = settings.timeoutMs === undefined ? undefined : Math.max(1, settings.timeoutMs - (Date.now() - started));
    if (signal?.aborted) return failedCall(cancelled(path));
    const headers: http2.OutgoingHttpHeaders = {
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
    };
    if (metadata) Object.assign(headers, metadata);
    if (timeoutMs !== undefined) headers['grpc-timeout'] = `${Math.ceil(timeoutMs)}m`;
    let stream: ClientHttp2Stream;
    try {
      stream = session.request(headers, { endStream: false });
    } catch (err) {
      return failedCall(new EtcdError('E_ETCD_UNAVAILABLE', `${path}: ${(err as Error).message}`, { cause: err }));
    }
    if (request) stream.end(request);
    return new Call(this.calls, stream, path, timeoutMs, signal, unary, onMessage);
  }
}

interface RawCall {
  write(frame: Buffer): void;
  end(): void;
  pause(): void;
  resume(): void;
  cancel(err?: EtcdError): void;
  readonly done: Promise<void>;
}

/** A call that could not start: its `done` is the reason. */
function failedCall(err: EtcdError): RawCall {
  const done = Promise.reject(err);
  done.catch(() => undefined);
  const nothing = () => undefined;
  return { write: nothing, end: nothing, pause: nothing, resume: nothing, cancel: nothing, done };
}

/**
 * One HTTP/2 stream as a gRPC call: splits the DATA into length-prefixed messages and settles `done` with the
 * gRPC status. A class, not closures: the online replay makes one per transaction, thousands a second.
 */
class Call implements RawCall {
  readonly done: Promise<void>;
  private resolve!: () => void;
  private reject!: (err: EtcdError) => void;
  private finished = false;
  private timer: NodeJS.Timeout | undefined;
  private status: number | undefined;
  private message = '';
  /** Chunks of the message being assembled; joined once, when all of it has arrived. */
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** Length of the message being assembled, its 5-byte prefix included; 0 until the prefix has arrived. */
  private needed = 0;
  private readonly onAbort: (() => void) | undefined;

  constructor(
    private readonly registry: Set<{ cancel(err: EtcdError): void }>,
    private readonly stream: ClientHttp2Stream,
    private readonly path: string,
    timeoutMs: number | undefined,
    private readonly signal: AbortSignal | undefined,
    unary: boolean,
    private readonly onMessage: (msg: Buffer) => void,
  ) {
    this.done = new Promise<void>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    // A caller that awaits `done` later (after its messages) must not see an unhandled rejection meanwhile.
    if (!unary) this.done.catch(() => undefined);
    registry.add(this);
    if (signal) {
      this.onAbort = () => this.cancel();
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
    if (timeoutMs !== undefined) this.timer = setTimeout(() => this.settle(deadlineExceeded(path, timeoutMs)), timeoutMs);
    stream.on('response', (h) => this.onResponse(h));
    stream.on('trailers', (h) => this.takeStatus(h));
    stream.on('data', (chunk: Buffer) => this.onData(chunk));
    stream.on('error', (err: Error) => this.settle(new EtcdError('E_ETCD_UNAVAILABLE', `${path}: ${err.message}`, { cause: err })));
    stream.on('close', () => this.onClose());
  }

  write(frame: Buffer): void {
    if (!this.finished && this.stream.writable) this.stream.write(frame);
  }

  end(): void {
    if (!this.finished && this.stream.writable) this.stream.end();
  }

  pause(): void {
    this.stream.pause();
  }

  resume(): void {
    this.stream.resume();
  }

  cancel(err?: EtcdError): void {
    this.settle(err ?? cancelled(this.path));
  }

  private settle(err?: EtcdError): void {
    if (this.finished) return;
    this.finished = true;
    clearTimeout(this.timer);
    if (this.onAbort) this.signal?.removeEventListener('abort', this.onAbort);
    this.registry.delete(this);
    if (err) {
      if (!this.stream.closed) this.stream.close(http2.constants.NGHTTP2_CANCEL);
      this.reject(err);
    } else this.resolve();
  }

  private onResponse(h: http2.IncomingHttpHeaders): void {
    const httpStatus = Number(h[':status']);
    if (httpStatus !== 200 && h['grpc-status'] === undefined) {
      this.settle(new EtcdError(httpStatus === 503 ? 'E_ETCD_UNAVAILABLE' : 'E_ETCD_REQUEST', `${this.path}: HTTP status ${httpStatus}`));
      return;
    }
    this.takeStatus(h);
  }

  private takeStatus(h: http2.IncomingHttpHeaders): void {
    const s = h['grpc-status'];
    if (s === undefined) return;
    this.status = Number(s);
    this.message = decodeGrpcMessage(String(h['grpc-message'] ?? ''));
  }

  private onData(chunk: Buffer): void {
    if (this.finished) return;
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    for (;;) {
      if (this.needed === 0) {
        if (this.pendingBytes < 5) return;
        if (this.pending[0]!.length < 5) this.pending = [Buffer.concat(this.pending, this.pendingBytes)];
        const head = this.pending[0]!;
        if (head[0] !== 0) {
          this.settle(new EtcdError('E_ETCD_REQUEST', `${this.path}: compressed gRPC messages are not supported`));
          return;
        }
        this.needed = 5 + head.readUInt32BE(1);
      }
      if (this.pendingBytes < this.needed) return;
      const all = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.pendingBytes);
      const msg = all.subarray(5, this.needed);
      const rest = all.subarray(this.needed);
      this.pending = rest.length ? [rest] : [];
      this.pendingBytes = rest.length;
      this.needed = 0;
      try {
        this.onMessage(msg);
      } catch (err) {
        this.settle(
          err instanceof EtcdError ? err : new EtcdError('E_ETCD_REQUEST', `${this.path}: ${(err as Error).message}`, { cause: err }),
        );
        return;
      }
    }
  }

  private onClose(): void {
    if (this.status === undefined) {
      const code = this.stream.rstCode;
      this.settle(
        etcdErrorFromStatus(
          GRPC_UNAVAILABLE,
          `${this.path}: the stream ended without a gRPC status${code ? ` (HTTP/2 error ${code})` : ''}: connection to etcd lost`,
        ),
      );
    } else if (this.status === GRPC_OK) {
      if (this.pendingBytes > 0) this.settle(new EtcdError('E_ETCD_REQUEST', `${this.path}: the stream ended inside a message`));
      else this.settle();
    } else this.settle(etcdErrorFromStatus(this.status, this.message || `${this.path}: gRPC status ${this.status}`));
  }
}

function cancelled(path: string): EtcdError {
  return etcdErrorFromStatus(GRPC_CANCELLED, `${path}: call cancelled (stopped)`);
}

function deadlineExceeded(path: string, ms: number): EtcdError {
  return etcdErrorFromStatus(GRPC_DEADLINE_EXCEEDED, `${path}: deadline exceeded (no answer within ${ms} ms)`);
}

/** grpc-message is percent-encoded (gRPC over HTTP/2 protocol). */
function decodeGrpcMessage(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}
