import { CodedError } from '../errors.js';

export class SnapshotterStoppedError extends CodedError {
  readonly code = 'E_SNAPSHOTTER_STOPPED';
  override readonly name = 'SnapshotterStoppedError';
}

/**
 * Abort reason for `run` when this sidecar stops leading while the process goes on. The next leader's
 * sidecar (often another process) catches up from the store's last snapshot; writing the buffered events
 * now could land after it read the store, and two deltas would start at the same revision. So the run only
 * waits for writes already under way and leaves the buffered events to the next leader (as upstream does).
 */
export class LeadershipLost extends CodedError {
  readonly code = 'E_LEADERSHIP_LOST';
  override readonly name = 'LeadershipLost';
}

/** etcd under the watch is no longer the history the chain records (restored to an older revision, replaced). */
export class TimelineChangedError extends CodedError {
  override readonly name = 'TimelineChangedError';
  readonly code = 'E_TIMELINE_CHANGED';
}

/** The catch-up's watch did not reach etcd's revision within the snapshot timeout (too much history to replay). */
export class CatchUpTooSlowError extends CodedError {
  override readonly name = 'CatchUpTooSlowError';
  readonly code = 'E_CATCH_UP_TOO_SLOW';
}
