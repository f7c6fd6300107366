/** What both replay paths tell the operator while they apply the deltas. */
import type { Logger, Snapshot } from '@etcdbrctl/snapstore';
import type { RestorePlan } from './plan.js';

/** Said once per delta that continues the previous one's last revision (both replay paths join them). */
export function logContinuedRevision(logger: Logger, snapName: string, revision: number): void {
  logger.warn(
    { snapshot: snapName, revision },
    "delta snapshot continues the previous delta's last revision (its snapshotter cut the deltas inside a transaction); applying both parts as that one revision",
  );
}

/** Said once per delta that shares events with the one before it (overlap.ts): they are applied once. */
export function logOverlap(logger: Logger, delta: Snapshot, previous: Snapshot, sharedEvents: number): void {
  logger.info(
    { snapshot: delta.snapName, previous: previous.snapName, sharedEvents },
    'delta snapshot overlaps the previous one (two leaders wrote the same revisions); the shared events are identical and applied once',
  );
}

/** How often a progress line is logged while deltas are applied (the last delta is always logged). */
const LOG_INTERVAL_MS = 5000;

/**
 * The shortest stretch of applying, counted from the first delta applied, whose rate is worth an estimate.
 * The time before the first delta is fetching and opening, not applying, and a rate over the first second or
 * two is mostly noise: an estimate from either once said `etaSeconds=2974` for a replay that ended 0.5 s later.
 */
const RATE_WINDOW_MS = 5000;

/**
 * Logs deltas and revisions applied every few seconds, and, once a rate has been measured over a few seconds
 * of applying, that rate and an estimate of the time left. The last line gives the replay's overall rate.
 */
export class ReplayProgress {
  private readonly started: number;
  private lastLog = 0;
  /** When the first delta was applied and the revision it reached: the start of the measured rate. */
  private first: { at: number; revision: number } | undefined;

  constructor(
    private readonly plan: RestorePlan,
    private readonly startRevision: number,
    private readonly logger: Logger,
    /** Milliseconds; tests pass their own. */
    private readonly now: () => number = Date.now,
  ) {
    this.started = now();
  }

  delta(snap: Snapshot, revision: number): void {
    const now = this.now();
    const last = snap === this.plan.deltas.at(-1);
    const first = this.first;
    if (first === undefined) this.first = { at: now, revision };
    else if (!last && now - this.lastLog < LOG_INTERVAL_MS) return;
    this.lastLog = now;
    let rate: number | undefined;
    let etaSeconds: number | undefined;
    if (last) {
      // Nothing is left to estimate; the rate over the whole replay (fetching included) is a fact by now.
      const secs = (now - this.started) / 1000;
      if (secs > 0) rate = (revision - this.startRevision) / secs;
    } else if (first !== undefined && now - first.at >= RATE_WINDOW_MS && revision > first.revision) {
      rate = (revision - first.revision) / ((now - first.at) / 1000);
      etaSeconds = Math.max(0, (this.plan.targetRevision - revision) / rate);
    }
    this.logger.info(
      {
        delta: snap.snapName,
        deltasApplied: this.plan.deltas.indexOf(snap) + 1,
        deltas: this.plan.deltas.length,
        revision,
        targetRevision: this.plan.targetRevision,
        ...(rate !== undefined ? { revisionsPerSecond: Math.round(rate) } : {}),
        ...(etaSeconds !== undefined ? { etaSeconds: Math.round(etaSeconds) } : {}),
      },
      'applying delta snapshots',
    );
  }
}
