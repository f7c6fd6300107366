/**
 * Who may call the sidecar's API (ours; opt-in). Upstream relies on the pod network alone, so anyone who
 * reaches the port can trigger snapshots or `/initialization/start`, which may restore the data dir. With a
 * client CA file, a request is let in with a client certificate that CA signed (mutual TLS); with a token
 * file, with `Authorization: Bearer <token>`; with both, either does. `/healthz` and `/metrics` stay open
 * for probes and scrapers unless `--api-open-probes=false`.
 */
import { CodedError } from '../errors.js';
import { timingSafeEqual } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import type { TLSSocket } from 'node:tls';

export interface ApiAuthOptions {
  /** PEM CA bundle that signs the accepted client certificates. */
  clientCa?: Buffer;
  /** File whose content (trimmed) is the accepted bearer token; re-read when it changes (rotation). */
  tokenFile?: string;
  /** `/healthz` and `/metrics` without credentials. */
  openProbes: boolean;
}

export class ApiAuthError extends CodedError {
  override readonly name = 'ApiAuthError';
  readonly code = 'E_API_AUTH';
}

const PROBE_PATHS = new Set(['/healthz', '/metrics']);

/** The token file's content, read again when its modification time or size changes. */
class TokenFile {
  private seen: { mtimeMs: number; size: number } | undefined;
  private token: Buffer | undefined;

  constructor(private readonly path: string) {}

  async current(): Promise<Buffer | undefined> {
    const st = await stat(this.path);
    if (!this.seen || st.mtimeMs !== this.seen.mtimeMs || st.size !== this.seen.size) {
      const text = (await readFile(this.path, 'utf8')).trim();
      this.token = text === '' ? undefined : Buffer.from(text);
      this.seen = { mtimeMs: st.mtimeMs, size: st.size };
    }
    return this.token;
  }
}

export type AuthDecision = { allowed: true } | { allowed: false; status: 401 | 500; message: string };

export class ApiAuth {
  private readonly token: TokenFile | undefined;

  constructor(private readonly opts: ApiAuthOptions) {
    this.token = opts.tokenFile ? new TokenFile(opts.tokenFile) : undefined;
  }

  /** Whether anything is required at all (otherwise every request is let in, as upstream). */
  get enabled(): boolean {
    return this.opts.clientCa !== undefined || this.token !== undefined;
  }

  async decide(path: string, socket: unknown, authorization: string | undefined): Promise<AuthDecision> {
    if (!this.enabled) return { allowed: true };
    if (this.opts.openProbes && PROBE_PATHS.has(path)) return { allowed: true };
    if (this.opts.clientCa && (socket as Partial<TLSSocket>).authorized === true) return { allowed: true };
    if (this.token) {
      let expected: Buffer | undefined;
      try {
        expected = await this.token.current();
      } catch (err) {
        return { allowed: false, status: 500, message: `cannot read the API token file: ${(err as Error).message}` };
      }
      const given = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')?.[1];
      if (expected && given !== undefined) {
        const g = Buffer.from(given);
        if (g.length === expected.length && timingSafeEqual(g, expected)) return { allowed: true };
      }
    }
    const ways = [
      ...(this.opts.clientCa ? ['a client certificate signed by --api-client-ca-file'] : []),
      ...(this.token ? ['"Authorization: Bearer <token>" with the token of --api-token-file'] : []),
    ];
    return { allowed: false, status: 401, message: `unauthorized: this API requires ${ways.join(' or ')}` };
  }
}
