import { cp, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { startLocalEtcd } from '../src/etcd/local-etcd.js';
import { freePort } from '../src/etcd/ports.js';
import { etcdBinaries } from '../test/support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../test/support/etcd-dump.js';
import { localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';
import { UPSTREAM_V023 } from '../test/support/fixtures.js';

const COMPAT = UPSTREAM_V023;

/** Follows etcd-wrapper's client: poll status every 100 ms, start on New, stop at Successful. */
async function wrapperHandshake(url: string, mode: 'full' | 'sanity'): Promise<string[]> {
  const seen: string[] = [];
  const deadline = Date.now() + 60_000;
  let started = false;
  while (Date.now() < deadline) {
    const status = await (await fetch(`${url}/initialization/status`)).text();
    if (seen.at(-1) !== status) seen.push(status);
    if (status === 'Successful') return seen;
    if (status === 'New') {
      if (started && seen.includes('Failed')) return seen;
      const r = await fetch(`${url}/initialization/start?mode=${mode}`);
      expect(r.status).toBe(200);
      started = true;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`initialization did not finish: ${seen.join(' -> ')}`);
}

describe('initialization through the etcd-wrapper protocol', () => {
  let dir: string;
  let sidecar: SidecarProcess | undefined;
  let clientPort: number;
  let peerPort: number;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-init-'));
    clientPort = await freePort();
    peerPort = await freePort();
    await writeFile(
      join(dir, 'etcd.conf.yaml'),
      [
        'name: etcd-main-0',
        `data-dir: ${join(dir, 'var', 'new.etcd')}`,
        `listen-client-urls: http://127.0.0.1:${clientPort}`,
        `listen-peer-urls: http://127.0.0.1:${peerPort}`,
        'advertise-client-urls:',
        `  etcd-main-0: [http://127.0.0.1:${clientPort}]`,
        'initial-advertise-peer-urls:',
        `  etcd-main-0: [http://127.0.0.1:${peerPort}]`,
        `initial-cluster: etcd-main-0=http://127.0.0.1:${peerPort}`,
        'initial-cluster-token: etcd-cluster',
        'initial-cluster-state: new',
        'snapshot-count: 75000',
        '',
      ].join('\n'),
    );
  });

  afterEach(async () => {
    await sidecar?.stop('SIGKILL');
    sidecar = undefined;
    await rm(dir, { recursive: true, force: true });
  });

  const flags = (store: string, extra: string[] = []) => [
    `--endpoints=http://127.0.0.1:${clientPort}`,
    ...localStoreFlags(store, join(dir, 'snaptmp')),
    `--data-dir=${join(dir, 'var', 'new.etcd')}`,
    `--restoration-temp-snapshots-dir=${join(dir, 'restoration.tmp')}`,
    '--name=etcd-main-0',
    `--initial-cluster=etcd-main-0=http://127.0.0.1:${peerPort}`,
    `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
    '--schedule=0 0 1 1 *',
    '--reelection-period=2s',
    ...extra,
  ];
  const env = () => ({ ETCD_CONF: join(dir, 'etcd.conf.yaml'), POD_NAME: 'etcd-main-0', POD_NAMESPACE: 'shoot--a--b' });

  it('restores a missing data dir from the store, serves /config, and etcd starts on it with the exact state', async () => {
    const store = join(dir, 'store');
    await cp(join(COMPAT, 'zlib', 'snapstore'), store, { recursive: true });
    const expected = JSON.parse(await readFile(join(COMPAT, 'zlib', 'expected.json'), 'utf8')) as EtcdDump;
    sidecar = await startSidecar(flags(store), env());
    const s = sidecar;
    expect(await (await fetch(`${s.url}/initialization/status`)).text()).toBe('New');
    const seen = await wrapperHandshake(s.url, 'full');
    expect(seen.at(-1), s.logs()).toBe('Successful');
    // Read-once: the next read is New again.
    expect(await (await fetch(`${s.url}/initialization/status`)).text()).toBe('New');

    const cfgRes = await fetch(`${s.url}/config`);
    expect(cfgRes.status).toBe(200);
    const cfg = parse(await cfgRes.text()) as Record<string, string>;
    expect(cfg.name).toBe('etcd-main-0');
    expect(cfg['data-dir']).toBe(join(dir, 'var', 'new.etcd'));
    expect(cfg['initial-advertise-peer-urls']).toBe(`http://127.0.0.1:${peerPort}`);
    expect(cfg['advertise-client-urls']).toBe(`http://127.0.0.1:${clientPort}`);
    expect(cfg['initial-cluster-state']).toBe('new');
    expect(cfg['snapshot-count']).toBe(75000);

    const etcd = await startLocalEtcd({
      binaries: await etcdBinaries(),
      dataDir: cfg['data-dir']!,
      name: 'etcd-main-0',
      clientPort,
      peerPort,
    });
    try {
      const got = await dumpEtcd(etcd.clientUrl);
      expect(got.revision).toBe(expected.revision);
      expect(got.kvs.map(({ lease: _l, ...r }) => r)).toEqual(expected.kvs.map(({ lease: _l, ...r }) => r));
      // Once etcd runs, the sidecar leads, becomes healthy and backs up.
      await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 200 ? true : undefined), 'healthz 200');
    } finally {
      await etcd.stop();
    }
  });

  it('with an empty store and no data dir, initialization succeeds without creating the data dir', async () => {
    const store = join(dir, 'empty-store');
    await mkdir(store, { recursive: true });
    sidecar = await startSidecar(flags(store), env());
    const seen = await wrapperHandshake(sidecar.url, 'sanity');
    expect(seen.at(-1), sidecar.logs()).toBe('Successful');
    await expect(stat(join(dir, 'var', 'new.etcd'))).rejects.toThrow();
  });

  it('a safe_guard of another namespace fails initialization (Failed once, then New)', async () => {
    const store = join(dir, 'store');
    await mkdir(join(dir, 'var'), { recursive: true });
    await writeFile(join(dir, 'var', 'safe_guard'), 'another-namespace');
    await mkdir(store, { recursive: true });
    sidecar = await startSidecar(flags(store), env());
    const seen = await wrapperHandshake(sidecar.url, 'full');
    expect(seen).toContain('Failed');
    expect(await (await fetch(`${sidecar.url}/initialization/status`)).text()).toBe('New');
    expect(sidecar.logs()).toMatch(/wrong ETCD volume is mounted/);
  });
});
