/**
 * `etcdbrctl server` as a process against a real etcd and real stores, under faults: a failing and an
 * unreachable object store, etcd restarting underneath, plus the snapshotter cases
 * (deltas on schedule and on the memory limit, deltas off, a
 * repeated final full, a failing store's backoff) that e2e/server.test.ts does not cover.
 * After every fault the store must hold a chain that etcd's own history confirms: from the newest full,
 * contiguous deltas covering every later revision exactly once.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openSnapStore, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { startLocalEtcd, type LocalEtcd } from '../src/etcd/local-etcd.js';
import { S3RVER_CREDENTIALS, startS3rver, type S3rverInstance } from '../snapstore/test/support/s3rver.js';
import { readDeltaEvents } from '../test/support/deltas.js';
import { etcdBinaries, startEtcdWithClient, type EtcdWithClient, type TestEtcd } from '../test/support/etcd.js';
import { openLocalStore } from '../test/support/local-store.js';
import { startFaultyStoreProxy, type FaultyStoreProxy } from './support/faulty-store.js';
import { localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';

/**
 * A daily schedule whose last tick was a minute ago: the next tick is ~24 h away, so a restarted
 * snapshotter with a full from this run is inside the window and catches up with a delta instead of
 * taking another full (upstream IsFullSnapshotRequiredAtStartup). Cron runs in the local time zone.
 */
function dailyScheduleJustPassed(): string {
  const d = new Date(Date.now() - 60_000);
  return `${d.getMinutes()} ${d.getHours()} * * *`;
}

const BACKOFF = ['--backoff-multiplier=2', '--backoff-attempt-limit=0', '--backoff-threshold-time=1s'];

const eventLine = (type: string, key: Buffer, value: Buffer, mod: number | string) =>
  `${type} ${key.toString('hex')} ${value.toString('hex')} ${mod}`;

/** etcd's own history of (fromRev, toRev], through a watch of every key. */
async function etcdHistory(client: Etcd3, fromRev: number, toRev: number): Promise<string[]> {
  if (toRev <= fromRev) return [];
  const lines: string[] = [];
  const watcher = await client
    .watch()
    .inRange({ start: Buffer.from([0]), end: Buffer.from([0]) })
    .startRevision(String(fromRev + 1))
    .create();
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`watch did not reach revision ${toRev}`)), 15_000);
      watcher.on('data', (res) => {
        for (const ev of res.events) {
          if (Number(ev.kv.mod_revision) > toRev) continue;
          lines.push(eventLine(ev.type === 'Delete' ? 'DELETE' : 'PUT', ev.kv.key, ev.kv.value ?? Buffer.alloc(0), ev.kv.mod_revision));
          if (Number(ev.kv.mod_revision) >= toRev) {
            clearTimeout(timer);
            resolve();
          }
        }
      });
    });
  } finally {
    await watcher.cancel();
  }
  return lines;
}

/**
 * From the newest full snapshot, the deltas chain gaplessly (start = previous last + 1), each delta's
 * events lie in its name's range and end at its last revision, no revision is in two deltas, the chain
 * reaches `upTo`, and the events are exactly etcd's history after the full.
 */
async function expectContiguousChain(store: SnapStore, client: Etcd3, upTo: number): Promise<{ full: Snapshot; deltas: Snapshot[] }> {
  const list = (await store.list()).filter((s) => !s.isChunk);
  const full = list.filter((s) => s.kind === 'Full').at(-1);
  expect(full, 'a full snapshot').toBeDefined();
  const deltas = list.filter((s) => s.kind === 'Incr' && s.startRevision > full!.lastRevision);
  let next = full!.lastRevision + 1;
  const ours: string[] = [];
  for (const d of deltas) {
    expect(d.startRevision, `${d.snapName} starts right after its predecessor`).toBe(next);
    const evs = await readDeltaEvents(store, d);
    expect(evs.length).toBeGreaterThan(0);
    expect(evs[0]!.modRevision).toBeGreaterThanOrEqual(d.startRevision);
    expect(evs.at(-1)!.modRevision).toBe(d.lastRevision);
    ours.push(...evs.map((e) => eventLine(e.type, e.key, e.value, e.modRevision)));
    next = d.lastRevision + 1;
  }
  expect(next - 1, 'the chain reaches the last write').toBe(upTo);
  expect(ours).toEqual(await etcdHistory(client, full!.lastRevision, upTo));
  return { full: full!, deltas };
}

