import { describe, expect, it } from 'vitest';
import { newSnapshot, type Snapshot } from '@etcdbrctl/snapstore';
import { fullSnapshotToReuse } from '../../src/snapshotter/full-skip.js';

const at = new Date('2026-11-26T10:00:00Z');
function full(lastRevision: number, isFinal: boolean): Snapshot {
  return newSnapshot({ kind: 'Full', startRevision: 0, lastRevision, createdOn: at, compressionSuffix: '.gz', isFinal });
}
function delta(startRevision: number, lastRevision: number): Snapshot {
  return newSnapshot({ kind: 'Incr', startRevision, lastRevision, createdOn: at, compressionSuffix: '.gz' });
}

describe('fullSnapshotToReuse (the one skip rule for full snapshots)', () => {
  it('a final full asked for at the revision of the previous final full reuses it', () => {
    const prev = full(42, true);
    expect(fullSnapshotToReuse(prev, true, 42)).toBe(prev);
  });

  it('a final full is taken when etcd moved on, or the previous one is not final, or is a delta', () => {
    expect(fullSnapshotToReuse(full(42, true), true, 43)).toBeUndefined();
    expect(fullSnapshotToReuse(full(42, false), true, 42)).toBeUndefined();
    expect(fullSnapshotToReuse(delta(40, 42), true, 42)).toBeUndefined();
    expect(fullSnapshotToReuse(undefined, true, 0)).toBeUndefined();
  });

  it('a scheduled or on-demand (non-final) full is always taken, also when nothing changed (upstream since #804)', () => {
    expect(fullSnapshotToReuse(full(42, false), false, 42)).toBeUndefined();
    expect(fullSnapshotToReuse(full(42, true), false, 42)).toBeUndefined();
  });
});
