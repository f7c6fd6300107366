/**
 * Executing a garbage-collection plan: order, immutability refusals, the per-stream error threshold
 * and "a stream's full goes only when its deltas went" (upstream-reference.md §6.1). The store is a
 * tiny in-memory SnapStore: this tests the executor's logic, not a provider.
 */
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { SnapStoreError } from '../src/errors.js';
import { GC_STREAM_ERROR_THRESHOLD, runGarbageCollection } from '../src/gc.js';
import type { Logger } from '../src/logger.js';
import type { GcPlan } from '../src/retention.js';
import { planGarbageCollection } from '../src/retention.js';
import type { Snapshot, SnapshotKind } from '../src/snapshot.js';
import type { SnapStore } from '../src/store.js';
import { listedSnapshot } from './support/snapshots.js';

/** Keys of listed snapshots, computed here on purpose (not with the code under test). */
function keyOf(s: Snapshot): string {
  const base = `${s.prefix}${s.snapDir === '' ? '' : `${s.snapDir}/`}${s.snapName}`;
  return s.isChunk ? `${base}/${String(s.chunkNumber ?? 0).padStart(10, '0')}` : base;
}

/** In-memory store; `failures` maps a key to the error its deletion throws. */
class MemoryStore implements SnapStore {
  readonly provider = 'Local' as const;
  readonly prefix = 'etcd-main/v2';
  readonly objects = new Map<string, Snapshot>();
  readonly deleteCalls: string[] = [];
  constructor(
    snaps: readonly Snapshot[],
    readonly failures = new Map<string, Error>(),
  ) {
    for (const s of snaps) this.objects.set(keyOf(s), s);
  }
  async list(): Promise<Snapshot[]> {
    return [...this.objects.values()];
  }
  async fetch(): Promise<Readable> {
    return Readable.from([]);
  }
  async save(): Promise<void> {}
  async delete(snap: Snapshot): Promise<void> {
    const key = keyOf(snap);
    this.deleteCalls.push(key);
    const failure = this.failures.get(key);
    if (failure !== undefined) throw failure;
    if (!this.objects.delete(key)) throw new SnapStoreError('E_NOT_FOUND', `snapshot ${key} not found`);
  }
  async close(): Promise<void> {}
}

const recorder = (): Logger & { lines: string[] } => {
  const lines: string[] = [];
  const log = (_obj: object | string, msg?: string): void => {
    lines.push(msg ?? '');
  };
  return { lines, debug: log, info: log, warn: log, error: log };
};

const T0 = Date.UTC(2026, 2, 18, 8, 0, 0);
function snap(kind: SnapshotKind, start: number, last: number, minutes: number, extra: Partial<Snapshot> = {}): Snapshot {
  return listedSnapshot(kind, start, last, T0 / 1000 + minutes * 60, extra);
}

/** Full at rev `base`, then `n` deltas of 10 revisions, starting at `minutes`. */
function stream(base: number, minutes: number, n: number): { full: Snapshot; deltas: Snapshot[] } {
  const full = snap('Full', 0, base, minutes);
  const deltas = Array.from({ length: n }, (_, i) => snap('Incr', base + 10 * i + 1, base + 10 * (i + 1), minutes + i + 1));
  return { full, deltas };
}

const immutableError = (key: string): Error => new SnapStoreError('E_IMMUTABLE', `snapshot ${key} is protected by an immutability policy`);
const boom = (key: string): Error => new SnapStoreError('E_UNREACHABLE', `deleting ${key}: connection reset`);