/** Sum of etcdbr_snapshotter_failure over all label sets. */
async function failureCount(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^etcdbr_snapshotter_failure(?:\{[^}]*\})? (\S+)$/.exec(line);
    if (m) sum += Number(m[1]);
  }
  return sum;
}

/** waitMs of every "backing off" log line, in order. */
function backoffWaits(logs: string): number[] {
  const waits: number[] = [];
  for (const line of logs.split('\n')) {
    if (!line.includes('backing off')) continue;
    try {
      const rec = JSON.parse(line) as { waitMs?: number };
      if (typeof rec.waitMs === 'number') waits.push(rec.waitMs);
    } catch {
      /* not a JSON log line */
    }
  }
  return waits;
}

const healthStatus = async (url: string) => (await fetch(`${url}/healthz`)).status;

describe('etcdbrctl server: snapshotter behaviour and faults (process, real etcd)', () => {
  let etcdEnv: EtcdWithClient;
  let etcd: TestEtcd;
  let restarted: LocalEtcd | undefined;
  let client: Etcd3;
  let dir: string;
  let sidecar: SidecarProcess | undefined;
  const cleanups: Array<() => Promise<unknown>> = [];

  beforeEach(async () => {
    etcdEnv = await startEtcdWithClient('etcdbr-e2e-faults-');
    ({ etcd, client, dir } = etcdEnv);
  });

  afterEach(async (ctx) => {
    // The sidecar's log is the only way to see why a process-level case failed.
    if (ctx.task.result?.state === 'fail' && sidecar)
      process.stderr.write(`--- sidecar log (tail) ---\n${sidecar.logs().slice(-20_000)}\n`);
    await sidecar?.stop('SIGKILL');
    sidecar = undefined;
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
    await restarted?.stop();
    restarted = undefined;
    await etcdEnv.cleanup();
  });

  async function localStore(): Promise<SnapStore> {
    const store = await openLocalStore(join(dir, 'store'), dir);
    cleanups.push(() => store.close());
    return store;
  }

  const localFlags = (extra: string[] = []) => [
    `--endpoints=${etcd.clientUrl}`,
    ...localStoreFlags(join(dir, 'store'), join(dir, 'tmp')),
    `--schedule=${dailyScheduleJustPassed()}`,
    '--delta-snapshot-period=1s',
    '--garbage-collection-period=1h',
    '--reelection-period=2s',
    ...BACKOFF,
    ...extra,
  ];
  const rev = async () => Number((await client.get('foo').exec()).header.revision);
  const objects = async (store: SnapStore) => (await store.list()).filter((s) => !s.isChunk);

  async function startHealthy(flags: string[], env: NodeJS.ProcessEnv = {}): Promise<SidecarProcess> {
    sidecar = await startSidecar(flags, env);
    const s = sidecar;
    await waitFor(async () => ((await healthStatus(s.url)) === 200 ? true : undefined), 'healthz 200');
    return s;
  }

  it('14, 17, 19: deltas per period, none when idle; restart catches up with a delta; final full once, then a full at restart', async () => {
    const store = await localStore();
    // Debug level: the snapshotter logs each idle delta period, the event the idle check below waits for.
    let s = await startHealthy(localFlags(['--log-level=5']));
    const full = await waitFor(async () => (await objects(store)).find((x) => x.kind === 'Full'), 'initial full');

    for (let i = 0; i < 5; i++) await client.put(`/registry/a/${i}`).value(`v${i}`);
    await client.delete().key('/registry/a/2');
    const r1 = await rev();
    await waitFor(async () => ((await objects(store)).some((x) => x.kind === 'Incr' && x.lastRevision === r1) ? true : undefined), 'delta');
    const { deltas } = await expectContiguousChain(store, client, r1);
    expect(deltas[0]!.startRevision).toBe(full.lastRevision + 1);

    // Idle: periods pass (the snapshotter says so for each), nothing is written.
    const count = (await objects(store)).length;
    const mark = s.logs().length;
    const idle = (): number => s.logs().slice(mark).split('No events received to save snapshot. Skipping delta snapshot.').length - 1;
    await waitFor(() => idle() >= 2, 'two idle delta periods');
    expect((await objects(store)).length).toBe(count);

    // 17: a restart with a recent full (inside the schedule window) and writes made while the sidecar
    // was down takes an initial delta, no full.
    expect(await s.stop('SIGTERM')).toBe(0);
    for (let i = 0; i < 3; i++) await client.put(`/registry/while-down/${i}`).value('v');
    const r2 = await rev();
    s = await startHealthy(localFlags());
    await waitFor(async () => ((await objects(store)).some((x) => x.lastRevision === r2) ? true : undefined), 'initial delta');
    await expectContiguousChain(store, client, r2);
    expect((await objects(store)).filter((x) => x.kind === 'Full').map((x) => x.snapName)).toEqual([full.snapName]);
    const count2 = (await objects(store)).length;

    const first = await fetch(`${s.url}/snapshot/full?final=true`);
    expect(first.status).toBe(200);
    const finalSnap = (await first.json()) as { snapName: string; isFinal: boolean; lastRevision: number };
    expect(finalSnap.isFinal).toBe(true);
    expect(finalSnap.snapName).toMatch(/^Full-00000000-\d{8}-\d+\.gz\.final$/);
    expect(finalSnap.lastRevision).toBe(r2);
    const again = await fetch(`${s.url}/snapshot/full?final=true`);
    expect(again.status).toBe(200);
    expect(((await again.json()) as { snapName: string }).snapName).toBe(finalSnap.snapName);
    const finals = (await objects(store)).filter((x) => x.isFinal);
    expect(finals.map((x) => x.snapName)).toEqual([finalSnap.snapName]);
    expect((await objects(store)).length).toBe(count2 + 1);

    // 17: after a final full, the next start always takes a full snapshot.
    expect(await s.stop('SIGTERM')).toBe(0);
    await startHealthy(localFlags());
    const after = await waitFor(
      async () => (await objects(store)).find((x) => x.kind === 'Full' && !x.isFinal && x.snapName !== full.snapName),
      'a full after the final one',
    );
    expect(after.lastRevision).toBe(r2);
  });

  it('15: the memory limit cuts deltas long before the period', async () => {
    const store = await localStore();
    await startHealthy(localFlags(['--delta-snapshot-period=60s', '--delta-snapshot-memory-limit=4096']));
    await waitFor(async () => (await objects(store)).find((x) => x.kind === 'Full'), 'initial full');
    for (let i = 0; i < 12; i++) await client.put(`/registry/big/${i}`).value('x'.repeat(1000));
    await waitFor(async () => ((await objects(store)).filter((x) => x.kind === 'Incr').length >= 3 ? true : undefined), '3 deltas');
    // Cut by the limit, not by the 60 s period: the snapshotter says so for each of them.
    const cuts = sidecar!.logs().split('Delta events memory crossed the memory limit; taking a delta snapshot').length - 1;
    expect(cuts).toBeGreaterThanOrEqual((await objects(store)).filter((x) => x.kind === 'Incr').length);
    for (const d of (await objects(store)).filter((x) => x.kind === 'Incr')) {
      // ~1.4 KiB of JSON per event: a cut happens at the first event reaching 4 KiB.
      expect((await readDeltaEvents(store, d)).length).toBeLessThanOrEqual(3);
    }
  });

  it('16: --delta-snapshot-period=0 takes only fulls and answers /snapshot/delta with 500', async () => {
    const store = await localStore();
    const s = await startHealthy(localFlags(['--delta-snapshot-period=0']));
    await waitFor(async () => (await objects(store)).find((x) => x.kind === 'Full'), 'initial full');
    for (let i = 0; i < 5; i++) await client.put(`/registry/nodelta/${i}`).value('v');
    // No delta timer and no watch run at all: the snapshotter itself says delta snapshotting is disabled.
    const delta = await fetch(`${s.url}/snapshot/delta`);
    expect(delta.status).toBe(500);
    expect(await delta.text()).toMatch(/Delta snapshotting is disabled/);
    const full = await fetch(`${s.url}/snapshot/full`);
    expect(full.status).toBe(200);
    expect(((await full.json()) as { lastRevision: number }).lastRevision).toBe(await rev());
    expect((await objects(store)).filter((x) => x.kind === 'Full')).toHaveLength(2);
    expect((await objects(store)).filter((x) => x.kind === 'Incr')).toHaveLength(0);
  });

  it('survives etcd restarting underneath: later writes reach deltas, the chain stays contiguous', async () => {
    const store = await localStore();
    const s = await startHealthy(localFlags());
    await waitFor(async () => (await objects(store)).find((x) => x.kind === 'Full'), 'initial full');
    for (let i = 0; i < 5; i++) await client.put(`/registry/before/${i}`).value('v');
    const before = await rev();
    await waitFor(async () => ((await objects(store)).some((x) => x.lastRevision === before) ? true : undefined), 'delta before');

    // Events still buffered when etcd goes away must end up in exactly one delta.
    for (let i = 0; i < 3; i++) await client.put(`/registry/buffered/${i}`).value('v');
    const clientPort = Number(new URL(etcd.clientUrl).port);
    const peerPort = Number(new URL(etcd.peerUrl).port);
    await etcd.stop();
    // Leadership is checked every 2 s: it notices etcd is gone and reports unhealthy.
    await waitFor(async () => ((await healthStatus(s.url)) === 503 ? true : undefined), 'healthz 503 while etcd is down', 15_000);
    expect(s.child.exitCode).toBeNull();

    restarted = await startLocalEtcd({ binaries: await etcdBinaries(), dataDir: etcd.dataDir, clientPort, peerPort });
    await waitFor(async () => ((await healthStatus(s.url)) === 200 ? true : undefined), 'healthz 200 after the restart', 30_000);
    for (let i = 0; i < 5; i++) await client.put(`/registry/after/${i}`).value('v');
    await client.delete().key('/registry/before/0');
    const after = await rev();
    await waitFor(async () => ((await objects(store)).some((x) => x.lastRevision === after) ? true : undefined), 'delta after', 30_000);
    const { full } = await expectContiguousChain(store, client, after);
    // The restarted snapshotter caught up from its last delta instead of starting over.
    expect(full.lastRevision).toBeLessThan(before);

    // A quick restart, likely between two leadership checks: the watch reconnects from where it was.
    for (let i = 0; i < 3; i++) await client.put(`/registry/quick/${i}`).value('v');
    await restarted.stop();
    restarted = await startLocalEtcd({ binaries: await etcdBinaries(), dataDir: etcd.dataDir, clientPort, peerPort });
    for (let i = 3; i < 6; i++) await client.put(`/registry/quick/${i}`).value('v');
    const quick = await rev();
    await waitFor(
      async () => ((await objects(store)).some((x) => x.lastRevision === quick) ? true : undefined),
      'delta after a quick restart',
      30_000,
    );
    expect((await expectContiguousChain(store, client, quick)).full.snapName).toBe(full.snapName);
    expect(s.child.exitCode).toBeNull();
  });

  describe('with an S3 store (s3rver) behind a fault proxy', () => {
    let s3: S3rverInstance;
    let proxy: FaultyStoreProxy;
    let store: SnapStore;
    let env: NodeJS.ProcessEnv;

    beforeEach(async () => {
      s3 = await startS3rver();
      cleanups.push(() => s3.stop());
      proxy = await startFaultyStoreProxy(s3.endpoint);
      cleanups.push(() => proxy.stop());
      const credFile = join(dir, 's3.json');
      await writeFile(credFile, JSON.stringify(S3RVER_CREDENTIALS));
      env = { AWS_APPLICATION_CREDENTIALS_JSON: credFile };
      // The test reads the bucket directly, not through the proxy.
      store = await openSnapStore({
        provider: 'S3',
        container: s3.bucket,
        prefix: 'v2',
        endpointOverride: s3.endpoint,
        maxParallelChunkUploads: 3,
        minChunkSize: 5 * 1024 * 1024,
        tempDir: dir,
        credentials: S3RVER_CREDENTIALS,
      });
      cleanups.push(() => store.close());
    });

    const s3Flags = () =>
      localFlags()
        .map((f) => {
          if (f === '--storage-provider=Local') return '--storage-provider=S3';
          if (f.startsWith('--store-container=')) return `--store-container=${s3.bucket}`;
          return f;
        })
        .concat([`--store-endpoint-override=${proxy.endpoint}`]);

    it('21 + outages: failures count and back off, the sidecar keeps running, the chain is contiguous afterwards', async () => {
      // 1. A store that refuses every write (acceptance 21, second half).
      proxy.setMode('deny-writes');
      const s = await startHealthy(s3Flags(), env);
      await waitFor(async () => ((await failureCount(s.url)) >= 2 ? true : undefined), 'two snapshotter failures', 20_000);
      expect(proxy.faulted['deny-writes']).toBeGreaterThanOrEqual(2);
      expect(await store.list()).toHaveLength(0);
      // The second back-off is logged after the supervisor's next etcd probe, which follows the failure count.
      const waits = await waitFor(() => {
        const w = backoffWaits(s.logs());
        return w.length >= 2 ? w : undefined;
      }, 'two back-off lines');
      // Upstream's sequence with multiplier 2, attempt limit 0, threshold 1 s: 2 s, then the threshold.
      expect(waits.slice(0, 2)).toEqual([2000, 1000]);
      expect(s.logs()).toMatch(/AccessDenied|Access Denied/);

      // 2. The store accepts writes again: the initial full, then deltas.
      proxy.setMode('up');
      await waitFor(async () => ((await store.list()).some((x) => x.kind === 'Full') ? true : undefined), 'full after recovery', 20_000);
      for (let i = 0; i < 5; i++) await client.put(`/registry/s3/a${i}`).value('v');
      const r1 = await rev();
      await waitFor(async () => ((await store.list()).some((x) => x.lastRevision === r1) ? true : undefined), 'first deltas');

      // 3. A network outage: the delta in flight keeps retrying, writes go on, the process stays up.
      proxy.setMode('down');
      const downBefore = proxy.faulted.down;
      for (let i = 0; i < 10; i++) await client.put(`/registry/s3/b${i}`).value(`v${i}`);
      // The sidecar keeps trying the store through the outage.
      await waitFor(() => proxy.faulted.down >= downBefore + 3, 'three store requests refused by the outage', 20_000);
      expect(s.child.exitCode).toBeNull();
      expect(await healthStatus(s.url)).toBe(200);
      proxy.setMode('up');
      const r2 = await rev();
      await waitFor(
        async () => ((await store.list()).some((x) => x.lastRevision === r2) ? true : undefined),
        'deltas after the outage',
        40_000,
      );

      // 4. Writes refused in the middle of the chain: the loop fails, restarts with backoff and, once
      //    the store takes writes again, catches up from the last stored delta.
      const failuresBefore = await failureCount(s.url);
      proxy.setMode('deny-writes');
      for (let i = 0; i < 5; i++) await client.put(`/registry/s3/c${i}`).value('v');
      await waitFor(
        async () => ((await failureCount(s.url)) > failuresBefore ? true : undefined),
        'a failure while writes are refused',
        20_000,
      );
      for (let i = 0; i < 5; i++) await client.put(`/registry/s3/d${i}`).value('v');
      proxy.setMode('up');
      await client.delete().key('/registry/s3/a0');
      const r3 = await rev();
      await waitFor(
        async () => ((await store.list()).some((x) => x.lastRevision === r3) ? true : undefined),
        'deltas after writes are allowed again',
        40_000,
      );
      await waitFor(async () => ((await healthStatus(s.url)) === 200 ? true : undefined), 'healthz 200');

      const { full } = await expectContiguousChain(store, client, r3);
      // One full from step 2 carries the whole chain: the restarts caught up with deltas.
      expect(full.lastRevision).toBeLessThan(r1);
      expect(s.child.exitCode).toBeNull();
    });
  });
});
