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

/** Logs deltas and revisions applied, the rate, and an estimate of the time left, every few seconds. */
export class ReplayProgress {
  private readonly started = Date.now();
  private lastLog = 0;

  constructor(
    private readonly plan: RestorePlan,
    private readonly startRevision: number,
    private readonly logger: Logger,
  ) {}

  delta(snap: Snapshot, revision: number): void {
    const now = Date.now();
    const last = snap === this.plan.deltas.at(-1);
    if (!last && now - this.lastLog < 5000) return;
    this.lastLog = now;
    const done = revision - this.startRevision;
    const total = this.plan.targetRevision - this.startRevision;
    const secs = (now - this.started) / 1000;
    const rate = secs > 0 ? done / secs : 0;
    const etaSeconds = rate > 0 ? Math.max(0, (total - done) / rate) : undefined;
    this.logger.info(
      {
        delta: snap.snapName,
        deltasApplied: this.plan.deltas.indexOf(snap) + 1,
        deltas: this.plan.deltas.length,
        revision,
        targetRevision: this.plan.targetRevision,
        revisionsPerSecond: Math.round(rate),
        ...(etaSeconds !== undefined ? { etaSeconds: Math.round(etaSeconds) } : {}),
      },
      'applying delta snapshots',
    );
  }
}
