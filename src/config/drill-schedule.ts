/**
 * `--hash-drill-schedule`: when the leader runs the hash drill (src/verifier/hash-drill.ts). Three forms:
 * - `after-full` (the default): after each full snapshot the leader stores, but at most once an hour: a full
 *   stored within the hour of the last drill's start is drilled at that hour's end (one drill then covers every
 *   full stored meanwhile). A drill proves the newest chain, which a new full starts; with the default hourly
 *   `--schedule` that is one drill an hour, right after the full.
 * - a cron spec (the parser of `--schedule`): on that schedule, whatever was stored.
 * - empty: never (`etcdbrctl verify --against-endpoints` still drills on demand).
 * `nextDrillAt` is the decision alone; the runner (src/verifier/drill-runner.ts) keeps the state and the timer.
 */
import { CronSchedule } from './schedule.js';

export const AFTER_FULL = 'after-full';
/** The least time between the starts of two drills in the `after-full` form. */
export const AFTER_FULL_MIN_INTERVAL_MS = 60 * 60_000;

export type DrillSchedule = { kind: 'off' } | { kind: 'after-full'; minIntervalMs: number } | { kind: 'cron'; cron: CronSchedule };

/** The schedule a (validated) flag value names. */
export function drillScheduleOf(spec: string, timeZone?: string): DrillSchedule {
  if (spec.trim() === '') return { kind: 'off' };
  if (spec.trim() === AFTER_FULL) return { kind: 'after-full', minIntervalMs: AFTER_FULL_MIN_INTERVAL_MS };
  return { kind: 'cron', cron: new CronSchedule(spec, timeZone === undefined ? {} : { timeZone }) };
}

export interface DrillState {
  /** Now, in ms since the epoch. */
  now: number;
  /** When the last drill started (undefined: none yet this term). */
  lastStartedAt?: number;
  /** A full snapshot was stored since the last drill started (or this term began). */
  fullSinceLastDrill: boolean;
}

/** When the next drill is due (ms since the epoch; at most `now` means at once), or undefined: not until a full is stored. */
export function nextDrillAt(schedule: DrillSchedule, state: DrillState): number | undefined {
  switch (schedule.kind) {
    case 'off':
      return undefined;
    case 'cron':
      return schedule.cron.next(new Date(state.now)).getTime();
    case 'after-full':
      if (!state.fullSinceLastDrill) return undefined;
      return state.lastStartedAt === undefined ? state.now : Math.max(state.now, state.lastStartedAt + schedule.minIntervalMs);
  }
}
