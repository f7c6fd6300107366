/**
 * createEtcdClient against real etcd processes serving TLS (with and without client-certificate auth)
 * and with authentication enabled: the etcd-connection flags --cert/--key/--cacert, --insecure-transport,
 * --insecure-skip-tls-verify, --etcd-username/--etcd-password (upstream `pkg/types/etcdconnection.go`).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDecompressStream, silentLogger, type SnapStore } from '@etcdbrctl/snapstore';
import { createEtcdClient, type EtcdClientOptions } from '../../src/etcd/index.js';
import type { EtcdClient } from '../../src/etcd/index.js';
import { memberStatus } from '../../src/cluster/leadership.js';
import { takeFullSnapshot } from '../../src/snapshotter/full-snapshot.js';
import { createTestPki, enableEtcdAuth, startTlsEtcd, type TestPki, type TlsEtcd } from '../support/certs.js';
import { openLocalStore } from '../support/local-store.js';

const ROOT_PASSWORD = 's3cr3t';

let pki: TestPki;
/** TLS with --client-cert-auth, server cert valid for 127.0.0.1. */
let mtls: TlsEtcd;
/** Server-side TLS only; its cert names only `wrong.example`. */
let wrongName: TlsEtcd;
/** TLS with --client-cert-auth and authentication enabled (user root). */
let authed: TlsEtcd;
const clients: EtcdClient[] = [];

beforeAll(async () => {
  pki = await createTestPki();
  [mtls, wrongName, authed] = await Promise.all([
    startTlsEtcd(pki, { clientCertAuth: true }),
    startTlsEtcd(pki, { clientCertAuth: false, serverCert: pki.wrongNameServer }),
    startTlsEtcd(pki, { clientCertAuth: true }),
  ]);
  await enableEtcdAuth(authed.clientUrl, ROOT_PASSWORD);
});

afterAll(async () => {
  for (const c of clients) c.close();
  await Promise.all([mtls, wrongName, authed].map((e) => e?.cleanup()));
  await pki?.cleanup();
});

/** What the server defaults give (`--insecure-transport=true`, skip-verify defaulted from it), plus overrides. */
async function client(overrides: Partial<EtcdClientOptions> & { endpoints: string[] }): Promise<EtcdClient> {
  const c = await createEtcdClient({ insecureTransport: true, insecureSkipVerify: true, connectionTimeoutMs: 5_000, ...overrides });
  clients.push(c);
  return c;
}

const mutual = () => ({ caFile: pki.caFile, certFile: pki.client.certFile, keyFile: pki.client.keyFile });
const strict = { insecureTransport: false, insecureSkipVerify: false };

async function roundTrip(c: EtcdClient, key: string): Promise<void> {
  await c.put(key, `value of ${key}`);
  expect((await c.get(key))?.toString()).toBe(`value of ${key}`);
}

/** The error of a read, as text (each call fails fast: grpc-js does not wait for a broken channel). */
async function failure(c: EtcdClient): Promise<string> {
  try {
    await c.get('probe', { timeoutMs: 10_000 });
  } catch (err) {
    return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  }
  throw new Error('expected the call to fail');
}

