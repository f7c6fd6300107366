import type { Snapshot } from '@etcdbrctl/snapstore';

/**
 * The one rule for skipping a full snapshot, for scheduled, on-demand and final ones alike: the previous
 * snapshot is returned instead of storing a new one only when a *final* full is asked for and the previous
 * snapshot is already a final full at etcd's current revision (upstream `takeFullSnapshot` in
 * pkg/snapshot/snapshotter/snapshotter.go).
 *
 * A non-final full is always taken, even when nothing changed since the previous one. Upstream skipped
 * those too until v0.31 and stopped in gardener/etcd-backup-restore#804 (issue #797): a skipped scheduled
 * full leaves `etcdbr_snapshot_latest_timestamp{kind="Full"}` and the full-snapshot lease behind, so the
 * "no full snapshot within the schedule" alerts fire on every idle cluster. Our own PrometheusRule has the
 * same alert, so we follow the current rule.
 */
export function fullSnapshotToReuse(prev: Snapshot | undefined, isFinal: boolean, currentRevision: number): Snapshot | undefined {
  if (!isFinal || prev === undefined) return undefined;
  if (prev.kind !== 'Full' || !prev.isFinal) return undefined;
  return prev.lastRevision === currentRevision ? prev : undefined;
}
