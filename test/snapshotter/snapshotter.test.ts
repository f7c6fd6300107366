import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Etcd3 } from 'etcd3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { compareSnapshots, createDecompressStream, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { FakeClock } from '../../src/clock.js';
import { Metrics } from '../../src/metrics.js';
import { etcdClient } from '../support/etcd-client.js';
import type { Snapshotter, SnapshotterConfig, StoredSnapshotInfo } from '../../src/snapshotter/snapshotter.js';
import { readDeltaEvents } from '../support/deltas.js';
import { planRestore } from '../../src/restorer/plan.js';
import { gatedStore } from '../support/gated-store.js';
import { startEtcdWithClient, type EtcdWithClient } from '../support/etcd.js';
import { openLocalStore } from '../support/local-store.js';
import { createTestSnapshotter } from '../support/snapshotter.js';
import { waitFor } from '../support/wait.js';

/** The delta period of these tests; the snapshotter runs on a FakeClock, so a period passes only when the test says so. */
const PERIOD_MS = 1000;

/** Every revision after the full appears in exactly one delta, in order, and deltas chain gaplessly. */
async function expectContiguousChain(store: SnapStore, upTo: number): Promise<DeltaEvent[]> {
  const list = (await store.list()).filter((s) => !s.isChunk);
  const fulls = list.filter((s) => s.kind === 'Full');
  const full = fulls.at(-1)!;
  const deltas = list.filter((s) => s.kind === 'Incr' && s.startRevision > full.lastRevision);
  let expectStart = full.lastRevision + 1;
  const all: DeltaEvent[] = [];
  for (const d of deltas) {
    expect(d.startRevision).toBe(expectStart);
    const evs = await readDeltaEvents(store, d);
    expect(evs.length).toBeGreaterThan(0);
    expect(evs.at(-1)!.modRevision).toBe(d.lastRevision);
    for (const e of evs) expect(e.modRevision).toBeGreaterThanOrEqual(d.startRevision);
    all.push(...evs);
    expectStart = d.lastRevision + 1;
  }
  expect(expectStart - 1).toBe(upTo);
  const revs = [...new Set(all.map((e) => e.modRevision))];
  for (let i = 0; i < revs.length; i++) expect(revs[i]).toBe(full.lastRevision + 1 + i);
  return all;
}

