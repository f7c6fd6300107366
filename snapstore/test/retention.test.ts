/**
 * Garbage-collection policies (upstream-reference.md §6; acceptance cases 28–32). Expected sets are
 * derived by hand in the test, following upstream's own fixture reasoning, never by calling the
 * planner.
 */
import { describe, expect, it } from 'vitest';
import { isSnapStoreError } from '../src/errors.js';
import { planGarbageCollection } from '../src/retention.js';
import type { GcPlan, GcPolicy } from '../src/retention.js';
import type { Snapshot, SnapshotKind } from '../src/snapshot.js';
import { listedSnapshot } from './support/snapshots.js';

const MIN = 60_000;
const HOUR = 60 * MIN;
const DAY = 24 * HOUR;

/** A listed v2 snapshot built by hand. `at` is a time in ms (second precision, as parsed names are). */
function snap(kind: SnapshotKind, start: number, last: number, at: number, extra: Partial<Snapshot> = {}): Snapshot {
  return listedSnapshot(kind, start, last, Math.floor(at / 1000), extra);
}

function chunkOf(parent: Snapshot, n: number, extra: Partial<Snapshot> = {}): Snapshot {
  return { ...parent, isChunk: true, chunkNumber: n, ...extra };
}

const id = (s: Snapshot): string => `${s.snapName}${s.isChunk ? `#${s.chunkNumber ?? '?'}` : ''}`;

/** Everything the plan deletes, as ids. */
function deletedIds(plan: GcPlan): string[] {
  return [...plan.chunks, ...plan.streams.flatMap((s) => [...s.deltas, ...(s.full ? [s.full] : [])])].map(id).sort();
}

/** What is left when every planned deletion succeeds. */
function survivors(list: readonly Snapshot[], plan: GcPlan): Snapshot[] {
  const gone = new Set(deletedIds(plan));
  return list.filter((s) => !gone.has(id(s)));
}

const limit = (maxBackups: number, extra: Partial<GcPolicy> = {}): GcPolicy => ({
  kind: 'LimitBased',
  maxBackups,
  deltaRetentionMs: 0,
  latestSnapshotRevision: 0,
  ...extra,
});
const exponential = (extra: Partial<GcPolicy> = {}): GcPolicy => ({
  kind: 'Exponential',
  maxBackups: 0,
  deltaRetentionMs: 0,
  latestSnapshotRevision: 0,
  ...extra,
});

/**
 * Four streams an hour apart: full at rev 0..100k, three deltas 10 min apart after each full.
 * Returns the list (as a store lists it) and the streams for building expectations.
 */
function fourStreams(base: number): { list: Snapshot[]; streams: Array<{ full: Snapshot; deltas: Snapshot[] }> } {
  const streams: Array<{ full: Snapshot; deltas: Snapshot[] }> = [];
  let rev = 100;
  for (let k = 0; k < 4; k++) {
    const t = base + k * HOUR;
    const full = snap('Full', 0, rev, t);
    const deltas: Snapshot[] = [];
    for (let j = 1; j <= 3; j++) {
      deltas.push(snap('Incr', rev + 1, rev + 10, t + j * 10 * MIN));
      rev += 10;
    }
    rev += 5;
    streams.push({ full, deltas });
  }
  return { list: streams.flatMap((s) => [s.full, ...s.deltas]), streams };
}

