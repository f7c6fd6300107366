/**
 * A leader that must start with a full snapshot first backs up, as deltas, the revisions since the store's
 * newest snapshot, so no point in time between them is lost; only where etcd compacted that history away is
 * there a gap, logged and counted (etcdbr_snapshot_chain_gaps_total).
 */
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { compareSnapshots, openSnapStore, silentLogger, type SnapStore } from '@etcdbrctl/snapstore';
import { FakeClock } from '../../src/clock.js';
import { Metrics } from '../../src/metrics.js';
import { ExponentialBackoff } from '../../src/snapshotter/backoff.js';
import { GarbageCollector } from '../../src/snapshotter/garbage-collector.js';
import { LeadershipLost, type Snapshotter } from '../../src/snapshotter/snapshotter.js';
import { superviseSnapshotter } from '../../src/snapshotter/supervisor.js';
import { etcdClient } from '../support/etcd-client.js';
import { startEtcdWithClient, type EtcdWithClient } from '../support/etcd.js';
import { openLocalStore } from '../support/local-store.js';
import { createTestSnapshotter } from '../support/snapshotter.js';
import { waitFor } from '../support/wait.js';
import { gatedStore } from '../support/gated-store.js';
import { planRestore } from '../../src/restorer/plan.js';
import { recordingLogger } from '../restorer/support.js';
import { S3RVER_CREDENTIALS, startS3rver, type S3rverInstance } from '../../snapstore/test/support/s3rver.js';
import { startFaultyStoreProxy, type FaultyStoreProxy } from '../../e2e/support/faulty-store.js';