describe('etcd over TLS', () => {
  it('mutual TLS with CA verification: put/get, status and the snapshot stream', async () => {
    const c = await client({ endpoints: [mtls.httpsUrl], ...mutual(), ...strict });
    await roundTrip(c, 'mtls');
    const status = await memberStatus(c, 5_000);
    expect(status.leaderId).toMatch(/^[0-9a-f]+$/);

    const chunks: Buffer[] = [];
    for await (const m of await c.snapshot()) chunks.push(m.blob);
    const all = Buffer.concat(chunks);
    expect(all.length % 512).toBe(32);
    expect(createHash('sha256').update(all.subarray(0, -32)).digest().equals(all.subarray(-32))).toBe(true);
  });

  it('server defaults (skip-verify true) with TLS files also work', async () => {
    const c = await client({ endpoints: [mtls.httpsUrl], ...mutual() });
    await roundTrip(c, 'defaults');
  });

  it('an http:// endpoint is dialled with TLS once TLS files are given', async () => {
    // Upstream's clientv3 would drop TLS for an http:// endpoint; we upgrade it (documented deviation).
    const c = await client({ endpoints: [mtls.httpsUrl.replace('https://', 'http://')], ...mutual(), ...strict });
    await roundTrip(c, 'upgraded');
  });

  it('verification on: a server cert from another CA is rejected with a certificate error', async () => {
    const c = await client({ endpoints: [mtls.httpsUrl], ...mutual(), caFile: pki.otherCaFile, ...strict });
    expect(await failure(c)).toMatch(/certificate/i);
  });

  it('verification on: a server cert that does not name the host is rejected', async () => {
    const c = await client({ endpoints: [wrongName.httpsUrl], caFile: pki.caFile, ...strict });
    expect(await failure(c)).toMatch(/wrong\.example|altnames|certificate/i);
  });

  it('--insecure-skip-tls-verify accepts a server cert from an unknown CA (as Go InsecureSkipVerify)', async () => {
    const c = await client({
      endpoints: [mtls.httpsUrl],
      ...mutual(),
      caFile: pki.otherCaFile,
      insecureTransport: false,
      insecureSkipVerify: true,
    });
    await roundTrip(c, 'skip-ca');
  });

  it('--insecure-skip-tls-verify accepts a server cert for another name', async () => {
    const c = await client({ endpoints: [wrongName.httpsUrl], caFile: pki.caFile, insecureTransport: false, insecureSkipVerify: true });
    await roundTrip(c, 'skip-name');
  });

  it('--insecure-transport=false without TLS files: TLS with skip-verify reaches a server-auth-only etcd', async () => {
    const c = await client({ endpoints: [wrongName.clientUrl], insecureTransport: false, insecureSkipVerify: true });
    // The plain listener does not speak TLS: proves TLS was really attempted (a plaintext client would get
    // through). etcd's listener closes on a ClientHello it cannot place, which Node reports as a TLS error or,
    // when the close arrives as a reset, ECONNRESET.
    expect(await failure(c)).toMatch(/UNAVAILABLE|ssl|tls|wrong version|EPROTO|ECONNRESET/i);
    const d = await client({ endpoints: [wrongName.httpsUrl], insecureTransport: false, insecureSkipVerify: true });
    await roundTrip(d, 'no-files');
  });

  it('--client-cert-auth: no client cert, or one from another CA, is refused', async () => {
    const none = await client({ endpoints: [mtls.httpsUrl], caFile: pki.caFile, ...strict });
    expect(await failure(none)).toMatch(/certificate|handshake|UNAVAILABLE/i);
    const other = await client({
      endpoints: [mtls.httpsUrl],
      caFile: pki.caFile,
      certFile: pki.untrustedClient.certFile,
      keyFile: pki.untrustedClient.keyFile,
      ...strict,
    });
    expect(await failure(other)).toMatch(/certificate|handshake|UNAVAILABLE/i);
  });

  it('plain text against a TLS listener fails instead of hanging', async () => {
    const c = await client({ endpoints: [mtls.httpsUrl.replace('https://', 'http://')] });
    expect(await failure(c)).toMatch(/UNAVAILABLE|Connection|protocol|closed/i);
  });

  it('--cert without --key is a configuration error naming both flags', async () => {
    await expect(
      createEtcdClient({ endpoints: [mtls.httpsUrl], certFile: pki.client.certFile, ...strict, connectionTimeoutMs: 1_000 }),
    ).rejects.toThrow(/--cert and --key/);
    await expect(
      createEtcdClient({ endpoints: [mtls.httpsUrl], caFile: join(pki.dir, 'missing.crt'), ...strict, connectionTimeoutMs: 1_000 }),
    ).rejects.toThrow(/--cacert.*missing\.crt/);
  });

  it('a client cert without --cacert verifies the server against the default roots', async () => {
    // grpc-js's default roots: the GRPC_DEFAULT_SSL_ROOTS_FILE_PATH bundle when set, else Node's store (which
    // takes NODE_EXTRA_CA_CERTS). Both are read once per process, so each case runs in a child.
    const script = `
      import { createEtcdClient } from ${JSON.stringify(CLIENT_SOURCE)};
      const c = await createEtcdClient({ endpoints: [process.argv[1]], certFile: process.argv[2], keyFile: process.argv[3],
        insecureTransport: false, insecureSkipVerify: false, connectionTimeoutMs: 5000 });
      try { await c.put('sysroots', 'ok'); process.stdout.write(String(await c.get('sysroots'))); }
      catch (err) { process.stderr.write(String(err.message)); process.exitCode = 1; }
      finally { c.close(); }`;
    const run = (roots: string) =>
      new Promise<{ ok: boolean; out: string }>((resolve) => {
        execFile(
          process.execPath,
          ['--import', 'tsx', '--input-type=module', '-e', script, mtls.httpsUrl, pki.client.certFile, pki.client.keyFile],
          {
            cwd: ROOT,
            env: { ...process.env, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: roots, NODE_EXTRA_CA_CERTS: roots, NODE_NO_WARNINGS: '1' },
            timeout: 30_000,
          },
          (err, stdout, stderr) => resolve({ ok: !err, out: `${stdout}${stderr}` }),
        );
      });
    const [trusted, untrusted] = await Promise.all([run(pki.caFile), run(pki.otherCaFile)]);
    expect(trusted).toEqual({ ok: true, out: 'ok' });
    expect(untrusted.ok).toBe(false);
    expect(untrusted.out).toMatch(/certificate/i);
  });
});

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
// Run from source through tsx, so the child sees the same code as this test.
const CLIENT_SOURCE = fileURLToPath(new URL('../../src/etcd/index.ts', import.meta.url));