describe('LimitBased', () => {
  const base = Date.UTC(2026, 2, 18, 8, 0, 0);
  const now = new Date(base + 4 * HOUR);

  it('max-backups=2 keeps the 2 newest fulls, deletes deltas of older streams, keeps the latest stream (acceptance 28)', () => {
    const { list, streams } = fourStreams(base);
    const [s0, s1, s2, s3] = streams as [(typeof streams)[0], (typeof streams)[0], (typeof streams)[0], (typeof streams)[0]];
    const plan = planGarbageCollection(list, now, limit(2));
    expect(plan.chunks).toEqual([]);
    expect(plan.skippedImmutable).toEqual([]);
    // oldest stream first; deltas newest first; fulls of the two oldest streams
    expect(plan.streams).toEqual([
      { deltas: [...s0.deltas].reverse(), full: s0.full },
      { deltas: [...s1.deltas].reverse(), full: s1.full },
      { deltas: [...s2.deltas].reverse() },
    ]);
    expect(survivors(list, plan).map(id)).toEqual([s2.full, s3.full, ...s3.deltas].map(id));
  });

  it('max-backups larger than the number of fulls deletes only deltas of older streams', () => {
    const { list, streams } = fourStreams(base);
    const plan = planGarbageCollection(list, now, limit(10));
    expect(survivors(list, plan).map(id)).toEqual([...streams.map((s) => s.full), ...(streams[3]?.deltas ?? [])].map(id));
  });

  it('max-backups=1 keeps only the latest stream', () => {
    const { list, streams } = fourStreams(base);
    const plan = planGarbageCollection(list, now, limit(1));
    expect(survivors(list, plan)).toEqual([streams[3]?.full, ...(streams[3]?.deltas ?? [])]);
  });

  it('the input order does not matter (the plan sorts like a listing)', () => {
    const { list } = fourStreams(base);
    const a = planGarbageCollection(list, now, limit(2));
    const b = planGarbageCollection([...list].reverse(), now, limit(2));
    expect(b).toEqual(a);
  });

  it('a single stream and an empty store plan nothing', () => {
    const { streams } = fourStreams(base);
    const only = [streams[0]?.full as Snapshot, ...(streams[0]?.deltas ?? [])];
    expect(planGarbageCollection(only, now, limit(1))).toEqual({ chunks: [], streams: [], skippedImmutable: [] });
    expect(planGarbageCollection([], now, limit(1))).toEqual({ chunks: [], streams: [], skippedImmutable: [] });
    expect(planGarbageCollection([], now, exponential())).toEqual({ chunks: [], streams: [], skippedImmutable: [] });
  });

  it('deltas older than the first full are deleted by delta retention only', () => {
    const orphan1 = snap('Incr', 1, 10, base - 20 * MIN);
    const orphan2 = snap('Incr', 11, 20, base - 10 * MIN);
    const f1 = snap('Full', 0, 20, base);
    const f2 = snap('Full', 0, 30, base + HOUR);
    const list = [orphan1, orphan2, f1, f2];
    expect(planGarbageCollection(list, now, limit(1)).streams).toEqual([{ deltas: [orphan2, orphan1] }, { deltas: [], full: f1 }]);
    // upstream counts the head stream as a backup slot but the fulls kept are the same
    expect(planGarbageCollection(list, now, limit(2)).streams).toEqual([{ deltas: [orphan2, orphan1] }]);
  });
});

describe('delta retention (acceptance 30)', () => {
  const base = Date.UTC(2026, 2, 18, 8, 0, 0);

  it('retention 1h keeps deltas of older streams that are younger than 1h', () => {
    const { list, streams } = fourStreams(base);
    // now = 11:15, so the cutoff is 10:15; stream 2 (10:00) has deltas at 10:10, 10:20 and 10:30.
    const now = new Date(base + 3 * HOUR + 15 * MIN);
    const plan = planGarbageCollection(list, now, limit(10, { deltaRetentionMs: HOUR }));
    const s2 = streams[2] as { full: Snapshot; deltas: Snapshot[] };
    // 10:10 is older than 10:15 -> deleted; 10:20 and 10:30 are younger -> kept
    const expectedDeleted = [...(streams[0]?.deltas ?? []), ...(streams[1]?.deltas ?? []), s2.deltas[0] as Snapshot].map(id);
    expect(deletedIds(plan)).toEqual(expectedDeleted.sort());
  });

  it('a delta exactly at the cutoff is kept (upstream: CreatedOn.Before(cutoff))', () => {
    const f1 = snap('Full', 0, 10, base);
    const d1 = snap('Incr', 11, 20, base + 10 * MIN);
    const f2 = snap('Full', 0, 20, base + HOUR);
    const now = new Date(base + 10 * MIN + HOUR);
    expect(planGarbageCollection([f1, d1, f2], now, limit(10, { deltaRetentionMs: HOUR })).streams).toEqual([]);
    expect(planGarbageCollection([f1, d1, f2], new Date(now.getTime() + 1000), limit(10, { deltaRetentionMs: HOUR })).streams).toEqual([
      { deltas: [d1] },
    ]);
  });

  it('young deltas of an old stream do not protect its full from LimitBased', () => {
    const f1 = snap('Full', 0, 10, base);
    const d1 = snap('Incr', 11, 20, base + 50 * MIN);
    const f2 = snap('Full', 0, 20, base + HOUR);
    const now = new Date(base + HOUR + 5 * MIN);
    expect(planGarbageCollection([f1, d1, f2], now, limit(1, { deltaRetentionMs: HOUR })).streams).toEqual([{ deltas: [], full: f1 }]);
  });
});

