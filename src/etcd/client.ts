import { readFile } from 'node:fs/promises';
import { Etcd3, type IOptions } from 'etcd3';

/** What the etcd-connection flag group decides about reaching etcd (upstream §1.1). */
export interface EtcdClientOptions {
  endpoints: string[];
  username?: string;
  password?: string;
  certFile?: string;
  keyFile?: string;
  caFile?: string;
  /** `--insecure-transport`: plain HTTP/2 without TLS. */
  insecureTransport: boolean;
  /** `--insecure-skip-tls-verify`: accept any server certificate name. */
  insecureSkipVerify: boolean;
  /** `--etcd-connection-timeout`, used as the dial timeout. */
  connectionTimeoutMs: number;
}

/**
 * Builds an etcd3 client. TLS is used when the endpoints are https or client TLS files are given,
 * otherwise plain text (the `--insecure-transport` default). Credentials only when both username and
 * password are set, as upstream.
 */
export async function createEtcdClient(opts: EtcdClientOptions): Promise<Etcd3> {
  if (opts.endpoints.length === 0) throw new Error('no etcd endpoints configured (--endpoints)');
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
    },
  };
  if (useTls) {
    const readOpt = async (file: string | undefined, what: string) => {
      if (!file) return undefined;
      try {
        return await readFile(file);
      } catch (err) {
        throw new Error(`cannot read the etcd ${what} file ${file}: ${(err as Error).message}`);
      }
    };
    const [ca, cert, key] = await Promise.all([
      readOpt(opts.caFile, 'CA (--cacert)'),
      readOpt(opts.certFile, 'client certificate (--cert)'),
      readOpt(opts.keyFile, 'client key (--key)'),
    ]);
    if (Boolean(cert) !== Boolean(key)) throw new Error('--cert and --key must be given together');
    // etcd3 needs a root certificate buffer for TLS; an empty one means "system roots" to grpc-js.
    options.credentials = { rootCertificate: ca ?? Buffer.alloc(0) };
    if (cert && key) {
      options.credentials.certChain = cert;
      options.credentials.privateKey = key;
    }
    if (opts.insecureSkipVerify) {
      // grpc-js checks the certificate chain always; skipping verification relaxes the host name check.
      options.grpcOptions = { ...options.grpcOptions, 'grpc.ssl_target_name_override': 'localhost' };
    }
  }
  if (opts.username && opts.password) options.auth = { username: opts.username, password: opts.password };
  return new Etcd3(options);
}
