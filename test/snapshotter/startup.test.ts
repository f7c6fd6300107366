import { describe, expect, it } from 'vitest';
import { CronSchedule, fullSnapshotMaxTimeWindowHours } from '../../src/config/schedule.js';
import {
  decideFullSnapshotAtStartup,
  isFullSnapshotRequiredAtStartup,
  previousScheduledSnapshotTime,
  type StartupFullSnapshotReason,
} from '../../src/snapshotter/startup.js';

// A fixed "now" (Friday 2024-05-10 10:20 UTC); upstream's tests build their cases from the current hour/minute.
const NOW = '2024-05-10T10:20:00Z';

interface Case {
  name: string;
  schedule: string;
  prevFull?: { createdOn: string; isFinal?: boolean };
  prevFullSucceeded?: boolean;
  now?: string;
  zone?: string;
  required: boolean;
  reason: StartupFullSnapshotReason;
}

function decide(c: Case): { required: boolean; reason: StartupFullSnapshotReason } {
  const schedule = new CronSchedule(c.schedule, { timeZone: c.zone ?? 'UTC' });
  return decideFullSnapshotAtStartup({
    prevFull: c.prevFull && { createdOn: new Date(c.prevFull.createdOn), isFinal: c.prevFull.isFinal ?? false },
    prevFullSucceeded: c.prevFullSucceeded ?? true,
    now: new Date(c.now ?? NOW),
    schedule,
    timeWindowHours: fullSnapshotMaxTimeWindowHours(c.schedule),
  });
}

describe('isFullSnapshotRequiredAtStartup (upstream IsFullSnapshotRequiredAtStartup)', () => {
  const cases: Case[] = [
    // --- the first four checks ---
    { name: 'no previous full snapshot', schedule: '21 12 * * *', required: true, reason: 'no-previous-full' },
    {
      name: 'previous full is final (even if recent and on schedule)',
      schedule: '21 12 * * *',
      prevFull: { createdOn: '2024-05-09T12:21:00Z', isFinal: true },
      required: true,
      reason: 'previous-full-final',
    },
    {
      name: 'previous full older than the window (2 days, upstream test)',
      schedule: '21 12 * * *',
      prevFull: { createdOn: '2024-05-08T10:20:00Z' },
      required: true,
      reason: 'previous-full-too-old',
    },
    {
      name: 'just over the window',
      schedule: '0 */4 * * *',
      prevFull: { createdOn: '2024-05-10T06:19:59Z' },
      required: true,
      reason: 'previous-full-too-old',
    },
    {
      name: 'previous full attempt failed in this process',
      schedule: '21 12 * * *',
      prevFull: { createdOn: '2024-05-09T12:21:00Z' },
      prevFullSucceeded: false,
      required: true,
      reason: 'previous-full-failed',
    },
    // --- on schedule ---
    {
      name: 'acceptance: recent full taken exactly at the previous tick ⇒ initial delta instead (upstream test)',
      schedule: '21 12 * * *',
      prevFull: { createdOn: '2024-05-09T12:21:00Z' },
      required: false,
      reason: 'previous-full-on-schedule',
    },
    {
      name: 'hourly-step schedule, full at the previous 4-hour tick',
      schedule: '0 */4 * * *',
      prevFull: { createdOn: '2024-05-10T08:00:00Z' },
      required: false,
      reason: 'previous-full-on-schedule',
    },
    {
      name: 'weekly schedule, full at last Monday 00:00 (168 h window)',
      schedule: '0 0 * * 1',
      prevFull: { createdOn: '2024-05-06T00:00:00Z' },
      required: false,
      reason: 'previous-full-on-schedule',
    },
    // --- otherwise: (time until next tick) + (age) > window ---
    {
      name: 'full 4h10m ago, next tick in 4h ⇒ within 24 h (upstream test)',
      schedule: '20 14 * * *',
      prevFull: { createdOn: '2024-05-10T06:10:00Z' },
      required: false,
      reason: 'next-full-within-window',
    },
    {
      name: 'full 18 h ago, next tick in 8 h ⇒ 26 h > 24 h (upstream test)',
      schedule: '20 18 * * *',
      prevFull: { createdOn: '2024-05-09T16:20:00Z' },
      required: true,
      reason: 'next-full-beyond-window',
    },
    {
      name: 'one second off the tick is not "on schedule" (instant equality)',
      schedule: '21 12 * * *',
      prevFull: { createdOn: '2024-05-09T12:21:01Z' },
      required: false,
      reason: 'next-full-within-window',
    },
    {
      name: 'sub-second difference is not "on schedule" either',
      schedule: '21 12 * * *',
      prevFull: { createdOn: '2024-05-09T12:21:00.500Z' },
      required: false,
      reason: 'next-full-within-window',
    },
    {
      // (until next) + age is just next − createdOn: one second short of the window here
      name: 'one second after the tick: next − createdOn < window',
      schedule: '0 */4 * * *',
      prevFull: { createdOn: '2024-05-10T08:00:01Z' },
      now: '2024-05-10T11:59:59Z',
      required: false,
      reason: 'next-full-within-window',
    },
    {
      name: 'off-schedule full 2.5 h ago + 1.67 h to next 4-hour tick > 4 h',
      schedule: '0 */4 * * *',
      prevFull: { createdOn: '2024-05-10T07:50:00Z' },
      required: true,
      reason: 'next-full-beyond-window',
    },
    {
      // `*/5` hours: ticks 0,5,10,15,20 — from 20:00 to 00:00 is only 4 h, so next−5 h is not a tick
      name: 'uneven ticks: the "previous scheduled time" is next − window, not the real previous tick',
      schedule: '0 */5 * * *',
      prevFull: { createdOn: '2024-05-10T20:00:00Z' },
      now: '2024-05-10T22:00:00Z',
      required: false,
      reason: 'next-full-within-window',
    },
    {
      // robfig finds no tick ⇒ Go zero time ⇒ hugely negative "time until next" ⇒ not required
      name: 'schedule that never fires ⇒ not required (upstream arithmetic with the zero time)',
      schedule: '0 0 30 2 *',
      prevFull: { createdOn: '2024-05-10T00:00:00Z' },
      required: false,
      reason: 'next-full-within-window',
    },
    {
      name: 'local zone: daily 02:00 Berlin time, full at yesterday 02:00 CEST',
      schedule: '0 2 * * *',
      zone: 'Europe/Berlin',
      prevFull: { createdOn: '2024-05-10T00:00:00Z' },
      required: false,
      reason: 'previous-full-on-schedule',
    },
  ];

  it.each(cases)('$name', (c) => {
    expect(decide(c)).toEqual({ required: c.required, reason: c.reason });
    const schedule = new CronSchedule(c.schedule, { timeZone: c.zone ?? 'UTC' });
    expect(
      isFullSnapshotRequiredAtStartup({
        prevFull: c.prevFull && { createdOn: new Date(c.prevFull.createdOn), isFinal: c.prevFull.isFinal ?? false },
        prevFullSucceeded: c.prevFullSucceeded ?? true,
        now: new Date(c.now ?? NOW),
        schedule,
        timeWindowHours: fullSnapshotMaxTimeWindowHours(c.schedule),
      }),
    ).toBe(c.required);
  });
});

