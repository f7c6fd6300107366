/**
 * A small client of the documented OpenStack Swift object API (Object Storage API v1) on Node's fetch:
 * authenticated requests against one container, with re-authentication when the token expires. No
 * maintained npm Swift client streams and re-authenticates (pkgcloud is unmaintained and pulls in
 * request; the others are browser or token-only wrappers), and the API surface needed here is six calls.
 *
 * Keystone tokens expire (typically after one hour). A request answered 401 gets a fresh token and is
 * sent once more, so a long upload outlives its token (gophercloud's AllowReauth). Only requests with a
 * replayable body (a Buffer or none) are sent again.
 */
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { SwiftCredentials } from '../config.js';
import { SnapStoreError } from '../errors.js';
import { authenticate } from './keystone.js';
import type { KeystoneToken } from './keystone.js';

export interface SwiftRequest {
  method: 'GET' | 'HEAD' | 'PUT' | 'DELETE';
  /** Object name inside the container; undefined addresses the container itself. */
  object?: string;
  query?: Record<string, string>;
  headers?: Record<string, string>;
  body?: Buffer;
  signal?: AbortSignal;
  /**
   * The caller streams the answer's body and bounds it itself (a fetch's stall deadline): no total time
   * limit, which would cut a download that takes longer than it.
   */
  streamed?: boolean;
}

/** Percent-encodes each path segment of an object name, keeping the slashes. */
export function encodeObjectName(name: string): string {
  return name.split('/').map(encodeURIComponent).join('/');
}

export class SwiftClient {
  private token: Promise<KeystoneToken> | undefined;
  /** Times a token was obtained (tests read it to prove a re-authentication). */
  authentications = 0;

  constructor(
    private readonly credentials: SwiftCredentials,
    readonly container: string,
    private readonly timeoutMs: number,
    /** Replaces the catalog's object-store URL (`--store-endpoint-override`). */
    private readonly storageUrlOverride?: string,
  ) {}

  /** The object-store endpoint in use (after authentication), for messages. */
  async storageUrl(): Promise<string> {
    return this.storageUrlOverride ?? (await this.currentToken()).storageUrl;
  }

  private currentToken(): Promise<KeystoneToken> {
    this.token ??= authenticate(this.credentials, this.timeoutMs).then(
      (t) => {
        this.authentications++;
        return t;
      },
      (err: unknown) => {
        this.token = undefined; // the next request tries again
        throw err;
      },
    );
    return this.token;
  }

  private async send(req: SwiftRequest, token: KeystoneToken): Promise<Response> {
    const base = this.storageUrlOverride?.replace(/\/+$/, '') ?? token.storageUrl;
    const path = `${base}/${encodeURIComponent(this.container)}${req.object === undefined ? '' : `/${encodeObjectName(req.object)}`}`;
    const url = req.query ? `${path}?${new URLSearchParams(req.query).toString()}` : path;
    const timeout = req.streamed === true ? undefined : AbortSignal.timeout(this.timeoutMs);
    const signal = req.signal && timeout ? AbortSignal.any([req.signal, timeout]) : (req.signal ?? timeout);
    return fetch(url, {
      method: req.method,
      headers: { 'x-auth-token': token.token, ...req.headers },
      ...(req.body !== undefined ? { body: req.body } : {}),
      ...(signal ? { signal } : {}),
    });
  }

  /** Sends the request; a 401 re-authenticates once and resends. The caller reads or cancels the body. */
  async request(req: SwiftRequest): Promise<Response> {
    const token = await this.currentToken();
    const res = await this.send(req, token);
    if (res.status !== 401) return res;
    await res.body?.cancel().catch(() => undefined);
    // Only one re-authentication for all requests that saw the same expired token.
    if (this.token !== undefined && (await this.token.catch(() => undefined)) === token) this.token = undefined;
    const fresh = await this.currentToken();
    const again = await this.send(req, fresh);
    if (again.status === 401) {
      await again.body?.cancel().catch(() => undefined);
      throw new SnapStoreError('E_CREDENTIALS', `Swift ${this.container}: a fresh Keystone token was rejected too (HTTP 401)`);
    }
    return again;
  }
}

/** A fetch response body as a Node stream. */
export function bodyStream(res: Response): Readable {
  return res.body ? Readable.fromWeb(res.body as unknown as WebReadableStream<Uint8Array>) : Readable.from([]);
}
