/**
 * `--hash-drill-schedule`: its three forms, and when each says the next drill is due (src/config/drill-schedule.ts).
 */
import { describe, expect, it } from 'vitest';
import { AFTER_FULL, AFTER_FULL_MIN_INTERVAL_MS, drillScheduleOf, nextDrillAt } from '../../src/config/drill-schedule.js';
import { hashDrillScheduleGroup } from '../../src/config/groups/misc.js';

const T = Date.parse('2026-11-28T10:00:00Z');
const HOUR = 3_600_000;

describe('--hash-drill-schedule', () => {
  it("defaults to 'after-full', an hour apart at least", () => {
    expect(hashDrillScheduleGroup.defaults().hashDrillSchedule).toBe(AFTER_FULL);
    expect(drillScheduleOf(AFTER_FULL)).toEqual({ kind: 'after-full', minIntervalMs: HOUR });
    expect(AFTER_FULL_MIN_INTERVAL_MS).toBe(HOUR);
  });

  it('after-full: nothing until a full is stored, then at once the first time', () => {
    const s = drillScheduleOf(AFTER_FULL);
    expect(nextDrillAt(s, { now: T, fullSinceLastDrill: false })).toBeUndefined();
    expect(nextDrillAt(s, { now: T, fullSinceLastDrill: true })).toBe(T);
  });

  it('after-full: a full within the hour of the last drill waits for the hour; a later one goes at once', () => {
    const s = drillScheduleOf(AFTER_FULL);
    expect(nextDrillAt(s, { now: T, lastStartedAt: T - 10 * 60_000, fullSinceLastDrill: true })).toBe(T + 50 * 60_000);
    expect(nextDrillAt(s, { now: T, lastStartedAt: T - 2 * HOUR, fullSinceLastDrill: true })).toBe(T);
    expect(nextDrillAt(s, { now: T, lastStartedAt: T - 2 * HOUR, fullSinceLastDrill: false })).toBeUndefined();
  });

  it('a cron spec: its next activation, fulls or not', () => {
    const s = drillScheduleOf('30 */2 * * *', 'UTC');
    expect(nextDrillAt(s, { now: T, fullSinceLastDrill: false })).toBe(Date.parse('2026-11-28T10:30:00Z'));
    expect(nextDrillAt(s, { now: T + HOUR, lastStartedAt: T, fullSinceLastDrill: true })).toBe(Date.parse('2026-11-28T12:30:00Z'));
  });

  it('empty: never', () => {
    expect(drillScheduleOf('')).toEqual({ kind: 'off' });
    expect(nextDrillAt(drillScheduleOf(''), { now: T, fullSinceLastDrill: true })).toBeUndefined();
  });

  it('the flag refuses what is neither a cron spec, after-full nor empty', () => {
    const issues: string[] = [];
    const collect = { add: (m: string) => issues.push(m) };
    const flag = (f: string) => `--${f}`;
    for (const v of ['', AFTER_FULL, '@every 5m', '0 */1 * * *'])
      hashDrillScheduleGroup.validate!({ hashDrillSchedule: v }, collect as never, flag as never);
    expect(issues).toEqual([]);
    hashDrillScheduleGroup.validate!({ hashDrillSchedule: 'after full' }, collect as never, flag as never);
    expect(issues).toHaveLength(1);
    expect(issues[0]).toContain("or use 'after-full'");
  });
});
