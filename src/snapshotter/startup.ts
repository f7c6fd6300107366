import { wallTime, zonedTime, type CronSchedule } from '../config/schedule.js';

/**
 * Upstream IsFullSnapshotRequiredAtStartup (pkg/snapshot/snapshotter/snapshotter.go) with its helpers
 * WasScheduledFullSnapshotMissed, IsNextFullSnapshotBeyondTimeWindow and miscellaneous.GetPrevScheduledSnapTime.
 * Upstream reads time.Now() separately in each helper; one `now` is used here.
 */

export interface StartupFullSnapshotInput {
  /** Latest full snapshot in the store (upstream PrevFullSnapshot), undefined if none. */
  prevFull: { createdOn: Date; isFinal: boolean } | undefined;
  /** Upstream PrevFullSnapshotSucceeded: false once a full snapshot attempt in this process failed. */
  prevFullSucceeded: boolean;
  now: Date;
  schedule: CronSchedule;
  /** From fullSnapshotMaxTimeWindowHours(schedule). */
  timeWindowHours: number;
  /**
   * etcd's current revision and the last revision the store's chain holds (ours). etcd below the store means
   * it was restored or replaced: its next writes reuse revisions the chain already has.
   */
  revisions?: { etcd: number; store: number };
}

export type StartupFullSnapshotReason =
  | 'etcd-behind-store'
  | 'no-previous-full'
  | 'previous-full-final'
  | 'previous-full-too-old'
  | 'previous-full-failed'
  | 'previous-full-on-schedule'
  | 'next-full-beyond-window'
  | 'next-full-within-window';

export interface StartupFullSnapshotDecision {
  required: boolean;
  reason: StartupFullSnapshotReason;
}

const HOUR_MS = 3_600_000;

/** The decision and which upstream branch made it (for logging). */
export function decideFullSnapshotAtStartup(input: StartupFullSnapshotInput): StartupFullSnapshotDecision {
  const { prevFull, now, schedule, timeWindowHours: window } = input;
  if (input.revisions && input.revisions.etcd < input.revisions.store) return { required: true, reason: 'etcd-behind-store' };
  if (prevFull === undefined) return { required: true, reason: 'no-previous-full' };
  if (prevFull.isFinal) return { required: true, reason: 'previous-full-final' };
  const ageHours = (now.getTime() - prevFull.createdOn.getTime()) / HOUR_MS;
  if (ageHours > window) return { required: true, reason: 'previous-full-too-old' };
  if (!input.prevFullSucceeded) return { required: true, reason: 'previous-full-failed' };

  const next = schedule.next(now);
  // Exact instant equality (Go's Time.Equal): snapshot names carry whole seconds and cron ticks fall on
  // second 0, so in practice this means "same minute and second as the computed previous tick".
  const prevScheduled = previousScheduledSnapshotTime(next, window, schedule.localTimeZone);
  if (prevScheduled.getTime() === prevFull.createdOn.getTime()) {
    return { required: false, reason: 'previous-full-on-schedule' };
  }
  const untilNextHours = (next.getTime() - now.getTime()) / HOUR_MS;
  return untilNextHours + ageHours > window
    ? { required: true, reason: 'next-full-beyond-window' }
    : { required: false, reason: 'next-full-within-window' };
}

export function isFullSnapshotRequiredAtStartup(input: StartupFullSnapshotInput): boolean {
  return decideFullSnapshotAtStartup(input).required;
}

/**
 * Upstream GetPrevScheduledSnapTime: NOT the previous cron tick but `next` with int(window) subtracted from its
 * hour field in wall-clock terms (time.Date normalisation in next's location, which is time.Local — the
 * schedule's local zone even when the spec has a TZ= prefix). Across a DST change this differs from subtracting
 * window × 3600 s; for schedules whose ticks are not evenly spaced by the window (`0 *\/5 * * *` at 00:00, a
 * weekday list, …) it is not a real tick at all and the decision falls through to the window check.
 */
export function previousScheduledSnapshotTime(next: Date, timeWindowHours: number, zone: string): Date {
  const w = wallTime(next.getTime(), zone);
  return zonedTime({ ...w, hour: w.hour - Math.trunc(timeWindowHours) }, zone);
}
