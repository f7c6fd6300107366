import { cp, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { startLocalEtcd } from '../src/etcd/local-etcd.js';
import { freePort } from '../src/etcd/ports.js';
import { Etcd3 } from 'etcd3';
import { SINGLE_MEMBER_RAFT_ARGS, etcdBinaries } from '../test/support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../test/support/etcd-dump.js';
import { BIN, localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';
import { UPSTREAM_V023 } from '../test/support/fixtures.js';

const COMPAT = UPSTREAM_V023;

async function listStore(store: string): Promise<string[]> {
  return readdir(join(store, 'v2')).catch(() => []);
}

/** Runs bin/etcdbrctl to its end. */
function runCli(args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

/** Follows etcd-wrapper's client: poll status every 100 ms, start on New, stop at Successful. */
async function wrapperHandshake(url: string, mode: 'full' | 'sanity'): Promise<string[]> {
  const seen: string[] = [];
  const startAnswers: number[] = [];
  await waitFor(
    async () => {
      const status = await (await fetch(`${url}/initialization/status`)).text();
      if (seen.at(-1) !== status) seen.push(status);
      if (status === 'Successful') return true;
      if (status === 'New') {
        if (startAnswers.length > 0 && seen.includes('Failed')) return true;
        startAnswers.push((await fetch(`${url}/initialization/start?mode=${mode}`)).status);
      }
      return undefined;
    },
    'initialization to finish',
    60_000,
    100,
  ).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}: ${seen.join(' -> ')}`);
  });
  expect(startAnswers.filter((code) => code !== 200)).toEqual([]);
  return seen;
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

  it.each([
    ['right after etcd stops (the term ends for the initialization)', false],
    ['after the sidecar saw etcd unreachable (a single member writes its buffer then)', true],
  ])(
    'a restore on /initialization/start %s never mixes two histories: the latest backups restore to the live etcd',
    async (_when, waitUnreachable) => {
      const store = join(dir, 'store');
      await mkdir(store, { recursive: true });
      const dataDir = join(dir, 'var', 'new.etcd');
      // Deltas only when asked (or at the end of a term), so writes stay buffered in the sidecar.
      sidecar = await startSidecar(flags(store, ['--delta-snapshot-period=1h']), env());
      const s = sidecar;
      expect((await wrapperHandshake(s.url, 'sanity')).at(-1), s.logs()).toBe('Successful');
      const binaries = await etcdBinaries();
      const startEtcd = () => startLocalEtcd({ binaries, dataDir, name: 'etcd-main-0', clientPort, peerPort });
      let etcd = await startEtcd();
      const client = new Etcd3({ hosts: etcd.clientUrl });
      try {
        await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 200 ? true : undefined), 'healthz 200');
        await waitFor(async () => (await listStore(store)).find((n) => n.startsWith('Full-')), 'initial full');
        // One transaction, one watch response: once anything of it is buffered (a delta is marked as
        // required), all of it is.
        await client
          .if('/registry/before/0', 'Create', '==', 0)
          .then(...Array.from({ length: 20 }, (_, i) => client.put(`/registry/before/${i}`).value(`v${i}`)))
          .commit();
        const metricsText = async () => (await fetch(`${s.url}/metrics`)).text();
        await waitFor(
          async () => ((await metricsText()).includes('etcdbr_snapshot_required{kind="Incr"} 1') ? true : undefined),
          'writes buffered',
        );
        const beforeOutage = await dumpEtcd(etcd.clientUrl);

        // The volume is lost while etcd is down; the wrapper asks for initialization, which restores.
        await etcd.stop();
        await rm(dataDir, { recursive: true, force: true });
        if (waitUnreachable)
          await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 503 ? true : undefined), 'healthz 503');
        expect((await wrapperHandshake(s.url, 'full')).at(-1), s.logs()).toBe('Successful');

        etcd = await startEtcd();
        // Nothing captured was lost: the buffered writes reached the store before the restore.
        expect(await dumpEtcd(etcd.clientUrl)).toEqual(beforeOutage);

        // New writes on the restored etcd go on from the restored revision, into the same chain.
        await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 200 ? true : undefined), 'healthz 200 again');
        for (let i = 0; i < 10; i++) await client.put(`/registry/after/${i}`).value(`w${i}`);
        const live = await dumpEtcd(etcd.clientUrl);
        await waitFor(async () => {
          await fetch(`${s.url}/snapshot/delta`);
          const last = (await listStore(store)).map((n) => Number(n.split('-')[2])).reduce((a, b) => Math.max(a, b), 0);
          return last === live.revision ? true : undefined;
        }, `a delta up to revision ${live.revision}`);

        // The invariant: the latest backups restore to exactly what the live etcd holds.
        const check = join(dir, 'check');
        const checkPeer = `http://127.0.0.1:${await freePort()}`;
        const r = await runCli([
          'restore',
          '--storage-provider=Local',
          `--store-container=${store}`,
          `--data-dir=${join(check, 'data')}`,
          `--restoration-temp-snapshots-dir=${join(check, 'tmp')}`,
          '--name=default',
          `--initial-cluster=default=${checkPeer}`,
          `--initial-advertise-peer-urls=${checkPeer}`,
        ]);
        expect(r.code, r.stderr).toBe(0);
        const verify = await startLocalEtcd({
          binaries,
          dataDir: join(check, 'data'),
          name: 'default',
          extraArgs: [...SINGLE_MEMBER_RAFT_ARGS],
        });
        try {
          expect(await dumpEtcd(verify.clientUrl)).toEqual(live);
        } finally {
          await verify.stop();
        }
      } finally {
        client.close();
        await etcd.stop();
      }
    },
    180_000,
  );

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