describe('runGarbageCollection', () => {
  it('deletes chunks first, then per stream the deltas newest first and then the full', async () => {
    const a = stream(100, 0, 2);
    const b = stream(200, 60, 1);
    const parent = snap('Full', 0, 300, 120);
    const chunk = { ...parent, isChunk: true, chunkNumber: 1 };
    const store = new MemoryStore([a.full, ...a.deltas, b.full, ...b.deltas, parent, chunk]);
    const plan: GcPlan = {
      chunks: [chunk],
      streams: [{ deltas: [...a.deltas].reverse(), full: a.full }, { deltas: [...b.deltas].reverse() }],
      skippedImmutable: [],
    };
    const result = await runGarbageCollection(store, plan, recorder());
    const expectedOrder = [chunk, a.deltas[1], a.deltas[0], a.full, b.deltas[0]] as Snapshot[];
    expect(store.deleteCalls).toEqual(expectedOrder.map(keyOf));
    expect(result.deleted).toEqual(expectedOrder);
    expect(result.failed).toEqual([]);
    expect(result.skippedImmutable).toEqual([]);
    expect([...store.objects.keys()].sort()).toEqual([b.full, parent].map(keyOf).sort());
  });

  it('an immutability refusal is a skip: the stream full is still deleted', async () => {
    const a = stream(100, 0, 3);
    const locked = a.deltas[1] as Snapshot;
    const store = new MemoryStore([a.full, ...a.deltas], new Map([[keyOf(locked), immutableError(keyOf(locked))]]));
    const result = await runGarbageCollection(
      store,
      { chunks: [], streams: [{ deltas: [...a.deltas].reverse(), full: a.full }], skippedImmutable: [] },
      recorder(),
    );
    expect(result.skippedImmutable).toEqual([locked]);
    expect(result.failed).toEqual([]);
    expect(result.deleted).toEqual([a.deltas[2], a.deltas[0], a.full]);
    expect([...store.objects.keys()]).toEqual([keyOf(locked)]);
  });

  it('a failed delta deletion keeps the stream full; other streams go on', async () => {
    const a = stream(100, 0, 3);
    const b = stream(200, 60, 1);
    const bad = a.deltas[2] as Snapshot;
    const err = boom(keyOf(bad));
    const store = new MemoryStore([a.full, ...a.deltas, b.full, ...b.deltas], new Map([[keyOf(bad), err]]));
    const plan: GcPlan = {
      chunks: [],
      streams: [
        { deltas: [...a.deltas].reverse(), full: a.full },
        { deltas: [...b.deltas].reverse(), full: b.full },
      ],
      skippedImmutable: [],
    };
    const result = await runGarbageCollection(store, plan, recorder());
    expect(result.failed).toEqual([{ snap: bad, error: err }]);
    // the remaining deltas of the stream are still tried, the full is not
    expect(result.deleted).toEqual([a.deltas[1], a.deltas[0], b.deltas[0], b.full]);
    expect(store.deleteCalls).not.toContain(keyOf(a.full));
    expect([...store.objects.keys()].sort()).toEqual([a.full, bad].map(keyOf).sort());
  });

  it(`stops a stream after ${GC_STREAM_ERROR_THRESHOLD} failed deletions`, async () => {
    const a = stream(100, 0, 8);
    const failures = new Map(a.deltas.map((d) => [keyOf(d), boom(keyOf(d))] as const));
    const b = stream(200, 60, 1);
    const store = new MemoryStore([a.full, ...a.deltas, b.full, ...b.deltas], failures);
    const plan: GcPlan = {
      chunks: [],
      streams: [
        { deltas: [...a.deltas].reverse(), full: a.full },
        { deltas: [...b.deltas], full: b.full },
      ],
      skippedImmutable: [],
    };
    const result = await runGarbageCollection(store, plan, recorder());
    expect(GC_STREAM_ERROR_THRESHOLD).toBe(5);
    expect(result.failed.map((f) => f.snap)).toEqual([...a.deltas].reverse().slice(0, 5));
    expect(store.deleteCalls).toEqual([...[...a.deltas].reverse().slice(0, 5).map(keyOf), keyOf(b.deltas[0] as Snapshot), keyOf(b.full)]);
  });

  it('immutability refusals do not count towards the threshold', async () => {
    const a = stream(100, 0, 7);
    const failures = new Map(a.deltas.map((d) => [keyOf(d), immutableError(keyOf(d))] as const));
    const store = new MemoryStore([a.full, ...a.deltas], failures);
    const result = await runGarbageCollection(
      store,
      { chunks: [], streams: [{ deltas: [...a.deltas].reverse(), full: a.full }], skippedImmutable: [] },
      recorder(),
    );
    expect(result.skippedImmutable).toHaveLength(7);
    expect(result.deleted).toEqual([a.full]);
  });

  it('a failed full or chunk deletion is reported and does not stop the run', async () => {
    const a = stream(100, 0, 0);
    const b = stream(200, 60, 0);
    const c = snap('Full', 0, 300, 120);
    const chunk = { ...c, isChunk: true, chunkNumber: 2 };
    const chunkErr = boom(keyOf(chunk));
    const fullErr = boom(keyOf(a.full));
    const store = new MemoryStore(
      [a.full, b.full, c, chunk],
      new Map([
        [keyOf(chunk), chunkErr],
        [keyOf(a.full), fullErr],
      ]),
    );
    const plan: GcPlan = {
      chunks: [chunk],
      streams: [
        { deltas: [], full: a.full },
        { deltas: [], full: b.full },
      ],
      skippedImmutable: [],
    };
    const result = await runGarbageCollection(store, plan, recorder());
    expect(result.failed).toEqual([
      { snap: chunk, error: chunkErr },
      { snap: a.full, error: fullErr },
    ]);
    expect(result.deleted).toEqual([b.full]);
  });

  it('a missing object is a failure, as upstream (the next run no longer lists it)', async () => {
    const a = stream(100, 0, 1);
    const store = new MemoryStore([a.full]);
    const result = await runGarbageCollection(
      store,
      { chunks: [], streams: [{ deltas: a.deltas, full: a.full }], skippedImmutable: [] },
      recorder(),
    );
    expect(result.failed.map((f) => f.snap)).toEqual(a.deltas);
    expect(store.objects.has(keyOf(a.full))).toBe(true);
  });

  it('carries the planned immutable skips into the result and logs them', async () => {
    const locked = snap('Full', 0, 100, 0, { immutabilityExpiryTime: new Date(T0 + 86_400_000) });
    const log = recorder();
    const result = await runGarbageCollection(new MemoryStore([locked]), { chunks: [], streams: [], skippedImmutable: [locked] }, log);
    expect(result).toEqual({ deleted: [], failed: [], skippedImmutable: [locked] });
    expect(log.lines).toContain('GC: Skipping snapshot, since it is immutable');
  });

  it('end to end with the planner: LimitBased max-backups=2 over a listed store', async () => {
    const a = stream(100, 0, 2);
    const b = stream(200, 60, 2);
    const c = stream(300, 120, 2);
    const store = new MemoryStore([a.full, ...a.deltas, b.full, ...b.deltas, c.full, ...c.deltas]);
    const now = new Date(T0 + 3 * 3_600_000);
    const plan = planGarbageCollection(await store.list(), now, {
      kind: 'LimitBased',
      maxBackups: 2,
      deltaRetentionMs: 0,
      latestSnapshotRevision: 320,
    });
    const result = await runGarbageCollection(store, plan, recorder());
    expect(result.failed).toEqual([]);
    expect([...store.objects.keys()].sort()).toEqual([b.full, c.full, ...c.deltas].map(keyOf).sort());
  });
});
