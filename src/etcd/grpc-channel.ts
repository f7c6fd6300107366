/**
 * gRPC over Node's built-in HTTP/2 client (node:http2 does HPACK, TLS, flow control): one connection to the
 * first reachable of several endpoints, and calls on it as HTTP/2 streams (`POST /<service>/<method>`,
 * `content-type: application/grpc`, `te: trailers`, 5-byte length-prefixed messages, `grpc-status` and
 * `grpc-message` in the trailers or in a trailers-only response). A broken connection is dropped; the next
 * call dials again, from the endpoint after the one that failed. Every failure is an EtcdError.
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type SecureClientSessionOptions } from 'node:http2';
import { EtcdError, etcdErrorFromStatus } from './errors.js';

const GRPC_OK = 0;
const GRPC_CANCELLED = 1;
const GRPC_DEADLINE_EXCEEDED = 4;
const GRPC_UNAVAILABLE = 14;

export interface ChannelOptions {
  /** http:// or https:// URLs; with `tls` every one is dialled with TLS. */
  endpoints: readonly string[];
  /** TLS settings (CA, client certificate, verification); plain HTTP/2 (h2c) when absent. */
  tls?: SecureClientSessionOptions;
  /** How long one endpoint may take to connect. */
  dialTimeoutMs?: number;
  /** Per-connection and per-stream HTTP/2 receive window in bytes. */
  receiveWindow?: number;
}

export interface StreamOptions {
  /** Bounds the whole call (sent as grpc-timeout too). */
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
  /** Extra request headers (the auth token). */
  metadata?: Record<string, string> | undefined;
}

/** One call in flight: messages arrive through `onMessage`; `done` settles with the call's status. */
export interface GrpcCall {
  write(frame: Buffer): void;
  /** Half-closes our side (the request is complete). */
  end(): void;
  /** Stops reading (etcd stops sending once the HTTP/2 window is used up) and reads on. */
  pause(): void;
  resume(): void;
  /** Ends the call from our side; `done` rejects with `err` (default: E_ETCD_CANCELLED). */
  cancel(err?: EtcdError): void;
  done: Promise<void>;
}

const DEFAULT_DIAL_TIMEOUT_MS = 5_000;

export class GrpcChannel {
  private session: ClientHttp2Session | undefined;
  private connecting: Promise<ClientHttp2Session> | undefined;
  private next = 0;
  private closed = false;
  private readonly calls = new Set<GrpcCall>();

  constructor(private readonly opts: ChannelOptions) {
    if (opts.endpoints.length === 0) throw new EtcdError('E_ETCD_UNAVAILABLE', 'no etcd endpoints');
  }

  /** Opens a call to `path` (`/etcdserverpb.KV/Range`); `onMessage` gets each response message. */
  async open(path: string, onMessage: (msg: Buffer) => void, opts: StreamOptions = {}): Promise<GrpcCall> {
    const started = Date.now();
    if (opts.signal?.aborted) throw cancelled(path);
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    // The connection counts against the call's deadline and can be cancelled like the call.
    const session = await new Promise<ClientHttp2Session>((resolve, reject) => {
      if (opts.timeoutMs !== undefined) timer = setTimeout(() => reject(deadlineExceeded(path, opts.timeoutMs!)), opts.timeoutMs);
      onAbort = () => reject(cancelled(path));
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      this.connect().then(resolve, reject);
    }).finally(() => {
      clearTimeout(timer);
      if (onAbort) opts.signal?.removeEventListener('abort', onAbort);
    });
    const remaining = opts.timeoutMs === undefined ? undefined : Math.max(1, opts.timeoutMs - (Date.now() - started));
    return this.start(session, path, onMessage, { ...opts, timeoutMs: remaining });
  }

  /** A unary call: one request, exactly one response message. */
  async unary(path: string, request: Buffer, opts: StreamOptions = {}): Promise<Buffer> {
    let response: Buffer | undefined;
    let extra = false;
    const call = await this.open(
      path,
      (msg) => {
        if (response) extra = true;
        response = msg;
      },
      opts,
    );
    call.write(request);
    call.end();
    await call.done;
    if (!response || extra)
      throw new EtcdError('E_ETCD_REQUEST', `${path}: expected one response message, got ${response ? 'more' : 'none'}`);
    return response;
  }

  close(): void {
    this.closed = true;
    for (const c of [...this.calls]) c.cancel(new EtcdError('E_ETCD_CLOSED', 'the etcd client is closed'));
    this.session?.destroy();
    this.session = undefined;
  }