describe('immutability (acceptance 31)', () => {
  const base = Date.UTC(2026, 2, 18, 8, 0, 0);
  const now = new Date(base + 4 * HOUR);

  it('snapshots with a future expiry are never planned for deletion, expired ones are', () => {
    const { list, streams } = fourStreams(base);
    const future = new Date(now.getTime() + DAY);
    const past = new Date(now.getTime() - 1000);
    const locked = (s: Snapshot): Snapshot => ({ ...s, immutabilityExpiryTime: future });
    const s0 = streams[0] as { full: Snapshot; deltas: Snapshot[] };
    const s1 = streams[1] as { full: Snapshot; deltas: Snapshot[] };
    const lockedFull = locked(s0.full);
    const lockedDelta = locked(s1.deltas[1] as Snapshot);
    const expiredFull = { ...s1.full, immutabilityExpiryTime: past };
    const patched = list.map((s) => (s === s0.full ? lockedFull : s === s1.deltas[1] ? lockedDelta : s === s1.full ? expiredFull : s));
    const plan = planGarbageCollection(patched, now, limit(2));
    expect(plan.skippedImmutable.map(id).sort()).toEqual([lockedFull, lockedDelta].map(id).sort());
    const deleted = deletedIds(plan);
    expect(deleted).not.toContain(id(lockedFull));
    expect(deleted).not.toContain(id(lockedDelta));
    expect(deleted).toContain(id(expiredFull));
    // the locked delta does not stop its stream's full (upstream skips it without an error)
    expect(plan.streams[1]).toEqual({ deltas: [s1.deltas[2], s1.deltas[0]], full: expiredFull });
  });

  it('Exponential skips immutable fulls', () => {
    const f1 = snap('Full', 0, 10, now.getTime() - 40 * DAY, { immutabilityExpiryTime: new Date(now.getTime() + DAY) });
    const f2 = snap('Full', 0, 20, now.getTime() - 39 * DAY);
    const f3 = snap('Full', 0, 30, now.getTime() - HOUR);
    const plan = planGarbageCollection([f1, f2, f3], now, exponential());
    expect(plan.streams).toEqual([{ deltas: [], full: f2 }]);
    expect(plan.skippedImmutable).toEqual([f1]);
  });
});

