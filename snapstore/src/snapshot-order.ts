/**
 * The order of snapshots and the selections made from a listing, exactly as etcd-backup-restore makes them
 * (upstream `pkg/types/snapstore.go` `SnapList.Less`, `pkg/miscellaneous/miscellaneous.go`
 * `GetLatestFullSnapshotAndDeltaSnapList`, `GetFilteredBackups`).
 */
import { unixSeconds } from './go-time.js';
import type { Snapshot } from './snapshot.js';

/**
 * Upstream SnapList.Less: ascending last revision; on a tie a complete object before a chunk; two
 * complete objects by creation second; chunks (any order upstream) by chunk number.
 */
export function compareSnapshots(a: Snapshot, b: Snapshot): number {
  if (a.lastRevision !== b.lastRevision) return a.lastRevision < b.lastRevision ? -1 : 1;
  if (a.isChunk !== b.isChunk) return a.isChunk ? 1 : -1;
  if (!a.isChunk) return unixSeconds(a.createdOn) - unixSeconds(b.createdOn);
  return (a.chunkNumber ?? 0) - (b.chunkNumber ?? 0);
}

/**
 * The creation time for a new snapshot ending at `revision`: `now`, but never in the same or an earlier second
 * than one of `snapshots` at that revision, so it sorts strictly after them (compareSnapshots). Upstream sorts
 * with Go's unstable `sort.Sort`: a full and the delta it follows at the same revision and second come out
 * either way, and when the delta comes last its restore replays the delta onto the full a second time
 * ("mismatched event revision", `applyFirstDeltaSnapshot` in pkg/snapshot/restorer/restorer.go).
 */
export function creationTimeAfter(now: Date, snapshots: readonly Snapshot[], revision: number): Date {
  let notBefore = Number.NEGATIVE_INFINITY;
  for (const s of snapshots) {
    if (s.isChunk || s.lastRevision !== revision) continue;
    notBefore = Math.max(notBefore, (unixSeconds(s.createdOn) + 1) * 1000);
  }
  return now.getTime() >= notBefore ? now : new Date(notBefore);
}

/** A sorted copy (stable: equal snapshots keep their order). The input is not modified. */
export function sortSnapshots(list: readonly Snapshot[]): Snapshot[] {
  return [...list].sort(compareSnapshots);
}

export interface LatestSet {
  /** The newest full snapshot; undefined when the store has none. */
  full: Snapshot | undefined;
  /** The deltas after it, ascending (all deltas when there is no full). */
  deltas: Snapshot[];
}

/**
 * What a restore starts from (upstream GetLatestFullSnapshotAndDeltaSnapList): walking from the newest,
 * chunks are skipped and deltas collected until the first full.
 */
export function latestSet(list: readonly Snapshot[]): LatestSet {
  const sorted = sortSnapshots(list);
  const deltas: Snapshot[] = [];
  for (let i = sorted.length - 1; i >= 0; i--) {
    const snap = sorted[i] as Snapshot;
    if (snap.isChunk) continue;
    if (snap.kind === 'Full') return { full: snap, deltas: sortSnapshots(deltas) };
    deltas.push(snap);
  }
  return { full: undefined, deltas: sortSnapshots(deltas) };
}

/** The newest `n` full snapshots (chunks excluded), newest first; [] when n <= 0. */
export function latestFulls(list: readonly Snapshot[], n: number): Snapshot[] {
  const out: Snapshot[] = [];
  const sorted = sortSnapshots(list);
  for (let i = sorted.length - 1; i >= 0 && out.length < n; i--) {
    const snap = sorted[i] as Snapshot;
    if (!snap.isChunk && snap.kind === 'Full') out.push(snap);
  }
  return out;
}

/**
 * Upstream GetFilteredBackups (used by copy): backups = a full and the deltas after it; sorted by the
 * full's creation time, newest first; `filter` is applied to the full; the first `maxBackups` passing
 * backups (-1 = all) are flattened as the full followed by its deltas, newest delta first. Deltas
 * older than the oldest full belong to no backup and are left out.
 */
export function filteredBackups(list: readonly Snapshot[], maxBackups: number, filter?: (full: Snapshot) => boolean): Snapshot[] {
  const sorted = sortSnapshots(list);
  const backups: Array<{ full: Snapshot; deltas: Snapshot[] }> = [];
  let deltas: Snapshot[] = [];
  for (let i = sorted.length - 1; i >= 0; i--) {
    const snap = sorted[i] as Snapshot;
    if (snap.isChunk) continue;
    if (snap.kind === 'Full') {
      backups.push({ full: snap, deltas });
      deltas = [];
    } else {
      deltas.push(snap);
    }
  }
  backups.sort((a, b) => b.full.createdOn.getTime() - a.full.createdOn.getTime());
  const out: Snapshot[] = [];
  let count = 0;
  for (const backup of backups) {
    if (maxBackups >= 0 && count === maxBackups) break;
    if (filter !== undefined && !filter(backup.full)) continue;
    out.push(backup.full, ...backup.deltas);
    count++;
  }
  return out;
}