describe('a new leader continues the chain before a full snapshot required at start-up', () => {
  let etcdEnv: EtcdWithClient;
  let client: Etcd3;
  let store: SnapStore;

  beforeEach(async () => {
    etcdEnv = await startEtcdWithClient('etcdbr-chain-continuity-');
    client = etcdEnv.client;
    store = await openLocalStore(join(etcdEnv.dir, 'store'), etcdEnv.dir);
  });

  afterEach(async () => {
    await store.close();
    await etcdEnv.cleanup();
  });

  const rev = async () => Number((await client.get('x').exec()).header.revision);

  /** A final full at the current revision (its successor must start with a full), then writes only etcd has. */
  async function finalFullThenWrites(): Promise<{ finalAt: number; head: number }> {
    const s = await createTestSnapshotter({ client, store }, { deltaSnapshotPeriodMs: 600_000 });
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await waitFor(() => s.chain.prevFull, 'the first full');
    await client.put('before-final').value('v');
    const final = await s.triggerFullSnapshot(true);
    stop.abort();
    await running;
    for (let i = 0; i < 5; i++) await client.put(`after-final/${i}`).value(`v${i}`);
    return { finalAt: final.lastRevision, head: await rev() };
  }

  /** The leader's work until its first full snapshot after `after` is stored; returns its metrics. */
  function leadUntilFullAfter(after: number): Promise<Metrics> {
    return lead(
      async () => ((await store.list()).some((x) => x.kind === 'Full' && x.lastRevision > after) ? true : undefined),
      'the start-up full',
    );
  }

  /** The leader's work until `done` says so; returns its metrics. */
  async function lead(
    done: () => Promise<true | undefined>,
    what: string,
    opts: { stillLeads?: () => Promise<boolean | undefined>; logger?: ReturnType<typeof recordingLogger>; store?: SnapStore } = {},
  ): Promise<Metrics> {
    const metrics = new Metrics({ defaultMetrics: false });
    const clock = new FakeClock(Date.now());
    const logger = opts.logger ?? silentLogger;
    const make = (): Promise<Snapshotter> =>
      createTestSnapshotter(
        { client, store: opts.store ?? store, metrics, clock, ...(opts.stillLeads ? { stillLeads: opts.stillLeads } : {}) },
        { deltaSnapshotPeriodMs: 600_000 },
      );
    const stop = new AbortController();
    const running = superviseSnapshotter(
      {
        createSnapshotter: make,
        createGarbageCollector: (s) =>
          new GarbageCollector(
            { policy: 'Exponential', maxBackups: 7, deltaRetentionMs: 0, periodMs: 3_600_000 },
            {
              store: async () => store,
              latestSnapshotRevision: () => s.chain.prevSnapshot?.lastRevision ?? 0,
              clock,
              logger: silentLogger,
              metrics,
            },
          ),
        probeEtcd: async () => undefined,
        setHealthy: () => undefined,
        onActiveSnapshotter: () => undefined,
        backoff: new ExponentialBackoff(),
        schedule: '0 0 1 1 *',
        clock,
        logger,
        metrics,
      },
      stop.signal,
    );
    try {
      await waitFor(done, what);
    } finally {
      stop.abort();
      await running;
    }
    return metrics;
  }

  it('the revisions since the final full are stored as a delta before the new full', async () => {
    const { finalAt, head } = await finalFullThenWrites();
    const metrics = await leadUntilFullAfter(finalAt);
    const deltas = (await store.list()).filter((x) => x.kind === 'Incr' && x.startRevision > finalAt); // (the one before the final full holds its buffered write)
    expect(deltas.map((d) => [d.startRevision, d.lastRevision])).toEqual([[finalAt + 1, head]]);
    expect((await metrics.snapshotChainGaps.get()).values[0]?.value ?? 0).toBe(0);
  });

  it('the full after the catch-up goes on with the chain: writes between the two are in a delta too', async () => {
    const { finalAt, head } = await finalFullThenWrites();
    // The catch-up's delta is held in its save while more writes land: after the catch-up's target, before the full.
    const gated = gatedStore(store);
    const { reached, release } = gated.holdNext('Incr');
    let between = 0;
    void reached.then(async () => {
      for (let i = 0; i < 3; i++) await client.put(`between/${i}`).value('v');
      between = await rev();
      release();
    });
    await lead(
      async () => ((await store.list()).some((x) => x.kind === 'Full' && x.lastRevision > finalAt) ? true : undefined),
      'the start-up full',
      { store: gated.store },
    );
    expect(between).toBeGreaterThan(head);
    const full = (await store.list())
      .filter((x) => x.kind === 'Full')
      .sort(compareSnapshots)
      .at(-1)!;
    expect(full.lastRevision).toBeGreaterThanOrEqual(between);
    // The stop wrote the watch's events as a last delta: it starts right after the catch-up's, below the full.
    const deltas = (await store.list()).filter((x) => x.kind === 'Incr' && x.startRevision > finalAt).sort(compareSnapshots);
    expect(deltas.map((d) => d.startRevision)).toEqual([finalAt + 1, head + 1]);
    const listing = await store.list();
    for (let revision = head + 1; revision <= between; revision++) expect(planRestore(listing, { revision }).targetRevision).toBe(revision);
  });

  it('leadership moved on while catching up: neither the delta nor a full is written, and no gap is counted', async () => {
    const { finalAt } = await finalFullThenWrites();
    const before = (await store.list()).map((x) => x.snapName);
    const logger = recordingLogger();
    const metrics = await lead(
      async () => (logger.messages.includes('snapshotter not started: another member leads now') ? true : undefined),
      'the supervisor to see another leader',
      { stillLeads: async () => false, logger },
    );
    expect((await store.list()).map((x) => x.snapName)).toEqual(before);
    expect((await store.list()).some((x) => x.lastRevision > finalAt)).toBe(false);
    expect((await metrics.snapshotChainGaps.get()).values[0]?.value ?? 0).toBe(0);
  });

  it('where etcd compacted them away: a full snapshot, the gap logged and counted', async () => {
    const { finalAt, head } = await finalFullThenWrites();
    const compacting = etcdClient(etcdEnv.etcd.clientUrl);
    await compacting.compact(head).finally(() => compacting.close());
    const metrics = await leadUntilFullAfter(finalAt);
    expect((await store.list()).filter((x) => x.kind === 'Incr' && x.startRevision > finalAt)).toEqual([]);
    expect((await metrics.snapshotChainGaps.get()).values[0]?.value).toBe(1);
  });
});