describe('chunk GC (acceptance 32, upstream GarbageCollectChunks cases)', () => {
  const t = Date.UTC(2026, 2, 18, 8, 0, 0);
  const now = new Date(t + HOUR);

  it('nothing uploaded yet by this process (latest revision 0): no chunk is deleted', () => {
    const full = snap('Full', 0, 1, t);
    const chunks = [1, 2, 3, 4].map((n) => chunkOf(full, n));
    expect(planGarbageCollection(chunks, now, limit(2)).chunks).toEqual([]);
    expect(planGarbageCollection([full, ...chunks], now, limit(2)).chunks).toEqual([]);
  });

  it('chunks of uploaded snapshots are deleted, chunks above the latest revision are kept', () => {
    // upstream case "previous snapshot upload is complete, current snapshot upload underway"
    const full = snap('Full', 0, 3, t);
    const fullChunks = [1, 2, 3, 4, 5].map((n) => chunkOf(full, n));
    const inflight = snap('Incr', 4, 5, t + 2000);
    const inflightChunks = [1, 2, 3, 4].map((n) => chunkOf(inflight, n));
    const list = [...inflightChunks, full, ...fullChunks];
    const plan = planGarbageCollection(list, now, limit(2, { latestSnapshotRevision: 3 }));
    expect(plan.chunks.map(id).sort()).toEqual(fullChunks.map(id).sort());
    expect(plan.streams).toEqual([]);
  });

  it('leftover chunks of several uploaded snapshots are all deleted', () => {
    // upstream case "previous chunks are remaining, current snapshot upload completed"
    const d1 = snap('Incr', 1, 2, t);
    const d2 = snap('Incr', 3, 6, t + 1000);
    const chunks = [...[1, 2, 3, 4, 5].map((n) => chunkOf(d1, n)), ...[1, 2, 3, 4].map((n) => chunkOf(d2, n))];
    const plan = planGarbageCollection([d1, d2, ...chunks], now, limit(2, { latestSnapshotRevision: 6 }));
    expect(plan.chunks.map(id).sort()).toEqual(chunks.map(id).sort());
  });

  it('never deletes chunks of an in-flight full (start revision 0) whose object is not listed yet', () => {
    const prev = snap('Incr', 101, 200, t);
    const inflightFull = snap('Full', 0, 250, t + 1000);
    const chunks = [1, 2, 3].map((n) => chunkOf(inflightFull, n));
    const plan = planGarbageCollection([prev, ...chunks], now, limit(2, { latestSnapshotRevision: 200 }));
    expect(plan.chunks).toEqual([]);
    // once the composed object is listed, they go
    const after = planGarbageCollection([prev, inflightFull, ...chunks], now, limit(2, { latestSnapshotRevision: 250 }));
    expect(after.chunks.map(id)).toEqual(chunks.map(id));
  });

  it('the parent must be the same object: same prefix and directory', () => {
    const parent = snap('Full', 0, 10, t);
    const chunkElsewhere = chunkOf({ ...parent, prefix: 'other/v2/' }, 1);
    const plan = planGarbageCollection([parent, chunkElsewhere], now, limit(2, { latestSnapshotRevision: 10 }));
    expect(plan.chunks).toEqual([]);
  });

  it('chunks are not part of streams and do not start one', () => {
    const f1 = snap('Full', 0, 10, t);
    const d1 = snap('Incr', 11, 20, t + 10 * MIN);
    const f2 = snap('Full', 0, 20, t + 20 * MIN);
    const c = chunkOf(f2, 1);
    const plan = planGarbageCollection([f1, d1, f2, c], now, limit(1, { latestSnapshotRevision: 20 }));
    expect(plan.chunks).toEqual([c]);
    expect(plan.streams).toEqual([{ deltas: [d1], full: f1 }]);
  });

  it('immutable chunks are skipped', () => {
    const parent = snap('Full', 0, 10, t);
    const c = chunkOf(parent, 1, { immutabilityExpiryTime: new Date(now.getTime() + DAY) });
    const plan = planGarbageCollection([parent, c], now, limit(2, { latestSnapshotRevision: 10 }));
    expect(plan.chunks).toEqual([]);
    expect(plan.skippedImmutable).toEqual([c]);
  });
});

