import type { Snapshot, SnapshotKind } from '../../src/snapshot.js';

/**
 * A snapshot as a listing of prefix `etcd-main/v2/` returns it (gzip, no snap dir), built by hand rather
 * than by the code under test; `extra` wins.
 */
export function listedSnapshot(
  kind: SnapshotKind,
  start: number,
  last: number,
  createdUnix: number,
  extra: Partial<Snapshot> = {},
): Snapshot {
  const p8 = (n: number): string => String(n).padStart(8, '0');
  return {
    kind,
    startRevision: start,
    lastRevision: last,
    createdOn: new Date(createdUnix * 1000),
    snapDir: '',
    snapName: `${kind}-${p8(start)}-${p8(last)}-${createdUnix}.gz`,
    prefix: 'etcd-main/v2/',
    compressionSuffix: '.gz',
    isChunk: false,
    isFinal: false,
    ...extra,
  };
}
