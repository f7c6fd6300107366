/**
 * A throw-away PKI made with the `openssl` CLI, and etcd processes that serve TLS with it.
 * Everything lives in one temp dir per call; `cleanup()` removes it.
 */
import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../src/etcd/ports.js';
import { etcdBinaries, startTestEtcd, type TestEtcd } from './etcd.js';

const execFileAsync = promisify(execFile);

export interface CertFiles {
  certFile: string;
  keyFile: string;
}

export interface TestPki {
  dir: string;
  /** The CA every cert below is signed with. */
  caFile: string;
  /** A second, unrelated CA (for "wrong CA" cases). */
  otherCaFile: string;
  /** Server cert for IP 127.0.0.1 and DNS localhost, usable for server and client auth (etcd needs both). */
  server: CertFiles;
  /** Server cert signed by the CA whose only name is `wrong.example` (for host name checks). */
  wrongNameServer: CertFiles;
  /** Client cert with CN `etcdbr-client` (not an etcd user, so CN-based auth grants nothing). */
  client: CertFiles;
  /** Client cert signed by the other CA. */
  untrustedClient: CertFiles;
  cleanup(): Promise<void>;
}

async function openssl(args: string[]): Promise<void> {
  try {
    await execFileAsync('openssl', args);
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`openssl ${args[0]} failed: ${e.stderr ?? e.message}`, { cause: err });
  }
}

const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

async function makeCa(dir: string, name: string): Promise<CertFiles> {
  const certFile = join(dir, `${name}.crt`);
  const keyFile = join(dir, `${name}.key`);
  await openssl([
    'req',
    '-x509',
    ...EC_KEY,
    '-keyout',
    keyFile,
    '-out',
    certFile,
    '-days',
    '2',
    '-subj',
    `/CN=${name}`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  return { certFile, keyFile };
}

async function makeLeaf(dir: string, name: string, ca: CertFiles, cn: string, extensions: string[]): Promise<CertFiles> {
  const certFile = join(dir, `${name}.crt`);
  const keyFile = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const ext = join(dir, `${name}.ext`);
  await openssl(['req', '-new', ...EC_KEY, '-keyout', keyFile, '-out', csr, '-subj', `/CN=${cn}`]);
  await writeFile(
    ext,
    `${['basicConstraints=CA:FALSE', 'keyUsage=critical,digitalSignature,keyEncipherment', ...extensions].join('\n')}\n`,
  );
  await openssl([
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.certFile,
    '-CAkey',
    ca.keyFile,
    // A random serial per leaf: -CAcreateserial shares one ca.srl file, which leaves signed in parallel race on.
    '-set_serial',
    `0x${randomBytes(8).toString('hex')}`,
    '-out',
    certFile,
    '-days',
    '2',
    '-extfile',
    ext,
  ]);
  return { certFile, keyFile };
}

/** A self-signed certificate for IP 127.0.0.1 and DNS localhost, written as `<dir>/tls.crt` and `<dir>/tls.key`. */
export async function writeSelfSignedCert(dir: string, commonName: string): Promise<CertFiles> {
  const certFile = join(dir, 'tls.crt');
  const keyFile = join(dir, 'tls.key');
  await openssl([
    'req',
    '-x509',
    ...EC_KEY,
    '-keyout',
    keyFile,
    '-out',
    certFile,
    '-days',
    '1',
    '-subj',
    `/CN=${commonName}`,
    '-addext',
    'subjectAltName=IP:127.0.0.1,DNS:localhost',
  ]);
  return { certFile, keyFile };
}

export async function createTestPki(): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), 'etcdbr-pki-'));
  try {
    const ca = await makeCa(dir, 'ca');
    const other = await makeCa(dir, 'other-ca');
    // etcd's gRPC gateway dials its own listener with the server cert, so that cert needs clientAuth too.
    const both = 'extendedKeyUsage=serverAuth,clientAuth';
    const [server, wrongNameServer, client, untrustedClient] = await Promise.all([
      makeLeaf(dir, 'server', ca, 'etcd-server', [both, 'subjectAltName=IP:127.0.0.1,DNS:localhost']),
      makeLeaf(dir, 'wrong-name', ca, 'wrong.example', [both, 'subjectAltName=DNS:wrong.example']),
      makeLeaf(dir, 'client', ca, 'etcdbr-client', ['extendedKeyUsage=clientAuth']),
      makeLeaf(dir, 'untrusted-client', other, 'etcdbr-client', ['extendedKeyUsage=clientAuth']),
    ]);
    return {
      dir,
      caFile: ca.certFile,
      otherCaFile: other.certFile,
      server,
      wrongNameServer,
      client,
      untrustedClient,
      cleanup: () => rm(dir, { recursive: true, force: true }),
    };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

export interface TlsEtcd extends TestEtcd {
  /** `https://127.0.0.1:<port>`: the TLS client listener. */
  httpsUrl: string;
  /** `clientUrl` stays a plain-HTTP listener (readiness checks and admin via etcdctl). */
}

export interface TlsEtcdOptions {
  /** Which server cert to serve; default the one valid for 127.0.0.1. */
  serverCert?: CertFiles;
  /** `--client-cert-auth` with the PKI's CA as trusted CA. */
  clientCertAuth: boolean;
}

/**
 * An etcd that serves TLS on an extra client listener. The plain listener startLocalEtcd creates stays
 * so its readiness probe and etcdctl keep working without certificates.
 */
export async function startTlsEtcd(pki: TestPki, opts: TlsEtcdOptions): Promise<TlsEtcd> {
  const cert = opts.serverCert ?? pki.server;
  let lastError: unknown;
  // The TLS port is picked outside startLocalEtcd's retry loop; retry here if someone took it meanwhile.
  for (let attempt = 0; attempt < 3; attempt++) {
    const clientPort = await freePort();
    const tlsPort = await freePort();
    const plain = `http://127.0.0.1:${clientPort}`;
    const httpsUrl = `https://127.0.0.1:${tlsPort}`;
    try {
      const etcd = await startTestEtcd({
        clientPort,
        extraArgs: [
          `--listen-client-urls=${plain},${httpsUrl}`,
          `--advertise-client-urls=${httpsUrl}`,
          `--cert-file=${cert.certFile}`,
          `--key-file=${cert.keyFile}`,
          ...(opts.clientCertAuth ? ['--client-cert-auth', `--trusted-ca-file=${pki.caFile}`] : []),
        ],
      });
      return Object.assign(etcd, { httpsUrl });
    } catch (err) {
      lastError = err;
      if (!/address already in use/.test(String(err))) throw err;
    }
  }
  throw lastError;
}

/** Runs etcdctl against `endpoint` (plain HTTP) and returns stdout. */
export async function etcdctl(endpoint: string, args: string[], auth?: { user: string; password: string }): Promise<string> {
  const { etcdctl: bin } = await etcdBinaries();
  if (!bin) throw new Error('etcdctl not found next to etcd or on PATH');
  const all = [`--endpoints=${endpoint}`, ...(auth ? [`--user=${auth.user}:${auth.password}`] : []), ...args];
  try {
    const { stdout } = await execFileAsync(bin, all, { env: { ...process.env, ETCDCTL_API: '3' } });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`etcdctl ${args.join(' ')} failed: ${e.stderr ?? e.message}`, { cause: err });
  }
}

/** Creates user root with `password` and turns authentication on. */
export async function enableEtcdAuth(endpoint: string, password: string): Promise<void> {
  await etcdctl(endpoint, ['user', 'add', `root:${password}`, '--interactive=false']);
  await etcdctl(endpoint, ['auth', 'enable']);
}
