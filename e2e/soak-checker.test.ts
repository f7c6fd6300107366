/** The soak's own pure parts: the seeded schedule replays, and the checker's ack rule catches what it must. */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { AckRecord } from './soak/ack-log.js';
import {
  checkAcknowledged,
  firstDifference,
  leftoverObjects,
  pickRestorable,
  restorableRanges,
  seamRevisions,
  storedSnapshots,
  unreachableRanges,
  type KeyState,
  type StoredSnapshot,
} from './soak/checker.js';
import { createPrng } from './soak/prng.js';
import { buildSchedule } from './soak/schedule.js';

const opts = { durationMs: 600_000, topology: 'three', store: 's3' } as const;
const st = (value: string, mod: number, create = mod, version = 1): KeyState => ({ value, create, mod, version });

describe('soak schedule', () => {
  it('the same seed gives the same schedule; another seed another one', () => {
    expect(buildSchedule({ seed: 7, ...opts })).toEqual(buildSchedule({ seed: 7, ...opts }));
    expect(buildSchedule({ seed: 8, ...opts })).not.toEqual(buildSchedule({ seed: 7, ...opts }));
    const kinds = new Set(buildSchedule({ seed: 7, ...opts }).map((f) => f.kind));
    expect(kinds.size).toBeGreaterThanOrEqual(8);
  });
  it('a single Local member gets only process faults and a full temp dir', () => {
    const kinds = new Set(buildSchedule({ seed: 7, durationMs: 600_000, topology: 'single', store: 'local' }).map((f) => f.kind));
    expect([...kinds].sort()).toEqual(['etcd-sigkill', 'sidecar-sigkill', 'sidecar-sigterm', 'temp-full']);
  });
});

describe('soak checker: acknowledged writes', () => {
  const log: AckRecord[] = [
    { seq: 1, op: 'put-new', effects: [{ k: 'a', v: 'a1' }], outcome: 'ok', rev: 2 },
    { seq: 2, op: 'put-new', effects: [{ k: 'b', v: 'b1' }], outcome: 'ok', rev: 3 },
    { seq: 3, op: 'overwrite', effects: [{ k: 'a', v: 'a2' }], outcome: 'ok', rev: 4 },
    { seq: 4, op: 'range-delete', effects: [{ p: '/g/' }], outcome: 'ok', rev: 6 },
    { seq: 5, op: 'overwrite', effects: [{ k: 'b', v: 'b2' }], outcome: 'unknown' },
  ];
  it('passes on the state the log describes, and on an unacknowledged later write', () => {
    const state = new Map([
      ['a', st('a2', 4, 2, 2)],
      ['b', st('b1', 3)],
    ]);
    expect(checkAcknowledged(log, state, 6).lost).toEqual([]);
    state.set('b', st('b2', 7, 3, 2));
    expect(checkAcknowledged(log, state, 7).lost).toEqual([]);
  });
  it('a lease revoke whose key an unanswered write may have detached: the key may be gone or still there (seed 41)', () => {
    const leased: AckRecord[] = [
      { seq: 1, op: 'lease-put', effects: [{ k: '/l/1', v: 'l1' }], outcome: 'ok', rev: 2 },
      { seq: 2, op: 'overwrite', effects: [{ k: '/l/1', v: 'l2' }], outcome: 'unknown' },
      { seq: 3, op: 'lease-revoke', effects: [{ k: '/l/1', v: null, maybe: true }], outcome: 'ok', rev: 5 },
    ];
    expect(checkAcknowledged(leased, new Map(), 5).lost).toEqual([]);
    expect(checkAcknowledged(leased, new Map([['/l/1', st('l2', 3, 2, 2)]]), 5).lost).toEqual([]);
    // Without the uncertain revoke the missing key is lost.
    expect(checkAcknowledged(leased.slice(0, 2), new Map(), 5).lost[0]).toMatch(/"\/l\/1" written at revision 2 .* is missing/);
  });

  it('reports a missing key, an older revision, a changed value', () => {
    expect(checkAcknowledged(log, new Map([['b', st('b1', 3)]]), 6).lost[0]).toMatch(/"a" written at revision 4 .* is missing/);
    expect(
      checkAcknowledged(
        log,
        new Map([
          ['a', st('a1', 2)],
          ['b', st('b1', 3)],
        ]),
        6,
      ).lost[0],
    ).toMatch(/older than/);
    expect(
      checkAcknowledged(
        log,
        new Map([
          ['a', st('zz', 4, 2, 2)],
          ['b', st('b1', 3)],
        ]),
        6,
      ).lost[0],
    ).toMatch(/another value/);
  });
  it('a write above the checked revision is not expected', () => {
    expect(checkAcknowledged(log, new Map([['a', st('a1', 2)]]), 2).lost).toEqual([]);
  });
  it('a key under an acknowledged range delete must be gone', () => {
    const l: AckRecord[] = [{ seq: 1, op: 'put-new', effects: [{ k: '/g/1', v: 'x' }], outcome: 'ok', rev: 2 }, ...log.slice(3, 4)];
    expect(checkAcknowledged(l, new Map(), 6).lost).toEqual([]);
    expect(checkAcknowledged(l, new Map([['/g/1', st('x', 2)]]), 6).lost[0]).toMatch(/deleted at revision 6/);
  });
});