describe('snapshotter against a real etcd and a Local store', () => {
  let etcdEnv: EtcdWithClient;
  let client: Etcd3;
  let store: SnapStore;
  let metrics: Metrics;
  let clock: FakeClock;

  beforeEach(async () => {
    clock = new FakeClock(Date.now());
    etcdEnv = await startEtcdWithClient('etcdbr-snapshotter-');
    client = etcdEnv.client;
    store = await openLocalStore(join(etcdEnv.dir, 'store'), etcdEnv.dir);
    metrics = new Metrics({ defaultMetrics: false });
  });

  afterEach(async () => {
    await store.close();
    await etcdEnv.cleanup();
  });

  function make(overrides: Partial<SnapshotterConfig> = {}): Promise<Snapshotter> {
    return createTestSnapshotter({ client, store, metrics, clock }, { deltaSnapshotPeriodMs: PERIOD_MS, ...overrides });
  }

  const full = () => waitFor(async () => (await store.list()).find((x) => x.kind === 'Full'), 'the full snapshot');
  /** etcdbr_snapshot_required{kind="Incr"} turns 1 when the watch hands an event to the delta buffer. */
  const buffered = () =>
    waitFor(
      async () => (await metrics.snapshotRequired.get()).values.some((v) => v.labels.kind === 'Incr' && v.value === 1),
      'an event in the delta buffer',
    );

  const rev = async () => Number((await client.get('foo').exec()).header.revision);

  it('a full snapshot stores the buffered events as a delta first: points in time before it stay restorable', async () => {
    const s = await make();
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    const first = await full();
    for (let i = 0; i < 5; i++) await client.put(`before-full/${i}`).value('v');
    const last = await rev();
    await waitFor(() => s.bufferedRevision === last || undefined, 'the writes in the delta buffer');
    const second = await s.triggerFullSnapshot(false);
    const incr = (await store.list()).filter((x) => x.kind === 'Incr');
    expect(incr.map((d) => [d.startRevision, d.lastRevision])).toEqual([[first.lastRevision + 1, last]]);
    expect(second.lastRevision).toBeGreaterThanOrEqual(last);
    stop.abort();
    await running;
  });

  it('the deltas go on across a full snapshot: revisions written while it is taken are in a delta too (issue 38)', async () => {
    // The delta the full stores first is held in its save while five writes land: they come after that delta
    // and at or before the full's revision. Until issue 38 the watch closed for the full and opened again after
    // it, so those revisions were only in the full's end state: no point in time between them restorable.
    const gated = gatedStore(store);
    const s = await createTestSnapshotter({ client, store: gated.store, metrics, clock }, { deltaSnapshotPeriodMs: PERIOD_MS });
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    const older = await full();
    await client.put('before-full').value('v');
    const beforeFull = await rev();
    await waitFor(() => s.bufferedRevision === beforeFull || undefined, 'the write in the delta buffer');
    const { reached, release } = gated.holdNext('Incr');
    const newer = s.triggerFullSnapshot(false);
    await reached;
    for (let i = 0; i < 5; i++) await client.put(`while-full/${i}`).value(`v${i}`);
    const written = await rev();
    release();
    const newerFull = await newer;
    expect(newerFull.lastRevision).toBeGreaterThanOrEqual(written);
    await client.put('after-full').value('v');
    const last = await rev();
    await waitFor(async () => {
      await clock.advanceAsync(PERIOD_MS);
      return (await store.list()).some((x) => x.kind === 'Incr' && x.lastRevision === last);
    }, 'a delta through the write after the full');
    stop.abort();
    await running;

    const listing = await store.list();
    const deltas = listing.filter((x) => x.kind === 'Incr').sort(compareSnapshots);
    // One chain of deltas from the older full to the last write, the second one starting below the newer full.
    expect(deltas.map((d) => [d.startRevision, d.lastRevision])).toEqual([
      [older.lastRevision + 1, beforeFull],
      [beforeFull + 1, last],
    ]);
    const events = (await readDeltaEvents(store, deltas[1]!)).map((e) => [e.modRevision, e.key.toString()]);
    expect(events).toEqual([...Array.from({ length: 5 }, (_, i) => [beforeFull + 1 + i, `while-full/${i}`]), [last, 'after-full']]);
    // Every revision in between is restorable: from the older full below the newer one, from the newer at and after it.
    for (let revision = beforeFull + 1; revision <= last; revision++) {
      const plan = planRestore(listing, { revision });
      expect(plan.base?.snapName).toBe(revision < newerFull.lastRevision ? older.snapName : newerFull.snapName);
      expect(plan.targetRevision).toBe(revision);
    }
  });

  it('a full snapshot at start after a catch-up goes on with the chain: revisions written in between are in a delta', async () => {
    // The first sidecar: a full, then a delta.
    const first = await make();
    const stop1 = new AbortController();
    const run1 = first.run(stop1.signal, true);
    const older = await full();
    await client.put('first').value('v');
    stop1.abort();
    await run1;
    // The next term (as the supervisor runs it): catch up, then a full snapshot the start-up decision requires.
    await client.put('caught-up').value('v');
    const s = await make();
    expect(await s.catchUpWithDeltas(new AbortController().signal)).toBe(true);
    const caughtUp = await rev();
    for (let i = 0; i < 4; i++) await client.put(`between/${i}`).value('v');
    const stop = new AbortController();
    const running = s.run(stop.signal, true, { chainCaughtUp: true });
    const newer = await waitFor(
      async () => (await store.list()).find((x) => x.kind === 'Full' && x.snapName !== older.snapName),
      'the start-up full',
    );
    await client.put('after').value('v');
    const last = await rev();
    await waitFor(async () => {
      await clock.advanceAsync(PERIOD_MS);
      return (await store.list()).some((x) => x.kind === 'Incr' && x.lastRevision === last);
    }, 'a delta through the write after the full');
    stop.abort();
    await running;
    const listing = await store.list();
    expect(newer.lastRevision).toBeGreaterThan(caughtUp);
    // Until this was fixed the start-up full began a new chain at its revision: caughtUp+1 .. newer-1 were in no delta.
    for (let revision = caughtUp + 1; revision <= last; revision++) {
      expect(planRestore(listing, { revision }).targetRevision, `revision ${revision}`).toBe(revision);
    }
  });

  it('takes a full snapshot, then gapless deltas per period; an idle period writes nothing', async () => {
    const s = await make();
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await full();
    for (let i = 0; i < 20; i++) await client.put(`k${i}`).value(`v${i}`);
    await client.delete().key('k3');
    await client.put(Buffer.from([0, 0xff])).value(Buffer.alloc(0));
    const last = await rev();
    // No period has passed yet: nothing but the full is stored.
    expect((await store.list()).filter((x) => x.kind === 'Incr')).toEqual([]);
    // One delta period at a time until a delta reaches the last write (the watch may still be delivering).
    await waitFor(async () => {
      await clock.advanceAsync(PERIOD_MS);
      return (await store.list()).some((x) => x.lastRevision === last && x.kind === 'Incr');
    }, 'a delta through the last write');
    const count = (await store.list()).length;
    for (let i = 0; i < 3; i++) {
      await clock.advanceAsync(PERIOD_MS);
      // Queued behind the period's own save, so that one has finished when this returns; nothing was buffered.
      expect(await s.triggerDeltaSnapshot()).toBeUndefined();
    }
    expect((await store.list()).length).toBe(count);
    stop.abort();
    await running;
    const events = await expectContiguousChain(store, last);
    const del = events.find((e) => e.type === 'DELETE');
    expect(del?.key.toString()).toBe('k3');
    const bin = events.at(-1)!;
    expect([...bin.key]).toEqual([0, 0xff]);
    expect(bin.value.length).toBe(0);
    expect(await metrics.registry.getSingleMetricAsString('etcdbr_snapshot_latest_revision')).toContain(
      `etcdbr_snapshot_latest_revision{kind="Incr"} ${last}`,
    );
  });

  it('cuts a delta as soon as the buffer reaches the memory limit', async () => {
    const s = await make({ deltaSnapshotPeriodMs: 60_000, deltaSnapshotMemoryLimit: 4096 });
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await full();
    for (let i = 0; i < 30; i++) await client.put(`big${i}`).value('x'.repeat(1000));
    await waitFor(async () => (await store.list()).filter((x) => x.kind === 'Incr').length >= 5, 'five deltas cut at the memory limit');
    stop.abort();
    await running;
    // The stop flushed the rest as one last delta, so the chain reaches the last write.
    await expectContiguousChain(store, await rev());
    for (const d of (await store.list()).filter((x) => x.kind === 'Incr')) {
      // Each event is ~1.4 KiB of JSON; a cut happens at the first event reaching 4 KiB, so at most 3.
      expect((await readDeltaEvents(store, d)).length).toBeLessThanOrEqual(3);
    }
  });

  it('cuts at the memory limit only between revisions, so a transaction is never split across deltas', async () => {
    const s = await make({ deltaSnapshotPeriodMs: 60_000, deltaSnapshotMemoryLimit: 4096 });
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await full();
    // One revision of 12 puts of ~1.4 KiB of JSON each: three times the limit in a single transaction.
    const puts = Array.from({ length: 12 }, (_, i) => client.put(`txn${i}`).value('t'.repeat(1000)));
    await client
      .if('txn0', 'Version', '==', 0)
      .then(...puts)
      .commit();
    const txnRev = await rev();
    await client.put('after').value('a');
    await waitFor(
      async () => (await store.list()).some((x) => x.kind === 'Incr' && x.lastRevision >= txnRev),
      'a delta through the transaction',
    );
    stop.abort();
    await running;
    const events = await expectContiguousChain(store, await rev());
    expect(events.filter((e) => e.modRevision === txnRev)).toHaveLength(12);
    const holding: number[] = [];
    for (const d of (await store.list()).filter((x) => x.kind === 'Incr')) {
      const revs = (await readDeltaEvents(store, d)).map((e) => e.modRevision);
      if (revs.includes(txnRev)) holding.push(revs.filter((r) => r === txnRev).length);
    }
    expect(holding).toEqual([12]);
  });

  it('writes a final full snapshot once per revision', async () => {
    const s = await make();
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await full();
    await client.put('a').value('b');
    const first = await s.triggerFullSnapshot(true);
    expect(first.isFinal).toBe(true);
    expect(first.snapName.endsWith('.gz.final')).toBe(true);
    const again = await s.triggerFullSnapshot(true);
    expect(again.snapName).toBe(first.snapName);
    expect((await store.list()).filter((x) => x.isFinal)).toHaveLength(1);
    stop.abort();
    await running;
  });

  it('an on-demand delta holds every write etcd acknowledged before the call, not only what the watch delivered', async () => {
    // Found by CI: e2e/server.test.ts's POST-less GET /snapshot/delta right after five puts returned a delta
    // that ended one revision short, the last event still on its way from etcd.
    const s = await make();
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    const base = await full();
    // Many writes at once keep the watch behind etcd when the request comes.
    await Promise.all(Array.from({ length: 300 }, (_, i) => client.put(`burst/${i}`).value('x'.repeat(1024))));
    const last = await rev();
    const delta = await s.triggerDeltaSnapshot();
    expect(delta).toMatchObject({ kind: 'Incr', startRevision: base.lastRevision + 1, lastRevision: last });
    await expectContiguousChain(store, last);
    stop.abort();
    await running;
  });

  it('a final full right after the last delta, in the same second and at its revision, is named to sort after it', async () => {
    // Found by the interop suite (e2e/interop/server.test.ts): named in the same second, the final full tied
    // with the delta in upstream's order (last revision, then creation second, unstable sort) and the Go
    // restore replayed the delta onto the full a second time ("mismatched event revision").
    const s = await make();
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await full();
    for (let i = 0; i < 5; i++) await client.put(`f${i}`).value('x');
    const last = await rev();
    const delta = await waitFor(async () => {
      await buffered();
      const d = await s.triggerDeltaSnapshot();
      return d !== undefined && d.lastRevision === last ? d : undefined;
    }, 'a delta through the last write');
    const final = await s.triggerFullSnapshot(true);
    expect(final.lastRevision).toBe(last);
    expect(Math.floor(final.createdOn.getTime() / 1000)).toBe(Math.floor(delta.createdOn.getTime() / 1000) + 1);
    expect(compareSnapshots(delta, final)).toBeLessThan(0);
    // A second non-final full at the same revision in the same second gets a name of its own too.
    const again = await s.triggerFullSnapshot(false);
    expect(compareSnapshots(final, again)).toBeLessThan(0);
    stop.abort();
    await running;
  });

  it('takes a non-final full again on an idle etcd, so the newest full stays within its schedule (upstream since #804)', async () => {
    const s = await make();
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    const first = await full();
    clock.advance(1000);
    const again = await s.triggerFullSnapshot(false);
    expect(again.lastRevision).toBe(first.lastRevision);
    expect(again.snapName).not.toBe(first.snapName);
    expect((await store.list()).filter((x) => x.kind === 'Full')).toHaveLength(2);
    stop.abort();
    await running;
  });

  it('sets etcdbr_snapshot_size_bytes to the stored size of each new snapshot, and after a restart from the listing', async () => {
    const s = await make();
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await full();
    await client.put('a').value('b'.repeat(1000));
    await buffered();
    await s.triggerDeltaSnapshot();
    stop.abort();
    await running;
    const listed = await store.list();
    const size = async (m: Metrics, kind: string) => (await m.snapshotSizeBytes.get()).values.find((v) => v.labels.kind === kind)?.value;
    expect(await size(metrics, 'Full')).toBe(listed.find((x) => x.kind === 'Full')!.sizeBytes);
    expect(await size(metrics, 'Incr')).toBe(listed.find((x) => x.kind === 'Incr')!.sizeBytes);
    const restarted = new Metrics({ defaultMetrics: false });
    await createTestSnapshotter({ client, store, metrics: restarted, clock }, { deltaSnapshotPeriodMs: PERIOD_MS });
    expect(await size(restarted, 'Full')).toBe(await size(metrics, 'Full'));
    expect(await size(restarted, 'Incr')).toBe(await size(metrics, 'Incr'));
  });

  it('fails the run when its watch revision was compacted (the supervisor then takes a full snapshot)', async () => {
    const s1 = await make();
    const stop1 = new AbortController();
    const r1 = s1.run(stop1.signal, true);
    await full();
    stop1.abort();
    await r1;
    for (let i = 0; i < 5; i++) await client.put(`c${i}`).value('v');
    const compacting = etcdClient(etcdEnv.etcd.clientUrl);
    await compacting.compact(await rev()).finally(() => compacting.close());
    const s2 = await make();
    await expect(s2.catchUpWithDeltas(new AbortController().signal)).rejects.toThrow(/watch from revision/);
    const stop2 = new AbortController();
    await expect(s2.run(stop2.signal, false)).rejects.toThrow(/watch from revision/);
  });

  it('on stop writes the buffered events as one last delta', async () => {
    const s = await make({ deltaSnapshotPeriodMs: 60_000 });
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await full();
    for (let i = 0; i < 5; i++) await client.put(`late${i}`).value('v');
    await buffered();
    expect((await store.list()).filter((x) => x.kind === 'Incr')).toEqual([]);
    stop.abort();
    await running;
    await expectContiguousChain(store, await rev());
  });

  it('tells onSnapshot the uncompressed size of each stored file and the full the chain builds on', async () => {
    const seen: Array<{ snap: Snapshot; info: StoredSnapshotInfo }> = [];
    const s = await createTestSnapshotter(
      { client, store, metrics, clock, onSnapshot: (snap, info) => void seen.push({ snap, info }) },
      { deltaSnapshotPeriodMs: 60_000 },
    );
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await waitFor(() => seen.length === 1, 'the full snapshot');
    for (let i = 0; i < 5; i++) await client.put(`sized${i}`).value('v'.repeat(200));
    // Stopping writes the buffered events as the last delta (the stop waits for the watch to deliver the rest).
    await buffered();
    stop.abort();
    await running;
    const [full, ...deltas] = seen;
    expect(full!.snap.kind).toBe('Full');
    expect(full!.info.baseFull).toBe(full!.snap);
    expect(deltas.length).toBeGreaterThan(0);
    for (const d of deltas) {
      expect(d.snap.kind).toBe('Incr');
      expect(d.info.baseFull).toBe(full!.snap);
    }
    const listed = await store.list();
    for (const { snap: stored, info } of seen) {
      // Fetch through the listing: new snapshots carry no store prefix.
      const snap = listed.find((x) => x.snapName === stored.snapName)!;
      let bytes = 0;
      await pipeline(
        await store.fetch(snap),
        createDecompressStream(snap.compressionSuffix, snap.snapName),
        async (source: AsyncIterable<Buffer>) => {
          for await (const chunk of source) bytes += chunk.length;
        },
      );
      expect(info.uncompressedBytes, snap.snapName).toBe(bytes);
    }
  });

  /** Lets the next delta period fire: its timer is armed once the last one's work is done (late under load). */
  async function nextPeriod(): Promise<void> {
    await waitFor(() => (clock.nextDue()?.getTime() ?? Infinity) <= clock.now().getTime() + PERIOD_MS || undefined, 'the delta timer');
    await clock.advanceAsync(PERIOD_MS);
  }

  it('reports every delta period that stored nothing to onIdleDeltaPeriod (the delta lease renewal), a stored delta to onSnapshot', async () => {
    // Upstream renews the delta lease on every delta tick, events or not; druid's BackupReady wants it renewed
    // within two delta periods, so an idle etcd must renew it too.
    const seen: string[] = [];
    const s = await createTestSnapshotter(
      {
        client,
        store,
        metrics,
        clock,
        onSnapshot: (snap) => void seen.push(snap.kind),
        onIdleDeltaPeriod: () => void seen.push('idle'),
      },
      { deltaSnapshotPeriodMs: PERIOD_MS },
    );
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await waitFor(() => seen.length === 1, 'the full snapshot');
    const period = async (n: number) => {
      await nextPeriod();
      await waitFor(() => seen.length === n, `${n} reports`);
    };
    await period(2);
    await period(3);
    await client.put('one').value('write');
    await buffered();
    await period(4);
    await period(5);
    // On demand with nothing buffered: renewed as well (upstream's deltaSnapshotReqCh case).
    expect(await s.triggerDeltaSnapshot()).toBeUndefined();
    await waitFor(() => seen.length === 6, 'the on-demand report');
    expect(seen).toEqual(['Full', 'idle', 'idle', 'Incr', 'idle', 'idle']);
    stop.abort();
    await running;
  });

  it('a slow onIdleDeltaPeriod holds up no snapshot, skips the periods it overlaps, and is aborted when the run ends', async () => {
    const calls: AbortSignal[] = [];
    let kinds: string[] = [];
    const s = await createTestSnapshotter(
      {
        client,
        store,
        metrics,
        clock,
        onSnapshot: (snap) => void kinds.push(snap.kind),
        // Never answers on its own: a stalled API server.
        onIdleDeltaPeriod: (signal) => {
          calls.push(signal);
          return new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
        },
      },
      { deltaSnapshotPeriodMs: PERIOD_MS },
    );
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await waitFor(() => kinds.length === 1, 'the full snapshot');
    kinds = [];
    await nextPeriod();
    await waitFor(() => calls.length === 1, 'the first idle period');
    // Deltas go on while the renewal hangs.
    await client.put('during').value('stall');
    await buffered();
    await nextPeriod();
    await waitFor(() => kinds.length === 1, 'the delta stored beside the stalled renewal');
    // The next idle period while the first call still runs: skipped, not stacked.
    expect(await s.triggerDeltaSnapshot()).toBeUndefined();
    expect(calls).toHaveLength(1);
    stop.abort();
    await running;
    expect(calls[0]!.aborted).toBe(true);
  });

  it('after a start-up catch-up with nothing to catch up, reports the period (upstream renews the delta lease there)', async () => {
    const first = await make();
    const stop = new AbortController();
    const running = first.run(stop.signal, true);
    await full();
    stop.abort();
    await running;
    let idle = 0;
    const s = await createTestSnapshotter(
      { client, store, metrics, clock, onIdleDeltaPeriod: () => void idle++ },
      { deltaSnapshotPeriodMs: PERIOD_MS },
    );
    expect(await s.catchUpWithDeltas(new AbortController().signal)).toBe(true);
    await waitFor(() => idle === 1, 'the start-up report');
  });

  it('rejects on-demand deltas when delta snapshots are disabled', async () => {
    const s = await make({ deltaSnapshotPeriodMs: 0 });
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    await full();
    await expect(s.triggerDeltaSnapshot()).rejects.toThrow(/Delta snapshotting is disabled/);
    stop.abort();
    await running;
  });
});
