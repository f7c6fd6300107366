import { EtcdbrError } from '../errors.js';
import { readFile } from 'node:fs/promises';
import type { Etcd3, IOptions } from 'etcd3';
import { Etcd3Client, LocalEtcd3Client, type EtcdClient, type LocalEtcdClient } from './etcd-client.js';

/**
 * The etcd3 library, loaded on first use: it builds its gRPC services from .proto files when imported
 * (about 200 ms), which a command that never talks to etcd (ls, a restore with offline replay) need not pay.
 */
function etcd3Library(): Promise<typeof import('etcd3')> {
  return import('etcd3');
}

/**
 * A client of an etcd this process started itself (a restore's or compaction's replay etcd): plain
 * HTTP/2 on loopback, no credentials, messages of any size.
 */
export async function connectLocalEtcd(clientUrl: string): Promise<LocalEtcdClient> {
  const etcd3 = new (await etcd3Library()).Etcd3({
    hosts: clientUrl,
    grpcOptions: { 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 },
  });
  return new LocalEtcd3Client(etcd3, clientUrl);
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

/** Per-connection and per-stream HTTP/2 receive window of our etcd clients. */
export const ETCD_FLOW_CONTROL_WINDOW_BYTES = 4 * 1024 * 1024;

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
  const options: IOptions = {
    hosts: opts.endpoints.map((e) => e.replace(/^https?:\/\//, useTls ? 'https://' : 'http://')),
    dialTimeout: opts.connectionTimeoutMs,
    grpcOptions: {
      // Snapshot and watch responses can be large (values up to --max-request-bytes, 1.5 MiB by default in etcd).
      'grpc.max_receive_message_length': -1,
      'grpc.max_send_message_length': -1,
      // HTTP/2 flow control: with the default 64 KiB window etcd may send only two snapshot messages before
      // it waits for our WINDOW_UPDATE, so every moment our one thread spends hashing, compressing or in GC
      // stalls etcd too. A larger window lets etcd stream ahead while we work (bounded: at most this much
      // is buffered per connection).
      'grpc-node.flow_control_window': ETCD_FLOW_CONTROL_WINDOW_BYTES,
    },
  };
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
    if (ca || cert) {
      // grpc-js falls back to the default roots only for a missing CA; an empty buffer would trust nothing.
      // etcd3's type demands a buffer, but it hands the value to grpc-js createSsl unchanged.
      options.credentials = { rootCertificate: ca ?? (undefined as unknown as Buffer) };
      if (cert && key) {
        options.credentials.certChain = cert;
        options.credentials.privateKey = key;
      }
    }
    // Without files, etcd3 sees the https:// hosts and uses TLS with the default roots.
  }
  if (opts.username && opts.password) options.auth = { username: opts.username, password: opts.password };
  const client = new (await etcd3Library()).Etcd3(options);
  if (useTls && opts.insecureSkipVerify) skipServerCertificateVerification(client);
  return new Etcd3Client(client);
}

type VerifyOptions = { rejectUnauthorized?: boolean };
interface PoolInternals {
  hosts?: Array<{ channelCredentials?: { verifyOptions?: VerifyOptions } }>;
  authenticator?: { credentials?: { verifyOptions?: VerifyOptions } };
}

/**
 * `--insecure-skip-tls-verify` as Go's tls.Config.InsecureSkipVerify: accept any server certificate (chain
 * and name). grpc-js can do that (verify option `rejectUnauthorized: false`; the `ssl_target_name_override`
 * channel option only swaps the name that is checked, the chain is still verified), but etcd3 builds the
 * channel credentials itself without verify options. It builds one credentials object, shared by every
 * host and the authenticator, and grpc-js reads its verify options only when a connection is made, so
 * setting them right after construction covers every connection. Fails loudly if those internals change.
 */
function skipServerCertificateVerification(client: Etcd3): void {
  const pool = (client as unknown as { pool?: PoolInternals }).pool;
  const creds = [...(pool?.hosts ?? []).map((h) => h.channelCredentials), pool?.authenticator?.credentials];
  if (creds.length < 2) throw new EtcdbrError('E_INTERNAL', '--insecure-skip-tls-verify: cannot reach the etcd client TLS settings');
  for (const c of new Set(creds)) {
    const verify = c?.verifyOptions;
    if (typeof verify !== 'object' || verify === null) {
      throw new EtcdbrError('E_INTERNAL', '--insecure-skip-tls-verify: the etcd client library does not expose TLS verify options');
    }
    verify.rejectUnauthorized = false;
  }
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
