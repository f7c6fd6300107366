/**
 * Delta back-pressure against a real etcd and a real S3 emulator whose writes the test holds (the faulty
 * store proxy's `hold-writes`): while a delta at the memory limit cannot be stored, the snapshotter stops
 * taking events instead of buffering them, and goes on from the next revision once the store takes the delta.
 */
import type { Etcd3 } from 'etcd3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { openS3Store } from '../../snapstore/src/providers/s3.js';
import { S3RVER_CREDENTIALS, startS3rver, type S3rverInstance } from '../../snapstore/test/support/s3rver.js';
import { startFaultyStoreProxy, type FaultyStoreProxy } from '../../e2e/support/faulty-store.js';
import { FakeClock } from '../../src/clock.js';
import { Metrics } from '../../src/metrics.js';
import { Snapshotter } from '../../src/snapshotter/snapshotter.js';
import { readDeltaEvents } from '../support/deltas.js';
import { startEtcdWithClient, type EtcdWithClient } from '../support/etcd.js';
import { ours } from '../support/etcd-client.js';
import { recordingLogger } from '../support/logger.js';
import { testSnapshotterConfig } from '../support/snapshotter.js';
import { waitFor } from '../support/wait.js';

const LIMIT = 16 * 1024;
/** Each put's value; its delta JSON (base64 value, key, revisions, time) is ~1.5 KiB. */
const VALUE = 'v'.repeat(1000);
const PAUSED = 'Delta memory limit reached while a delta is being saved; pausing the watch until it is stored';

describe('snapshotter back-pressure: a slow store pauses the watch instead of filling memory', () => {
  let etcdEnv: EtcdWithClient;
  let client: Etcd3;
  let s3: S3rverInstance;
  let proxy: FaultyStoreProxy;
  let store: SnapStore;

  beforeEach(async () => {
    etcdEnv = await startEtcdWithClient('etcdbr-backpressure-');
    client = etcdEnv.client;
    s3 = await startS3rver({ bucket: 'bp' });
    proxy = await startFaultyStoreProxy(s3.endpoint);
    store = await openS3Store(
      {
        provider: 'S3',
        container: 'bp',
        prefix: 'v2',
        maxParallelChunkUploads: 1,
        minChunkSize: 5 * 1024 * 1024,
        tempDir: etcdEnv.dir,
        endpointOverride: proxy.endpoint,
        credentials: S3RVER_CREDENTIALS,
      },
      {},
    );
  });

  afterEach(async () => {
    proxy.setMode('up');
    await store.close();
    await proxy.stop();
    await s3.stop();
    await etcdEnv.cleanup();
  });

  async function start(): Promise<{
    s: Snapshotter;
    logger: ReturnType<typeof recordingLogger>;
    stop: AbortController;
    running: Promise<void>;
  }> {
    const logger = recordingLogger();
    const s = await Snapshotter.create(
      // A long period on a fake clock: only the memory limit cuts deltas.
      testSnapshotterConfig({ deltaSnapshotPeriodMs: 60_000, deltaSnapshotMemoryLimit: LIMIT, compression: undefined }),
      {
        client: ours(client),
        store: async () => store,
        clock: new FakeClock(Date.now()),
        logger,
        metrics: new Metrics({ defaultMetrics: false }),
      },
    );
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    running.catch(() => undefined);
    await waitFor(async () => (await store.list()).find((x) => x.kind === 'Full'), 'the full snapshot');
    return { s, logger, stop, running };
  }

  const rev = async (): Promise<number> => Number((await client.get('foo').exec()).header.revision);
  const paused = (logger: ReturnType<typeof recordingLogger>): number => logger.lines.filter((l) => l.msg === PAUSED).length;

  it('holds at most the limit plus one event while a delta is stuck, and then stores every revision exactly once', async () => {
    const { s, logger, stop, running } = await start();
    const full = (await store.list()).find((x) => x.kind === 'Full')!;
    proxy.setMode('hold-writes');
    // About six limits' worth of events while the store takes nothing.
    for (let i = 0; i < 60; i++) await client.put(`/registry/bp/${i}`).value(VALUE);
    await waitFor(async () => proxy.held > 0 || undefined, 'the first delta upload to reach the store');
    await waitFor(async () => paused(logger) > 0 || undefined, 'the watch to pause');
    // Written while the watch is paused: only a watch opened again from the right revision sees them.
    for (let i = 60; i < 70; i++) await client.put(`/registry/bp/${i}`).value(VALUE);
    const last = await rev();
    proxy.setMode('up');
    // What is left below the limit is asked for as on-demand deltas until the stored deltas reach the last
    // write. The store is the witness, not the trigger's answer: the last delta cut at the limit can end
    // exactly at the last write (event sizes vary with the receive time's digits), and then every trigger
    // finds the buffer empty (CI run of 2026-11-28 waited 30 s for a trigger that had nothing left to store).
    const storedThrough = async (): Promise<number> =>
      Math.max(0, ...(await store.list()).filter((x) => x.kind === 'Incr').map((x) => x.lastRevision));
    await waitFor(async () => {
      await s.triggerDeltaSnapshot();
      return (await storedThrough()) >= last || undefined;
    }, 'deltas through the last write');
    stop.abort();
    await running;

    expect(paused(logger)).toBeGreaterThan(0);
    // One event's JSON is ~1.5 KiB; without back-pressure the stuck deltas would pile up to ~6 limits.
    expect(s.deltaMemoryPeakBytes).toBeGreaterThanOrEqual(LIMIT);
    expect(s.deltaMemoryPeakBytes).toBeLessThanOrEqual(LIMIT + 2048);

    const deltas = (await store.list()).filter((x) => x.kind === 'Incr').sort((a, b) => a.startRevision - b.startRevision);
    let next = full.lastRevision + 1;
    const revisions: number[] = [];
    for (const d of deltas) {
      expect(d.startRevision).toBe(next);
      const evs = await readDeltaEvents(store, d);
      expect(evs.at(-1)!.modRevision).toBe(d.lastRevision);
      revisions.push(...evs.map((e) => e.modRevision));
      next = d.lastRevision + 1;
    }
    // Every revision from the full to the last write, once each, in order.
    expect(revisions).toEqual(Array.from({ length: last - full.lastRevision }, (_, i) => full.lastRevision + 1 + i));
  });

  it('fails the run, as a compacted watch does, when etcd compacted the revision it was paused at', async () => {
    const { logger, running } = await start();
    proxy.setMode('hold-writes');
    for (let i = 0; i < 30; i++) await client.put(`/registry/bp/${i}`).value(VALUE);
    await waitFor(async () => paused(logger) > 0 || undefined, 'the watch to pause');
    const ourClient = ours(client);
    try {
      await ourClient.compact(await rev());
    } finally {
      ourClient.close();
    }
    proxy.setMode('up');
    await expect(running).rejects.toThrow(/watch from revision \d+ failed: etcd compacted that revision/);
  });
});