describe('soak checker: key by key', () => {
  it('names the first differing field, a missing and an extra key', () => {
    const want = new Map([['k', st('v', 5, 3, 2)]]);
    expect(firstDifference(want, new Map([['k', st('v', 5, 3, 2)]]), 'x')).toBeUndefined();
    expect(firstDifference(want, new Map([['k', st('v', 5, 3, 3)]]), 'x')).toMatch(/"k" is/);
    expect(firstDifference(want, new Map(), 'x')).toMatch(/missing/);
    expect(firstDifference(new Map(), want, 'x')).toMatch(/should not exist/);
  });
});

describe('soak checker: points in time the store reaches', () => {
  // The store of seed 16's failed run: the leader was killed before it uploaded a delta of 39–64.
  const store: StoredSnapshot[] = [
    { kind: 'Full', start: 0, last: 1 },
    { kind: 'Incr', start: 2, last: 38 },
    { kind: 'Full', start: 0, last: 65 },
    { kind: 'Incr', start: 66, last: 90 },
    { kind: 'Incr', start: 91, last: 161 },
  ];

  it('follows each full through the deltas that continue it, and leaves the gap out', () => {
    expect(restorableRanges(store)).toEqual([
      [1, 38],
      [65, 161],
    ]);
    expect(unreachableRanges(restorableRanges(store), 161)).toEqual(['39–64']);
  });

  it('merges a full taken inside a chain into that chain', () => {
    const ranges = restorableRanges([...store, { kind: 'Full', start: 0, last: 100 }, { kind: 'Incr', start: 162, last: 170 }]);
    expect(ranges).toEqual([
      [1, 38],
      [65, 170],
    ]);
  });

  it('follows deltas of two leaders that overlap, as the restore joins them (seed 4242)', () => {
    const two: StoredSnapshot[] = [
      { kind: 'Full', start: 0, last: 2000 },
      { kind: 'Incr', start: 2001, last: 2022 },
      { kind: 'Incr', start: 2023, last: 2078 },
      { kind: 'Incr', start: 2023, last: 2081 },
      { kind: 'Incr', start: 2070, last: 2100 },
    ];
    expect(restorableRanges(two)).toEqual([[2000, 2100]]);
    expect(unreachableRanges(restorableRanges(two), 2100)).toEqual([]);
  });

  it('restores both sides of each fault and of each overlap, where the store reaches them', () => {
    const two: StoredSnapshot[] = [
      { kind: 'Full', start: 0, last: 2000 },
      { kind: 'Incr', start: 2001, last: 2022 },
      { kind: 'Incr', start: 2023, last: 2078 },
      { kind: 'Incr', start: 2023, last: 2081 },
      { kind: 'Incr', start: 2070, last: 2100 },
    ];
    const ranges = restorableRanges(two);
    expect(seamRevisions([1500, 2050], two, ranges, 2100)).toEqual([2022, 2023, 2049, 2051, 2069, 2070, 2078, 2079, 2081, 2082]);
    expect(seamRevisions([2050], two, ranges, 2100, 3)).toHaveLength(3);
  });

  it('does not follow a delta that starts after a gap', () => {
    expect(
      restorableRanges([
        { kind: 'Full', start: 0, last: 10 },
        { kind: 'Incr', start: 12, last: 20 },
      ]),
    ).toEqual([[10, 10]]);
  });

  it('picks only reachable revisions, each of them', () => {
    const ranges = restorableRanges(store);
    const seen = new Set<number>();
    const rng = createPrng(16);
    for (let i = 0; i < 5_000; i++) {
      const rev = pickRestorable(ranges, 30, 161, rng.int)!;
      expect(rev >= 30 && rev <= 161 && !(rev > 38 && rev < 65)).toBe(true);
      seen.add(rev);
    }
    expect(seen.size).toBe(38 - 30 + 1 + 161 - 65 + 1);
    expect(pickRestorable(ranges, 40, 60, rng.int)).toBeUndefined();
  });
});

describe('soak checker: reading the store from its files', () => {
  it('finds snapshots and leftovers at any depth, by their names', () => {
    const root = mkdtempSync(join(tmpdir(), 'soak-store-'));
    try {
      mkdirSync(join(root, 'prefix', 'v2'), { recursive: true });
      for (const f of ['Full-00000000-00000010-1.gz', 'Incr-00000011-00000020-2.gz', 'Incr-00000021-00000030-3.gz.part', '.etcd-backup-x'])
        writeFileSync(join(root, 'prefix', 'v2', f), 'x');
      expect(storedSnapshots(root).sort((a, b) => a.last - b.last)).toEqual([
        { kind: 'Full', start: 0, last: 10 },
        { kind: 'Incr', start: 11, last: 20 },
      ]);
      expect(leftoverObjects(root).sort()).toEqual([
        join('prefix', 'v2', '.etcd-backup-x'),
        join('prefix', 'v2', 'Incr-00000021-00000030-3.gz.part'),
      ]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