describe('a catch-up the store refuses is tried again, not replaced by a full snapshot', () => {
  let etcdEnv: EtcdWithClient;
  let client: Etcd3;
  let s3: S3rverInstance;
  let proxy: FaultyStoreProxy;
  let store: SnapStore;

  beforeEach(async () => {
    etcdEnv = await startEtcdWithClient('etcdbr-chain-retry-');
    client = etcdEnv.client;
    s3 = await startS3rver();
    proxy = await startFaultyStoreProxy(s3.endpoint);
    store = await openSnapStore({
      provider: 'S3',
      container: s3.bucket,
      prefix: 'v2',
      endpointOverride: proxy.endpoint,
      maxParallelChunkUploads: 3,
      minChunkSize: 5 * 1024 * 1024,
      tempDir: etcdEnv.dir,
      credentials: S3RVER_CREDENTIALS,
    });
  });

  afterEach(async () => {
    await store?.close();
    await proxy?.stop();
    await s3?.stop();
    await etcdEnv?.cleanup();
  });

  it('refused writes during the catch-up: retried after the backoff, then stored as a delta; no full in its place, no gap', async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    const clock = new FakeClock(Date.now());
    const logger = recordingLogger();
    const make = (): Promise<Snapshotter> => createTestSnapshotter({ client, store, metrics, clock }, { deltaSnapshotPeriodMs: 600_000 });
    // The chain so far: a full, then writes only etcd has.
    const first = await make();
    const stopFirst = new AbortController();
    const running = first.run(stopFirst.signal, true);
    await waitFor(() => first.chain.prevFull, 'the first full');
    stopFirst.abort(new LeadershipLost('moved'));
    await running;
    for (let i = 0; i < 5; i++) await client.put(`k${i}`).value('v');
    const head = Number((await client.get('k0').exec()).header.revision);

    proxy.setMode('deny-writes');
    const stop = new AbortController();
    const supervising = superviseSnapshotter(
      {
        createSnapshotter: make,
        createGarbageCollector: (s) =>
          new GarbageCollector(
            { policy: 'Exponential', maxBackups: 7, deltaRetentionMs: 0, periodMs: 3_600_000 },
            {
              store: async () => store,
              latestSnapshotRevision: () => s.chain.prevSnapshot?.lastRevision ?? 0,
              clock,
              logger: silentLogger,
              metrics,
            },
          ),
        probeEtcd: async () => undefined,
        setHealthy: () => undefined,
        onActiveSnapshotter: () => undefined,
        backoff: new ExponentialBackoff({ multiplier: 2, attemptLimit: 0, thresholdMs: 1000 }),
        schedule: '0 0 1 1 *',
        clock,
        logger,
        metrics,
      },
      stop.signal,
    );
    try {
      // Each retry waits for the backoff on the test's clock.
      await waitFor(async () => {
        await clock.advanceAsync(2_000);
        return logger.warnings.filter((m) => m.includes('retrying after the backoff')).length >= 2 || undefined;
      }, 'two refused catch-ups');
      expect(proxy.faulted['deny-writes']).toBeGreaterThanOrEqual(2);
      proxy.setMode('up');
      await waitFor(async () => {
        await clock.advanceAsync(2_000);
        return (await store.list()).some((x) => x.kind === 'Incr' && x.lastRevision === head) || undefined;
      }, 'the catch-up delta once the store takes writes');
    } finally {
      stop.abort();
      await supervising;
    }
    // The delta continues the first full; a full the start-up decision asks for (the yearly schedule's window) comes after it.
    const list = await store.list();
    const firstFull = first.chain.prevFull!;
    expect(list.filter((x) => x.kind === 'Incr').map((x) => [x.startRevision, x.lastRevision])).toEqual([
      [firstFull.lastRevision + 1, head],
    ]);
    expect(list.filter((x) => x.kind === 'Full' && x.lastRevision !== firstFull.lastRevision && x.lastRevision < head)).toEqual([]);
    expect((await metrics.snapshotChainGaps.get()).values[0]?.value ?? 0).toBe(0);
  });
});
