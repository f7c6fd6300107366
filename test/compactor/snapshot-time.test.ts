/**
 * The compacted full snapshot's creation time (src/compactor/snapshot-time.ts): never in the same or an
 * earlier second than a snapshot ending at the same revision, so upstream's order (last revision, then
 * creation second, with an unstable sort) puts it after the last delta it folds in.
 */
import { describe, expect, it } from 'vitest';
import { compareSnapshots, newSnapshot, type Snapshot } from '@etcdbrctl/snapstore';
import { FakeClock } from '../../src/clock.js';
import { compactedSnapshotClock, compactedSnapshotTime } from '../../src/compactor/snapshot-time.js';

const at = (iso: string) => new Date(iso);
const delta = (start: number, last: number, createdOn: Date): Snapshot =>
  newSnapshot({ kind: 'Incr', startRevision: start, lastRevision: last, createdOn, compressionSuffix: '.gz', isFinal: false });
const full = (last: number, createdOn: Date): Snapshot =>
  newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: last, createdOn, compressionSuffix: '.gz', isFinal: false });

describe('compactedSnapshotTime', () => {
  const listing = [full(100, at('2027-01-02T03:00:00Z')), delta(101, 150, at('2027-01-02T03:04:05.200Z'))];

  it('now, when the last delta was written in an earlier second', () => {
    const now = at('2027-01-02T03:04:06.100Z');
    expect(compactedSnapshotTime(now, listing, 150)).toBe(now);
  });

  it('the next second, when now falls in the second of the last delta (ties in upstream order)', () => {
    const now = at('2027-01-02T03:04:05.900Z');
    const t = compactedSnapshotTime(now, listing, 150);
    expect(t).toEqual(at('2027-01-02T03:04:06Z'));
    const compacted = full(150, t);
    expect(compareSnapshots(listing[1] as Snapshot, compacted)).toBeLessThan(0);
    // What the name alone said before: the same second, a tie upstream's unstable sort may order either way.
    expect(compareSnapshots(listing[1] as Snapshot, full(150, now))).toBe(0);
  });

  it('after the last delta also when this clock lags the one that named the delta', () => {
    const t = compactedSnapshotTime(at('2027-01-02T03:03:00Z'), listing, 150);
    expect(t).toEqual(at('2027-01-02T03:04:06Z'));
  });

  it('only snapshots at the same revision count; chunks never', () => {
    const later = [...listing, delta(151, 160, at('2027-01-02T05:00:00Z'))];
    const now = at('2027-01-02T03:04:06.100Z');
    expect(compactedSnapshotTime(now, later, 150)).toBe(now);
    const chunk = { ...delta(101, 150, at('2027-01-02T04:00:00Z')), isChunk: true };
    expect(compactedSnapshotTime(now, [...listing, chunk], 150)).toBe(now);
  });

  it('the clock wrapper names with that time and keeps the timers of the clock it wraps', () => {
    const inner = new FakeClock(at('2027-01-02T03:04:05.500Z'));
    const clock = compactedSnapshotClock(inner, listing, 150);
    expect(clock.now()).toEqual(at('2027-01-02T03:04:06Z'));
    let fired = false;
    clock.setTimeout(() => (fired = true), 1000);
    inner.advance(1000);
    expect(fired).toBe(true);
    expect(clock.now()).toEqual(at('2027-01-02T03:04:06.500Z'));
  });
});
