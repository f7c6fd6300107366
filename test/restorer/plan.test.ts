import { describe, expect, it } from 'vitest';
import { newSnapshot, parseSnapshotKey, type Snapshot } from '@etcdbrctl/snapstore';
import { olderChain, planRestore, RestorePlanError } from '../../src/restorer/plan.js';

const t = (sec: number) => new Date(sec * 1000);
const full = (last: number, at: number, extra: Partial<Snapshot> = {}) => ({
  ...newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: last, createdOn: t(at), compressionSuffix: '.gz' }),
  ...extra,
});
const incr = (start: number, last: number, at: number) =>
  newSnapshot({ kind: 'Incr', startRevision: start, lastRevision: last, createdOn: t(at), compressionSuffix: '.gz' });
const names = (p: { base: Snapshot | undefined; deltas: Snapshot[] }) => [p.base?.snapName, ...p.deltas.map((d) => d.snapName)];

describe('restore plan', () => {
  it('takes the newest full and the deltas after it, in order', () => {
    const list = [incr(11, 20, 110), full(10, 100), incr(21, 30, 120), full(5, 50), incr(6, 10, 60)];
    const p = planRestore(list);
    expect(names(p)).toEqual([full(10, 100).snapName, incr(11, 20, 110).snapName, incr(21, 30, 120).snapName]);
    expect(p.targetRevision).toBe(30);
  });

  it('returns no base for a store without full snapshots (upstream: nothing to do)', () => {
    expect(planRestore([incr(1, 5, 10)]).base).toBeUndefined();
    expect(planRestore([]).base).toBeUndefined();
  });

  it('accepts a first delta that overlaps the full and skips deltas inside it', () => {
    const p = planRestore([full(10, 100), incr(8, 10, 90), incr(9, 15, 105), incr(16, 20, 110)]);
    expect(p.deltas.map((d) => d.startRevision)).toEqual([9, 16]);
  });

  it('a full and the delta at its revision in the same second (a Go-written final full): the full, the delta not applied again', () => {
    // Upstream's unstable sort may put that delta last and replay it onto the full; either listing order here
    // gives the same plan (docs/design-decisions.md, "Same-second ties at one revision").
    const list = [full(10, 50), incr(11, 20, 100), full(20, 100, { isFinal: true })];
    for (const order of [list, [list[0], list[2], list[1]], [...list].reverse()] as Snapshot[][]) {
      const p = planRestore(order);
      expect(names(p)).toEqual([(list[2] as Snapshot).snapName]);
      expect(p.targetRevision).toBe(20);
    }
  });

  it('overlapping deltas (two leaders): the fewest that cover the chain, each overlapping at most the one before', () => {
    // Seed 4242's store: two deltas with one start in one second, one a prefix of the other.
    const same = planRestore([full(2022, 100), incr(2023, 2078, 200), incr(2023, 2081, 200), incr(2082, 2100, 210)]);
    expect(same.deltas.map((d) => [d.startRevision, d.lastRevision])).toEqual([
      [2023, 2081],
      [2082, 2100],
    ]);
    // A later delta starting inside the last one stays (its shared events are compared when fetched); one that
    // spans two makes the one between them redundant.
    const partial = planRestore([full(99, 100), incr(100, 200, 110), incr(201, 300, 120), incr(150, 350, 130), incr(340, 400, 140)]);
    expect(partial.deltas.map((d) => [d.startRevision, d.lastRevision])).toEqual([
      [100, 200],
      [150, 350],
      [340, 400],
    ]);
    expect(partial.targetRevision).toBe(400);
    // A point in time inside the overlap takes what reaches it.
    const pitr = planRestore([full(2022, 100), incr(2023, 2078, 200), incr(2023, 2081, 200)], { revision: 2050 });
    expect(pitr.deltas.map((d) => d.lastRevision)).toEqual([2081]);
    expect(pitr.targetRevision).toBe(2050);
  });

  it('a transaction cut by the Go snapshotter (the next delta named from the revision after) keeps both', () => {
    const p = planRestore([full(10, 100), incr(11, 20, 110), incr(21, 30, 120)]);
    expect(p.deltas).toHaveLength(2);
  });

  it('fails on a gap before anything is fetched', () => {
    expect(() => planRestore([full(10, 100), incr(11, 20, 110), incr(22, 30, 120)])).toThrow(
      /gap in the delta chain: Incr-00000022-00000030-120.gz starts at revision 22, but the snapshots before it end at 20/,
    );
  });

  it('cuts at a target revision (point in time)', () => {
    const list = [full(10, 100), incr(11, 20, 110), incr(21, 30, 120), full(30, 130), incr(31, 40, 140)];
    const p = planRestore(list, { revision: 25 });
    expect(names(p)).toEqual([full(10, 100).snapName, incr(11, 20, 110).snapName, incr(21, 30, 120).snapName]);
    expect(p.targetRevision).toBe(25);
    expect(planRestore(list, { revision: 30 }).base?.lastRevision).toBe(30);
    expect(() => planRestore(list, { revision: 41 })).toThrow(/end at revision 40, before the requested revision 41/);
    expect(() => planRestore(list, { revision: 5 })).toThrow(RestorePlanError);
  });

  it('a chain that goes on across a full (our snapshotter since issue 38): every revision in between is reached from the older full', () => {
    // Deltas up to 20, the full at 25 (revisions 21-25 written while it was taken), the next delta from 21.
    const older = full(10, 100);
    const newer = full(25, 130);
    const list = [older, incr(11, 20, 110), newer, incr(21, 40, 140), incr(41, 50, 150)];
    for (const revision of [21, 23, 25 - 1]) {
      const p = planRestore(list, { revision });
      expect(names(p)).toEqual([older.snapName, incr(11, 20, 110).snapName, incr(21, 40, 140).snapName]);
      expect(p.targetRevision).toBe(revision);
    }
    // At and after the newer full: from it, its first delta's older events not applied again.
    expect(names(planRestore(list, { revision: 25 }))).toEqual([newer.snapName]);
    const head = planRestore(list);
    expect(names(head)).toEqual([newer.snapName, incr(21, 40, 140).snapName, incr(41, 50, 150).snapName]);
    expect(head.targetRevision).toBe(50);
    // A delta that ends inside the newer full (cut while it was taken) is listed before it and reaches its part.
    const cut = [older, incr(11, 20, 110), incr(21, 23, 131), newer, incr(24, 40, 140)];
    expect(names(planRestore(cut, { revision: 24 }))).toEqual([
      older.snapName,
      incr(11, 20, 110).snapName,
      incr(21, 23, 131).snapName,
      incr(24, 40, 140).snapName,
    ]);
    expect(names(planRestore(cut))).toEqual([newer.snapName, incr(24, 40, 140).snapName]);
  });

  it("a chain that restarts at a newer full (upstream's deltas) reaches no revision between the older chain and that full", () => {
    const list = [full(10, 100), incr(11, 20, 110), full(25, 130), incr(26, 40, 140)];
    expect(() => planRestore(list, { revision: 22 })).toThrow(/end at revision 20, before the requested revision 22/);
    expect(planRestore(list, { revision: 30 }).base?.lastRevision).toBe(25);
  });

  it('cuts at a target time by snapshot creation time', () => {
    const list = [full(10, 100), incr(11, 20, 110), incr(21, 30, 120), full(30, 130)];
    const p = planRestore(list, { time: t(115) });
    expect(names(p)).toEqual([full(10, 100).snapName, incr(11, 20, 110).snapName]);
    expect(p.targetRevision).toBe(20);
  });

  it('ignores chunk objects and reads v1 and mixed layouts', () => {
    const v1full = parseSnapshotKey('p/v1/Backup-100/Full-00000000-00000010-100');
    const v1incr = parseSnapshotKey('p/v1/Backup-100/Incr-00000011-00000020-110');
    const v2incr = parseSnapshotKey('p/v2/Incr-00000021-00000030-120.gz');
    const chunk = parseSnapshotKey('p/v2/Full-00000000-00000040-130.gz/0000000001');
    const p = planRestore([v1full, v1incr, v2incr, chunk]);
    expect(p.base?.snapDir).toBe('Backup-100');
    expect(p.deltas.map((d) => d.lastRevision)).toEqual([20, 30]);
  });

  it('sums the sizes to fetch', () => {
    const p = planRestore([full(10, 100, { sizeBytes: 1000 }), { ...incr(11, 20, 110), sizeBytes: 50 }]);
    expect(p.fetchBytes).toBe(1050);
  });
});

