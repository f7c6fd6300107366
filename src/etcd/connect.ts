/**
 * How a client of etcd is made: from the etcd-connection flags (TLS, credentials, endpoints) or for an etcd this
 * process started. The client itself (calls.ts, with the transport and the generated messages) is loaded on
 * the first call here, so a command that never talks to etcd (an offline restore, `ls`, `copy`) loads neither
 * node:http2 nor the protobuf code by importing the door (index.ts).
 */
import { EtcdbrError } from '../errors.js';
import { readFile } from 'node:fs/promises';
import type { SecureClientSessionOptions } from 'node:http2';
import type { EtcdClient, LocalEtcdClient } from './types.js';

/**
 * A client of an etcd this process started itself (a restore's or compaction's replay etcd): plain
 * HTTP/2 on loopback, no credentials, messages of any size.
 */
export async function connectLocalEtcd(clientUrl: string): Promise<LocalEtcdClient> {
  const { LocalGrpcEtcdClient } = await import('./calls.js');
  return new LocalGrpcEtcdClient(clientUrl, { endpoints: [clientUrl], receiveWindow: ETCD_FLOW_CONTROL_WINDOW_BYTES });
}

/** What the etcd-connection flag group decides about reaching etcd (upstream `pkg/types/etcdconnection.go`). */
export interface EtcdClientOptions {
  endpoints: string[];
  username?: string;
  password?: string;
  certFile?: string;
  keyFile?: string;
  caFile?: string;
  /** `--insecure-transport`: plain HTTP/2 without TLS. */
  insecureTransport: boolean;
  /** `--insecure-skip-tls-verify`: accept any server certificate (no chain or name check), when TLS is used. */
  insecureSkipVerify: boolean;
  /** `--etcd-connection-timeout`, used as the dial timeout. */
  connectionTimeoutMs: number;
}

/**
 * Per-connection and per-stream HTTP/2 receive window of our etcd clients. With the default 64 KiB window
 * etcd may send only two snapshot messages before it waits for our WINDOW_UPDATE, so every moment our one
 * thread spends hashing, compressing or in GC stalls etcd too. A larger window lets etcd stream ahead while
 * we work (bounded: at most this much is buffered per stream).
 *
 * Not larger: what waits in the window while the consumer is busy (an upload with all parts in flight, a
 * compressor) outlives the small young generation (bin/etcdbrctl) and is promoted, so it is freed only by
 * full collections. Measured on `server`, 1.1 GiB full snapshot, against 4 MiB (and a snapshot queue of 64
 * messages instead of 16): zstd to Local 19.3 -> 14.5 s and CPU 20.7 -> 12.7 s, peak 98 -> 89 MiB; uncompressed
 * to S3 with one part in flight, peak 137 -> 113 MiB.
 */
export const ETCD_FLOW_CONTROL_WINDOW_BYTES = 1024 * 1024;

/**
 * Builds a client of `endpoints`. TLS is used when an endpoint is https, TLS files are given or
 * `--insecure-transport=false`, otherwise plain text (the default). With TLS every endpoint is dialled
 * with TLS, http:// ones too (upstream's clientv3 would drop TLS for those). Credentials only when both
 * username and password are set, as upstream.
 */
export async function createEtcdClient(opts: EtcdClientOptions): Promise<EtcdClient> {
  if (opts.endpoints.length === 0) throw new EtcdbrError('E_INVALID_INPUT', 'no etcd endpoints configured (--endpoints)');
  const useTls =
    opts.endpoints.some((e) => e.startsWith('https://')) ||
    Boolean(opts.caFile || opts.certFile || opts.keyFile) ||
    !opts.insecureTransport;
  let tls: SecureClientSessionOptions | undefined;
  if (useTls) {
    const readOpt = async (file: string | undefined, what: string) => {
      if (!file) return undefined;
      try {
        return await readFile(file);
      } catch (err) {
        throw new EtcdbrError('E_INVALID_INPUT', `cannot read the etcd ${what} file ${file}: ${(err as Error).message}`);
      }
    };
    const [ca, cert, key] = await Promise.all([
      readOpt(opts.caFile, 'CA (--cacert)'),
      readOpt(opts.certFile, 'client certificate (--cert)'),
      readOpt(opts.keyFile, 'client key (--key)'),
    ]);
    if (Boolean(cert) !== Boolean(key)) throw new EtcdbrError('E_INVALID_INPUT', '--cert and --key must be given together');
    // Without a CA file the default roots; `--insecure-skip-tls-verify` as Go's InsecureSkipVerify: neither
    // the chain nor the name is checked.
    tls = { ...(ca ? { ca } : {}), ...(cert && key ? { cert, key } : {}), rejectUnauthorized: !opts.insecureSkipVerify };
  }
  const { GrpcEtcdClient } = await import('./calls.js');
  return new GrpcEtcdClient(
    {
      endpoints: opts.endpoints,
      ...(tls ? { tls } : {}),
      dialTimeoutMs: opts.connectionTimeoutMs,
      receiveWindow: ETCD_FLOW_CONTROL_WINDOW_BYTES,
    },
    opts.username && opts.password ? { username: opts.username, password: opts.password } : undefined,
  );
}

/** The etcd-connection flag group as the config holds it (durations in milliseconds). */
export interface EtcdConnectionFlags {
  endpoints: string[];
  username: string;
  password: string;
  certFile: string;
  keyFile: string;
  caFile: string;
  insecureTransport: boolean;
  insecureSkipVerify: boolean;
  connectionTimeout: number;
}

/** A client from the connection flags, to `endpoints` (default: `--endpoints`). */
export function createEtcdClientFromFlags(conn: EtcdConnectionFlags, endpoints: string[] = conn.endpoints): Promise<EtcdClient> {
  return createEtcdClient({
    endpoints,
    username: conn.username,
    password: conn.password,
    certFile: conn.certFile,
    keyFile: conn.keyFile,
    caFile: conn.caFile,
    insecureTransport: conn.insecureTransport,
    insecureSkipVerify: conn.insecureSkipVerify,
    connectionTimeoutMs: conn.connectionTimeout,
  });
}
