/**
 * The sidecar's own Kubernetes REST transport: one keep-alive agent per client, bearer tokens (re-read from
 * their file when it changes: bound service account tokens rotate), client certificates, per-request
 * timeouts and the caller's abort signal, and a bounded answer. Kubernetes `Status` error bodies become
 * KubeStatusError, which errors.ts turns into the typed codes callers branch on.
 */
import { readFileSync, statSync } from 'node:fs';
import type { Agent } from 'node:http';
import { nodeHttp, nodeHttps } from '@etcdbrctl/snapstore';
import { KubeError, KubeStatusError } from './errors.js';

/** Answers of the calls we make are single small objects; anything larger is a wrong endpoint or a broken server. */
export const MAX_RESPONSE_BYTES = 4 * 1024 * 1024;
/** A request that has no deadline of its own still ends (client-go's default is none; a sidecar must not hang). */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

export interface TransportOptions {
  /** e.g. `https://10.0.0.1:443`, without a trailing slash. */
  server: string;
  /** PEM of the CA bundle to trust; undefined uses Node's default roots. */
  ca?: Buffer;
  insecureSkipTLSVerify?: boolean;
  cert?: Buffer;
  key?: Buffer;
  /** A fixed bearer token. */
  token?: string;
  /** A file holding the bearer token, re-read when its mtime or size changes. */
  tokenFile?: string;
  requestTimeoutMs?: number;
  maxResponseBytes?: number;
  /** Sent as `User-Agent` on every request, so API server audit logs and metrics name the sidecar. */
  userAgent?: string;
}

export interface RequestOptions {
  signal?: AbortSignal;
  /** Content type of the body: `application/json`, or a patch type such as `application/merge-patch+json`. */
  contentType?: string;
}

/** Reads a token file and keeps it until the file changes (kubelet rewrites projected tokens before they expire). */
export class TokenFile {
  private cached: { ino: number; mtimeMs: number; size: number; token: string } | undefined;
  constructor(readonly file: string) {}

  token(): string {
    let st;
    try {
      st = statSync(this.file);
    } catch (err) {
      throw new KubeError('E_KUBE_CONFIG', `Kubernetes token file ${this.file} cannot be read: ${(err as Error).message}`, { cause: err });
    }
    const c = this.cached;
    // kubelet swaps a projected token in by renaming a new file over a symlink: the inode changes too.
    if (c === undefined || c.ino !== st.ino || c.mtimeMs !== st.mtimeMs || c.size !== st.size) {
      const token = readFileSync(this.file, 'utf8').trim();
      if (token === '') throw new KubeError('E_KUBE_CONFIG', `Kubernetes token file ${this.file} is empty`);
      this.cached = { ino: st.ino, mtimeMs: st.mtimeMs, size: st.size, token };
      return token;
    }
    return c.token;
  }
}

export class KubeTransport {
  readonly server: string;
  private readonly url: URL;
  private readonly agent: Agent;
  private readonly tokenFile: TokenFile | undefined;
  private readonly timeoutMs: number;
  private readonly maxBytes: number;

  constructor(private readonly opts: TransportOptions) {
    this.server = opts.server.replace(/\/+$/, '');
    this.url = new URL(this.server);
    this.tokenFile = opts.tokenFile === undefined ? undefined : new TokenFile(opts.tokenFile);
    this.timeoutMs = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.maxBytes = opts.maxResponseBytes ?? MAX_RESPONSE_BYTES;
    this.agent =
      this.url.protocol === 'https:'
        ? new (nodeHttps().Agent)({
            keepAlive: true,
            maxSockets: 4,
            ...(opts.ca === undefined ? {} : { ca: opts.ca }),
            ...(opts.cert === undefined ? {} : { cert: opts.cert }),
            ...(opts.key === undefined ? {} : { key: opts.key }),
            rejectUnauthorized: opts.insecureSkipTLSVerify !== true,
          })
        : new (nodeHttp().Agent)({ keepAlive: true, maxSockets: 4 });
  }

  /** Whether the server certificate is verified (false for plain http and insecure-skip-tls-verify). */
  get verifiesTLS(): boolean {
    return this.url.protocol === 'https:' && this.opts.insecureSkipTLSVerify !== true;
  }

  /** Sends one request; resolves with the parsed JSON answer of a 2xx, rejects with a KubeStatusError otherwise. */
  async request(method: string, path: string, body: unknown, options: RequestOptions = {}): Promise<unknown> {
    const headers: Record<string, string> = { Accept: 'application/json' };
    if (this.opts.userAgent !== undefined) headers['User-Agent'] = this.opts.userAgent;
    const token = this.tokenFile?.token() ?? this.opts.token;
    if (token !== undefined && token !== '') headers.Authorization = `Bearer ${token}`;
    let payload: Buffer | undefined;
    if (body !== undefined) {
      payload = Buffer.from(JSON.stringify(body));
      headers['Content-Type'] = options.contentType ?? 'application/json';
      headers['Content-Length'] = String(payload.length);
    }
    const signal = options.signal;
    return await new Promise<unknown>((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortError(signal));
        return;
      }
      const mod = this.url.protocol === 'https:' ? nodeHttps() : nodeHttp();
      const req = mod.request({
        protocol: this.url.protocol,
        hostname: this.url.hostname.replace(/^\[|\]$/g, ''),
        port: this.url.port,
        path: `${this.url.pathname.replace(/\/+$/, '')}${path}`,
        method,
        headers,
        agent: this.agent,
      });
      let settled = false;
      const fail = (err: unknown): void => {
        if (settled) return;
        settled = true;
        signal?.removeEventListener('abort', onAbort);
        reject(err);
      };
      const done = (): void => {
        settled = true;
        signal?.removeEventListener('abort', onAbort);
      };
      // fail() before destroy(): once the answer has begun, destroy's error would surface on the response only.
      const onAbort = (): void => {
        fail(abortError(signal!));
        req.destroy();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      req.setTimeout(this.timeoutMs, () => {
        fail(new KubeError('E_KUBE_TIMEOUT', `${method} ${path} did not finish within ${this.timeoutMs / 1000} s`));
        req.destroy();
      });
      req.on('error', fail);
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > this.maxBytes) {
            fail(new KubeError('E_KUBE_REQUEST', `${method} ${path}: the answer is larger than ${this.maxBytes} bytes`));
            req.destroy();
            return;
          }
          chunks.push(chunk);
        });
        res.on('error', fail);
        res.on('end', () => {
          if (settled) return;
          done();
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status < 200 || status > 299) {
            reject(new KubeStatusError(status, text));
            return;
          }
          if (text === '') {
            resolve(undefined);
            return;
          }
          try {
            resolve(JSON.parse(text) as unknown);
          } catch (err) {
            reject(new KubeError('E_KUBE_REQUEST', `${method} ${path}: the answer is not JSON`, { cause: err, status }));
          }
        });
      });
      req.end(payload);
    });
  }

  /** Closes idle keep-alive sockets. */
  close(): void {
    this.agent.destroy();
  }
}

function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new KubeError('E_KUBE_TIMEOUT', 'request aborted');
}