describe('restore plan from a chosen base (--base-snapshot)', () => {
  // An older chain whose deltas reach the newer full's revision, then a delta after the newer full.
  const older = full(10, 100);
  const newer = full(30, 130);
  const list = [older, incr(11, 20, 110), incr(21, 30, 120), newer, incr(31, 40, 140)];

  it('steps over the newer full while the deltas go on without a gap', () => {
    const p = planRestore(list, { baseName: older.snapName });
    expect(names(p)).toEqual([older.snapName, incr(11, 20, 110).snapName, incr(21, 30, 120).snapName, incr(31, 40, 140).snapName]);
    expect(p.targetRevision).toBe(40);
  });

  it('ends at a gap right after the stepped-over full (its events are only in that full)', () => {
    const gapped = [older, incr(11, 20, 110), incr(21, 27, 120), newer, incr(31, 40, 140)];
    const p = planRestore(gapped, { baseName: older.snapName });
    expect(p.targetRevision).toBe(27);
    expect(p.deltas).toHaveLength(2);
  });

  it('a name that is no full snapshot is refused', () => {
    expect(() => planRestore(list, { baseName: incr(11, 20, 110).snapName })).toThrow(RestorePlanError);
    expect(() => planRestore(list, { baseName: 'Full-x' })).toThrow(/no snapshot named Full-x in the store/);
  });

  it('olderChain names the chain before a full and how far it reaches around it', () => {
    expect(olderChain(list, newer)).toEqual({ base: older, lastRevision: 40, deltas: 3 });
    expect(olderChain(list, older)).toBeUndefined();
  });
});
