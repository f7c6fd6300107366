/**
 * When a compacted full snapshot says it was created: now, but always in a later second than every snapshot
 * of the store that ends at the same revision (the last delta it folds in).
 *
 * Upstream orders snapshots with equal last revisions by their creation second (`SnapList.Less`,
 * pkg/types/snapstore.go) and sorts with Go's unstable `sort.Sort`; its restore walks that order from the
 * newest (`GetLatestFullSnapshotAndDeltaSnapList`, pkg/miscellaneous/miscellaneous.go). A compacted full
 * named in the same second as that delta can sort before it: the Go restore then takes the delta as one to
 * apply on top of the compacted full, replays all of it again (`applyFirstDeltaSnapshot` starts at the first
 * event when none is newer than the base) and fails with "mismatched event revision". Upstream's own
 * compactor runs an etcd for seconds before it names its snapshot; the offline compaction can finish within
 * the second the last delta was written (the interop suite, e2e/interop, hit it), and a compact Job's clock
 * may lag the sidecar's.
 */
import { creationTimeAfter, type Snapshot } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';

/** `now`, or the start of the second after the newest creation second among `listing`'s snapshots at `revision`. */
export function compactedSnapshotTime(now: Date, listing: readonly Snapshot[], revision: number): Date {
  return creationTimeAfter(now, listing, revision);
}

/** `clock`, whose `now()` names the compacted full snapshot at `revision` (compactedSnapshotTime). */
export function compactedSnapshotClock(clock: Clock, listing: readonly Snapshot[], revision: number): Clock {
  return {
    now: () => compactedSnapshotTime(clock.now(), listing, revision),
    setTimeout: (fn, ms) => clock.setTimeout(fn, ms),
    clearTimeout: (handle) => clock.clearTimeout(handle),
    sleep: (ms, signal) => clock.sleep(ms, signal),
  };
}