describe('previousScheduledSnapshotTime (upstream GetPrevScheduledSnapTime)', () => {
  it('subtracts int(window) from the hour field', () => {
    const next = new Date('2024-05-10T12:00:00Z');
    expect(previousScheduledSnapshotTime(next, 4, 'UTC').toISOString()).toBe('2024-05-10T08:00:00.000Z');
    expect(previousScheduledSnapshotTime(next, 24, 'UTC').toISOString()).toBe('2024-05-09T12:00:00.000Z');
    expect(previousScheduledSnapshotTime(next, 168, 'UTC').toISOString()).toBe('2024-05-03T12:00:00.000Z');
    expect(previousScheduledSnapshotTime(next, 4.9, 'UTC').toISOString()).toBe('2024-05-10T08:00:00.000Z');
  });

  it('works in wall-clock time across DST, so a day can be 23 or 25 real hours', () => {
    // Berlin springs forward on 2024-03-31: midnight-to-midnight is 23 h.
    const next = new Date('2024-03-31T22:00:00Z'); // 2024-04-01 00:00 CEST
    expect(previousScheduledSnapshotTime(next, 24, 'Europe/Berlin').toISOString()).toBe('2024-03-30T23:00:00.000Z');
    // ... and falls back on 2024-10-27: 25 h.
    const next2 = new Date('2024-10-27T23:00:00Z'); // 2024-10-28 00:00 CET
    expect(previousScheduledSnapshotTime(next2, 24, 'Europe/Berlin').toISOString()).toBe('2024-10-26T22:00:00.000Z');
  });

  it('an on-schedule full across a DST change is recognised', () => {
    const schedule = new CronSchedule('0 0 * * *', { timeZone: 'Europe/Berlin' });
    expect(
      decideFullSnapshotAtStartup({
        prevFull: { createdOn: new Date('2024-03-30T23:00:00Z'), isFinal: false }, // 2024-03-31 00:00 CET
        prevFullSucceeded: true,
        now: new Date('2024-03-31T10:00:00Z'),
        schedule,
        timeWindowHours: 24,
      }),
    ).toEqual({ required: false, reason: 'previous-full-on-schedule' });
  });
});

describe('etcd below the store at start-up (ours: etcd was restored or replaced)', () => {
  const base = {
    prevFull: { createdOn: new Date('2024-05-10T10:00:00Z'), isFinal: false },
    prevFullSucceeded: true,
    now: new Date('2024-05-10T10:20:00Z'),
    schedule: new CronSchedule('0 */1 * * *', { timeZone: 'UTC' }),
    timeWindowHours: fullSnapshotMaxTimeWindowHours('0 */1 * * *'),
  };

  it('a full snapshot starts a new chain when etcd is below the store', () => {
    expect(decideFullSnapshotAtStartup({ ...base, revisions: { etcd: 99, store: 100 } })).toEqual({
      required: true,
      reason: 'etcd-behind-store',
    });
  });

  it('the chain continues when etcd is at or above the store', () => {
    expect(decideFullSnapshotAtStartup({ ...base, revisions: { etcd: 100, store: 100 } })).toEqual({
      required: false,
      reason: 'previous-full-on-schedule',
    });
    expect(decideFullSnapshotAtStartup({ ...base, revisions: { etcd: 150, store: 100 } }).required).toBe(false);
  });
});