describe('Exponential', () => {
  /**
   * Upstream prepareStoreForGarbageCollection: from 00:00 UTC 36 days before `now`'s day until `now`,
   * one snapshot every 10 minutes, every third one (every 30 minutes, :00 and :30) a full, the others
   * deltas. Upstream gives every snapshot revisions 0..1001 (so the order comes from the creation
   * time tie-break); `risingRevisions` gives them realistic increasing revisions instead.
   */
  function fixture(now: Date, risingRevisions: boolean): Snapshot[] {
    const d = now;
    let t = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() - 36, 0, 0, 0);
    const list: Snapshot[] = [];
    let count = 0;
    let rev = 1;
    while (now.getTime() - t >= 0) {
      const kind: SnapshotKind = count === 0 ? 'Full' : 'Incr';
      count = (count + 1) % 3;
      if (risingRevisions) {
        list.push(kind === 'Full' ? snap('Full', 0, rev - 1, t) : snap('Incr', rev, rev + 9, t));
        if (kind === 'Incr') rev += 10;
      } else {
        list.push(snap(kind, 0, 1001, t));
      }
      t += 10 * MIN;
    }
    return list;
  }

  /**
   * Upstream prepareExpectedSnapshotsList, re-derived: 4 weekly fulls (23:30 of days -29, -22, -15,
   * -8), 7 daily fulls (23:30 of days -7..-1), today the :30 full of every hour before the current
   * one, every full of the current hour, and the deltas after the last full.
   */
  function expected(now: Date): Array<[SnapshotKind, number]> {
    const out: Array<[SnapshotKind, number]> = [];
    const nowMs = now.getTime();
    let t = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - 35, 0, -30, 0);
    for (let i = 1; i <= 4; i++) {
      t += 7 * DAY;
      out.push(['Full', t]);
    }
    for (let i = 1; i <= 7; i++) {
      t += DAY;
      out.push(['Full', t]);
    }
    const hourStart = Math.floor(nowMs / HOUR) * HOUR;
    for (t += HOUR; hourStart - t > 0; t += HOUR) out.push(['Full', t]);
    t = hourStart;
    out.push(['Full', t]);
    for (t += 30 * MIN; nowMs - t >= 0; t += 30 * MIN) out.push(['Full', t]);
    t -= 30 * MIN;
    for (t += 10 * MIN; nowMs - t >= 0; t += 10 * MIN) out.push(['Incr', t]);
    return out;
  }

  const nows = [
    '2026-03-18T14:47:12.345Z',
    '2026-03-18T14:30:00.000Z',
    '2026-03-18T14:29:59.999Z',
    '2026-03-18T00:05:00.000Z',
    '2026-03-18T00:45:00.000Z',
    '2026-03-18T23:59:58.000Z',
    '2026-03-01T06:20:00.000Z',
    '2024-02-29T12:10:00.000Z',
    '2026-01-03T18:55:30.500Z',
  ];

  describe.each([false, true])('36-day fixture (rising revisions: %s)', (rising) => {
    it.each(nows)('now = %s (acceptance 29)', (iso) => {
      const now = new Date(iso);
      const list = fixture(now, rising);
      const plan = planGarbageCollection(list, now, exponential({ maxBackups: 7 }));
      const left = survivors(list, plan).map((s): [SnapshotKind, number] => [s.kind, s.createdOn.getTime()]);
      const want = expected(now);
      expect(left.map(([k, t]) => `${k} ${new Date(t).toISOString()}`)).toEqual(want.map(([k, t]) => `${k} ${new Date(t).toISOString()}`));
      expect(plan.skippedImmutable).toEqual([]);
      // 4 weekly + 7 daily fulls are always there
      expect(want.filter(([k, t]) => k === 'Full' && t < Date.parse(iso.slice(0, 10))).length).toBe(11);
    });
  });

  it('processes streams newest first and plans each stream once', () => {
    const now = new Date('2026-03-18T14:47:12Z');
    const plan = planGarbageCollection(fixture(now, true), now, exponential());
    const fullTimes = plan.streams.flatMap((s) => (s.full ? [s.full.createdOn.getTime()] : []));
    expect(fullTimes).toEqual([...fullTimes].sort((a, b) => b - a));
    // every stream but the latest appears: its deltas are always deleted (retention 0)
    const fulls = fixture(now, true).filter((s) => s.kind === 'Full').length;
    expect(plan.streams).toHaveLength(fulls - 1);
  });

  it('keeps every full of the current hour and one per earlier hour today', () => {
    const now = new Date('2026-03-18T03:50:00Z');
    const at = (h: number, m: number): number => Date.UTC(2026, 2, 18, h, m);
    const fulls = [
      snap('Full', 0, 10, at(1, 0)),
      snap('Full', 0, 20, at(1, 20)),
      snap('Full', 0, 30, at(1, 40)),
      snap('Full', 0, 40, at(2, 10)),
      snap('Full', 0, 50, at(3, 0)),
      snap('Full', 0, 60, at(3, 20)),
      snap('Full', 0, 70, at(3, 40)),
    ];
    const plan = planGarbageCollection(fulls, now, exponential());
    expect(survivors(fulls, plan).map((s) => s.lastRevision)).toEqual([30, 40, 50, 60, 70]);
  });

  it('deletes fulls older than about five weeks', () => {
    const now = new Date('2026-03-18T12:00:00Z');
    const old = snap('Full', 0, 10, now.getTime() - 40 * DAY);
    const older = snap('Full', 0, 5, now.getTime() - 50 * DAY);
    const recent = snap('Full', 0, 20, now.getTime() - HOUR);
    const plan = planGarbageCollection([older, old, recent], now, exponential());
    expect(plan.streams.map((s) => s.full)).toEqual([old, older]);
  });
});

describe('policy validation', () => {
  it.each([
    [{ kind: 'Sometimes' }, 'unknown kind'],
    [{ maxBackups: -1 }, 'max-backups'],
    [{ maxBackups: 1.5 }, 'max-backups'],
    [{ deltaRetentionMs: -1 }, 'delta retention'],
    [{ latestSnapshotRevision: -3 }, 'latest snapshot revision'],
  ])('rejects %j', (patch, fragment) => {
    try {
      planGarbageCollection([], new Date(0), { ...limit(1), ...(patch as Partial<GcPolicy>) });
    } catch (err) {
      expect(isSnapStoreError(err, 'E_CONFIG')).toBe(true);
      expect((err as Error).message).toContain(fragment);
      return;
    }
    throw new Error('expected E_CONFIG');
  });
});
