/**
 * Stopping the snapshotter supervisor because leadership moved (abort reason LeadershipLost, as the sidecar
 * gives it) leaves the buffered events to the next leader instead of writing them: the next leader's snapshotter may already have read
 * the store, and two deltas from the same revision would overlap. A shutdown (any other reason) still
 * writes them. Either way the next leader's catch-up makes the chain whole.
 */
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger, type SnapStore } from '@etcdbrctl/snapstore';
import { FakeClock } from '../../src/clock.js';
import { Metrics } from '../../src/metrics.js';
import { ExponentialBackoff } from '../../src/snapshotter/backoff.js';
import { GarbageCollector } from '../../src/snapshotter/garbage-collector.js';
import { LeadershipLost, type Snapshotter } from '../../src/snapshotter/snapshotter.js';
import { superviseSnapshotter } from '../../src/snapshotter/supervisor.js';
import { startEtcdWithClient, type EtcdWithClient } from '../support/etcd.js';
import { openLocalStore } from '../support/local-store.js';
import { createTestSnapshotter } from '../support/snapshotter.js';
import { waitFor } from '../support/wait.js';

describe('snapshotter stop: leadership lost vs shutdown', () => {
  let etcdEnv: EtcdWithClient;
  let client: Etcd3;
  let store: SnapStore;

  beforeEach(async () => {
    etcdEnv = await startEtcdWithClient('etcdbr-leadership-lost-');
    client = etcdEnv.client;
    store = await openLocalStore(join(etcdEnv.dir, 'store'), etcdEnv.dir);
  });

  afterEach(async () => {
    await store.close();
    await etcdEnv.cleanup();
  });

  /** A snapshotter on a clock that never moves: its periodic delta never fires, only the stop can write a delta. */
  function make(metrics: Metrics, clock = new FakeClock(Date.now())): Promise<Snapshotter> {
    return createTestSnapshotter({ client, store, metrics, clock }, { deltaSnapshotPeriodMs: 600_000 });
  }

  /**
   * The sidecar's leader work on an empty store: the supervisor takes a full snapshot and runs; one put is
   * buffered; then the work is stopped with `reason`. Returns the put's revision.
   */
  async function runAndStop(reason: unknown): Promise<number> {
    const metrics = new Metrics({ defaultMetrics: false });
    // Supervisor backoff, GC period and snapshot timers all on one clock the test never advances.
    const clock = new FakeClock(Date.now());
    const stop = new AbortController();
    const running = superviseSnapshotter(
      {
        createSnapshotter: () => make(metrics, clock),
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
        logger: silentLogger,
        metrics,
      },
      stop.signal,
    );
    await waitFor(async () => (await store.list()).some((x) => x.kind === 'Full'), 'the full snapshot');
    const res = await client.put('buffered').value('v');
    // etcdbr_snapshot_required{kind="Incr"} turns 1 when the watch hands an event to the buffer.
    await waitFor(
      async () => (await metrics.snapshotRequired.get()).values.some((v) => v.labels.kind === 'Incr' && v.value === 1),
      'the event buffered',
    );
    stop.abort(reason);
    await running;
    return Number(res.header.revision);
  }

  it('leadership lost: the buffered events are not written; the next leader’s catch-up stores them once', async () => {
    const revision = await runAndStop(new LeadershipLost('another member leads'));
    expect((await store.list()).filter((x) => x.kind === 'Incr')).toEqual([]);

    const next = await make(new Metrics({ defaultMetrics: false }));
    expect(await next.catchUpWithDeltas(new AbortController().signal)).toBe(true);
    const deltas = (await store.list()).filter((x) => x.kind === 'Incr');
    expect(deltas.map((d) => [d.startRevision, d.lastRevision])).toEqual([[revision, revision]]);
  });

  it('a delta is not written once another member leads (asked right before the write); no failure is counted', async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    let leads: boolean | undefined = true;
    const s = await createTestSnapshotter(
      { client, store, metrics, clock: new FakeClock(Date.now()), stillLeads: async () => leads },
      { deltaSnapshotPeriodMs: 600_000 },
    );
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    running.catch(() => undefined);
    await waitFor(() => s.chain.prevFull, 'the full snapshot');
    const first = Number((await client.put('while-leading').value('v')).header.revision);
    await waitFor(async () => ((await s.triggerDeltaSnapshot())?.lastRevision === first ? true : undefined), 'a delta while leading');
    // etcd could not be asked: written, as upstream would.
    leads = undefined;
    const second = Number((await client.put('unknown').value('v')).header.revision);
    await waitFor(async () => ((await s.triggerDeltaSnapshot())?.lastRevision === second ? true : undefined), 'a delta when unsure');
    leads = false;
    await client.put('after-the-move').value('v');
    await waitFor(
      async () => ((await metrics.snapshotRequired.get()).values.some((v) => v.labels.kind === 'Incr' && v.value === 1) ? true : undefined),
      'the event buffered',
    );
    await expect(s.triggerDeltaSnapshot()).rejects.toThrow(LeadershipLost);
    await expect(running).rejects.toThrow(LeadershipLost);
    expect((await store.list()).filter((x) => x.kind === 'Incr').map((d) => d.lastRevision)).toEqual([first, second]);
    expect((await metrics.snapshotterFailure.get()).values.reduce((n, v) => n + v.value, 0)).toBe(0);
  });

  it('shutdown: the buffered events are written as one last delta', async () => {
    const revision = await runAndStop(undefined);
    const deltas = (await store.list()).filter((x) => x.kind === 'Incr');
    expect(deltas.map((d) => [d.startRevision, d.lastRevision])).toEqual([[revision, revision]]);
  });
});
