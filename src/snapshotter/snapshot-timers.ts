import type { Clock } from '../clock.js';
import { EtcdbrError } from '../errors.js';
import { isZeroTime, type CronSchedule } from '../config/schedule.js';

/** The full snapshot schedule's timer and the delta period's timer; each fires once per arming. */
export class SnapshotTimers {
  private fullTimer: ReturnType<Clock['setTimeout']> | undefined;
  private deltaTimer: ReturnType<Clock['setTimeout']> | undefined;

  constructor(
    private readonly clock: Clock,
    private readonly schedule: CronSchedule,
    private readonly deltaPeriodMs: number,
  ) {}

  /**
   * Arms the full snapshot timer for the schedule's next time. Throws (E_INVALID_INPUT) for a schedule that
   * never fires (e.g. 30 February): the run fails as upstream does, instead of looping.
   */
  armFull(onDue: () => void): void {
    if (this.fullTimer) this.clock.clearTimeout(this.fullTimer);
    const now = this.clock.now();
    const next = this.schedule.next(now);
    if (isZeroTime(next)) throw new EtcdbrError('E_INVALID_INPUT', 'error in full snapshot schedule: it never fires');
    this.fullTimer = this.clock.setTimeout(
      () => {
        this.fullTimer = undefined;
        onDue();
      },
      Math.max(0, next.getTime() - now.getTime()),
    );
  }

  /** Arms the delta timer one period from now. */
  armDelta(onDue: () => void): void {
    if (this.deltaTimer) this.clock.clearTimeout(this.deltaTimer);
    this.deltaTimer = this.clock.setTimeout(() => {
      this.deltaTimer = undefined;
      onDue();
    }, this.deltaPeriodMs);
  }

  clear(): void {
    if (this.fullTimer) this.clock.clearTimeout(this.fullTimer);
    if (this.deltaTimer) this.clock.clearTimeout(this.deltaTimer);
    this.fullTimer = undefined;
    this.deltaTimer = undefined;
  }
}