describe('etcd with authentication enabled (over mutual TLS)', () => {
  const root = () => ({ endpoints: [authed.httpsUrl], ...mutual(), ...strict, username: 'root', password: ROOT_PASSWORD });

  it('username and password work', async () => {
    const c = await client(root());
    await roundTrip(c, 'authed');
  });

  it('a wrong password fails with etcd authentication error', async () => {
    const c = await client({ ...root(), password: 'wrong' });
    expect(await failure(c)).toMatch(/authentication failed, invalid user ID or password/);
  });

  it('no credentials: the request is refused (permission denied / user empty)', async () => {
    const c = await client({ endpoints: [authed.httpsUrl], ...mutual(), ...strict });
    // With --client-cert-auth etcd takes the cert CN as user; `etcdbr-client` is no user, so nothing is allowed.
    expect(await failure(c)).toMatch(/permission denied|user name is empty|not found|invalid auth token/i);
  });

  it('a username without a password sends no credentials (upstream: both or none)', async () => {
    const c = await client({ endpoints: [authed.httpsUrl], ...mutual(), ...strict, username: 'root' });
    expect(await failure(c)).toMatch(/permission denied|user name is empty|not found|invalid auth token/i);
  });

  it('takeFullSnapshot works with auth and TLS and stores a verified snapshot', async () => {
    const c = await client(root());
    for (let i = 0; i < 20; i++) await c.put(`/registry/full/${i}`, 'x'.repeat(100));
    const rev = await c.currentRevision(5_000);
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-tls-full-'));
    let store: SnapStore | undefined;
    try {
      store = await openLocalStore(join(dir, 'store'), dir);
      const snap = await takeFullSnapshot(
        { client: c, store, compression: 'gzip', now: () => new Date(), logger: silentLogger },
        { isFinal: false, snapshotTimeoutMs: 60_000, connectionTimeoutMs: 5_000 },
      );
      expect(snap.lastRevision).toBe(rev);
      expect(snap.snapName).toMatch(/^Full-00000000-\d{8}-\d+\.gz$/);
      const [stored] = await store.list();
      expect(stored?.snapName).toBe(snap.snapName);
      const chunks: Buffer[] = [];
      for await (const chunk of (await store.fetch(stored!)).pipe(createDecompressStream('.gz', snap.snapName)))
        chunks.push(chunk as Buffer);
      const body = Buffer.concat(chunks);
      expect(body.length % 512).toBe(32);
      expect(createHash('sha256').update(body.subarray(0, -32)).digest().equals(body.subarray(-32))).toBe(true);
      // The keys written above are inside the stored bbolt file.
      expect(body.includes(Buffer.from('/registry/full/19'))).toBe(true);
    } finally {
      await store?.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('the same with a wrong password fails before anything is stored', async () => {
    const c = await client({ ...root(), password: 'nope' });
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-tls-full-'));
    let store: SnapStore | undefined;
    try {
      store = await openLocalStore(join(dir, 'store'), dir);
      await expect(
        takeFullSnapshot(
          { client: c, store, compression: undefined, now: () => new Date(), logger: silentLogger },
          { isFinal: false, snapshotTimeoutMs: 10_000, connectionTimeoutMs: 5_000 },
        ),
      ).rejects.toThrow(/authentication failed/);
      expect(await store.list()).toHaveLength(0);
    } finally {
      await store?.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