  private connect(): Promise<ClientHttp2Session> {
    if (this.closed) return Promise.reject(new EtcdError('E_ETCD_CLOSED', 'the etcd client is closed'));
    if (this.session && !this.session.closed && !this.session.destroyed) return Promise.resolve(this.session);
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
        reject(err);
      };
      session.once('error', onError);
    });
  }

  private start(session: ClientHttp2Session, path: string, onMessage: (msg: Buffer) => void, opts: StreamOptions): GrpcCall {
    const headers: http2.OutgoingHttpHeaders = {
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
      ...(opts.metadata ?? {}),
    };
    if (opts.timeoutMs !== undefined) headers['grpc-timeout'] = `${Math.ceil(opts.timeoutMs)}m`;
    let stream: ClientHttp2Stream;
    try {
      stream = session.request(headers, { endStream: false });
    } catch (err) {
      throw new EtcdError('E_ETCD_UNAVAILABLE', `${path}: ${(err as Error).message}`);
    }
    let settle!: (err?: EtcdError) => void;
    let finished = false;
    let timer: NodeJS.Timeout | undefined;
    const done = new Promise<void>((resolve, reject) => {
      settle = (err) => {
        if (finished) return;
        finished = true;
        clearTimeout(timer);
        opts.signal?.removeEventListener('abort', onAbort);
        this.calls.delete(call);
        if (err) {
          if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
          reject(err);
        } else resolve();
      };
    });
    // A caller that awaits `done` later (after its messages) must not see an unhandled rejection meanwhile.
    done.catch(() => undefined);
    const call: GrpcCall = {
      write: (frame) => {
        if (!finished && stream.writable) stream.write(frame);
      },
      end: () => {
        if (!finished && stream.writable) stream.end();
      },
      pause: () => stream.pause(),
      resume: () => stream.resume(),
      cancel: (err) => settle(err ?? cancelled(path)),
      done,
    };
    this.calls.add(call);
    const onAbort = () => call.cancel();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    if (opts.timeoutMs !== undefined) timer = setTimeout(() => settle(deadlineExceeded(path, opts.timeoutMs!)), opts.timeoutMs);

    let status: number | undefined;
    let message = '';
    const takeStatus = (h: http2.IncomingHttpHeaders) => {
      const s = h['grpc-status'];
      if (s === undefined) return;
      status = Number(s);
      message = decodeGrpcMessage(String(h['grpc-message'] ?? ''));
    };
    stream.on('response', (h) => {
      const httpStatus = Number(h[':status']);
      if (httpStatus !== 200 && h['grpc-status'] === undefined) {
        settle(new EtcdError(httpStatus === 503 ? 'E_ETCD_UNAVAILABLE' : 'E_ETCD_REQUEST', `${path}: HTTP status ${httpStatus}`));
        return;
      }
      takeStatus(h);
    });
    stream.on('trailers', takeStatus);

    // Length-prefixed messages across DATA chunks. The chunks of a message are joined once, when all of it has
    // arrived: joining on every chunk copied a message of n chunks n times over (a watch response of a few MiB
    // after a catch-up arrives in hundreds of 16 KiB frames) and left each partial copy as garbage.
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    /** Length of the message being assembled, its 5-byte prefix included; 0 until the prefix has arrived. */
    let needed = 0;
    stream.on('data', (chunk: Buffer) => {
      if (finished) return;
      pending.push(chunk);
      pendingBytes += chunk.length;
      for (;;) {
        if (needed === 0) {
          if (pendingBytes < 5) return;
          if (pending[0]!.length < 5) pending = [Buffer.concat(pending, pendingBytes)];
          const head = pending[0]!;
          if (head[0] !== 0) {
            settle(new EtcdError('E_ETCD_REQUEST', `${path}: compressed gRPC messages are not supported`));
            return;
          }
          needed = 5 + head.readUInt32BE(1);
        }
        if (pendingBytes < needed) return;
        const all = pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes);
        const msg = all.subarray(5, needed);
        const rest = all.subarray(needed);
        pending = rest.length ? [rest] : [];
        pendingBytes = rest.length;
        needed = 0;
        try {
          onMessage(msg);
        } catch (err) {
          settle(err instanceof EtcdError ? err : new EtcdError('E_ETCD_REQUEST', `${path}: ${(err as Error).message}`));
          return;
        }
      }
    });
    stream.on('error', (err: Error) => settle(new EtcdError('E_ETCD_UNAVAILABLE', `${path}: ${err.message}`)));
    stream.on('close', () => {
      if (status === undefined) {
        const code = stream.rstCode;
        settle(
          etcdErrorFromStatus(
            GRPC_UNAVAILABLE,
            `${path}: the stream ended without a gRPC status${code ? ` (HTTP/2 error ${code})` : ''}: connection to etcd lost`,
          ),
        );
      } else if (status === GRPC_OK) {
        settle();
      } else settle(etcdErrorFromStatus(status, message || `${path}: gRPC status ${status}`));
    });
    return call;
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
