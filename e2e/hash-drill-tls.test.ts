/**
 * `verify --against-endpoints` over TLS, against a real etcd 3.5 serving a self-signed certificate: the
 * members' certificates are checked against `--cacert`, refused without it (naming the cause), and accepted
 * unchecked only with `--insecure-skip-tls-verify` (a test cluster's certificate; the flag was missing, so a
 * drill against such a cluster could not run at all).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestPki, startTlsEtcd, type TestPki, type TlsEtcd } from '../test/support/certs.js';
import { runCli } from './support/cli-process.js';
import { localStoreFlags, startSidecar, waitFor } from './support/sidecar.js';

describe('verify --against-endpoints over TLS', () => {
  let pki: TestPki;
  let etcd: TlsEtcd;
  let dir: string;
  let storeDir: string;
  let head: number;
  const cleanups: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    pki = await createTestPki();
    etcd = await startTlsEtcd(pki, { clientCertAuth: false });
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-drill-tls-'));
    storeDir = join(dir, 'store');
    // The sidecar writes the chain over the plain listener; only the drill speaks TLS.
    const sidecar = await startSidecar([
      `--endpoints=${etcd.clientUrl}`,
      ...localStoreFlags(storeDir, join(dir, 'tmp')),
      '--schedule=0 0 1 1 *',
      '--delta-snapshot-period=1s',
    ]);
    cleanups.push(() => sidecar.stop());
    for (let i = 0; i < 5; i++) {
      const r = await fetch(`${sidecar.url}/snapshot/delta`, { method: 'POST' });
      expect(r.status).toBeLessThan(500);
    }
    head = await waitFor(async () => {
      const text = await (await fetch(`${sidecar.url}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith('etcdbr_snapshot_latest_revision{kind="Full"} '));
      const rev = line === undefined ? 0 : Number(line.split(' ')[1]);
      return rev > 0 ? rev : undefined;
    }, 'the start-up full snapshot');
    await sidecar.stop();
  }, 120_000);

  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
    await etcd?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
    if (pki) await rm(pki.dir, { recursive: true, force: true });
  });

  const verify = (...flags: string[]) =>
    runCli(['verify', ...localStoreFlags(storeDir, join(dir, 'cli-tmp')), `--against-endpoints=${etcd.httpsUrl}`, ...flags], {}, cleanups);

  it('refuses the self-signed certificate without a CA, naming the cause', async () => {
    const r = await verify();
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/certificate/i);
  });

  it('proves the chain with --cacert', async () => {
    const r = await verify(`--cacert=${pki.caFile}`);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
    expect(r.stdout).toContain(`proven: the store gives back what etcd holds at revision ${head}`);
  });

  it('proves the chain with --insecure-skip-tls-verify and no CA', async () => {
    const r = await verify('--insecure-skip-tls-verify');
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
    expect(r.stdout).toContain(`proven: the store gives back what etcd holds at revision ${head}`);
  });
});
