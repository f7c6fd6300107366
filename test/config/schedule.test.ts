import { describe, expect, it } from 'vitest';
import {
  CronSchedule,
  CronScheduleError,
  GO_ZERO_TIME_MS,
  fullSnapshotMaxTimeWindowHours,
  isZeroTime,
  processTimeZone,
  wallTime,
  zonedTime,
} from '../../src/config/schedule.js';

const nextUtc = (spec: string, after: string): string => new CronSchedule(spec, { timeZone: 'UTC' }).next(new Date(after)).toISOString();

describe('fullSnapshotMaxTimeWindowHours (upstream GetFullSnapshotMaxTimeWindow)', () => {
  it.each([
    // upstream's own examples / unit tests
    ['0 */1 * * *', 1],
    ['0 */4 * * *', 4],
    ['20 10 * * *', 24],
    ['20 10 * * 4', 168],
    ['0 0 * * 1', 168],
    // default schedule and other shapes
    ['0 */24 * * *', 24],
    ['0 0 * * *', 24],
    ['0 1-23/2 * * *', 2],
    ['0 */6 1 * *', 24], // day-of-month restricted
    ['0 */6 * 1 *', 6], // month is not looked at
    ['0 */6 * * ?', 168], // `?` is not `*` for this textual check
    ['0 */6 * * 1-5', 168],
    ['*/5 * * * *', 24], // only the hour field's step counts
    ['0 */2,*/3 * * *', 24], // text after the first `/` is not a number
    ['  0   */8  *  *  *  ', 8],
    ['@hourly', 24],
    ['@weekly', 24],
    ['@every 1h', 24],
    ['TZ=UTC 0 */4 * * *', 24], // prefix shifts the fields: dom slot holds `*/4`
    ['TZ=UTC 0 0 * * 1', 24], // dow slot holds `*`, dom slot `0`
    ['CRON_TZ=UTC 0 0 * 1 *', 168], // dow slot holds `1`
    ['', 24],
  ])('%j ⇒ %d', (spec, want) => {
    expect(fullSnapshotMaxTimeWindowHours(spec)).toBe(want);
  });

  it('parses the step as a float like strconv.ParseFloat', () => {
    expect(fullSnapshotMaxTimeWindowHours('0 +3/3 * * *')).toBe(3);
    expect(fullSnapshotMaxTimeWindowHours('0 */03 * * *')).toBe(3);
  });
});

describe('CronSchedule.next (robfig ParseStandard semantics)', () => {
  it.each([
    // strictly after, second 0
    ['0 */1 * * *', '2024-05-10T10:30:00Z', '2024-05-10T11:00:00.000Z'],
    ['0 */1 * * *', '2024-05-10T11:00:00Z', '2024-05-10T12:00:00.000Z'],
    ['0 */1 * * *', '2024-05-10T10:59:59.999Z', '2024-05-10T11:00:00.000Z'],
    ['0 */4 * * *', '2024-05-10T10:30:00Z', '2024-05-10T12:00:00.000Z'],
    ['0 */24 * * *', '2024-05-10T10:30:00Z', '2024-05-11T00:00:00.000Z'],
    ['*/15 * * * *', '2024-05-10T10:31:00Z', '2024-05-10T10:45:00.000Z'],
    ['5/20 * * * *', '2024-05-10T10:46:00Z', '2024-05-10T11:05:00.000Z'], // N/step = N-max/step
    ['0 0 * * 1', '2024-05-10T10:30:00Z', '2024-05-13T00:00:00.000Z'], // Fri ⇒ Mon
    ['0 0 * * mon-fri', '2024-05-10T10:30:00Z', '2024-05-13T00:00:00.000Z'],
    ['0 0 1 jan *', '2024-05-10T10:30:00Z', '2025-01-01T00:00:00.000Z'],
    ['0 0 */3 * *', '2024-05-10T10:30:00Z', '2024-05-13T00:00:00.000Z'], // defrag default: days 1,4,…,31
    ['0 0 */3 * *', '2024-05-31T10:30:00Z', '2024-06-01T00:00:00.000Z'],
    ['? ? ? ? ?', '2024-05-10T10:30:00Z', '2024-05-10T10:31:00.000Z'],
    ['0 0 31 * *', '2024-04-10T00:00:00Z', '2024-05-31T00:00:00.000Z'],
    ['0 0 29 2 *', '2024-05-10T10:30:00Z', '2028-02-29T00:00:00.000Z'],
  ])('%j after %s ⇒ %s', (spec, after, want) => {
    expect(nextUtc(spec, after)).toBe(want);
  });

  it.each([
    // both day fields restricted ⇒ either matches (2024-05-10 is a Friday)
    ['0 0 13 * 5', '2024-05-10T10:30:00Z', '2024-05-13T00:00:00.000Z'],
    ['0 0 13 * 5', '2024-05-13T10:30:00Z', '2024-05-17T00:00:00.000Z'],
    // `*/2` in day-of-month clears robfig's star bit ⇒ OR with Monday: the 11th (odd day) matches
    ['0 0 */2 * 1', '2024-05-10T10:30:00Z', '2024-05-11T00:00:00.000Z'],
    // `*/1` keeps the star bit ⇒ AND ⇒ only Mondays
    ['0 0 */1 * 1', '2024-05-10T10:30:00Z', '2024-05-13T00:00:00.000Z'],
    // `1-31` covers every day but is restricted ⇒ OR ⇒ every day
    ['0 0 1-31 * 1', '2024-05-10T10:30:00Z', '2024-05-11T00:00:00.000Z'],
    // `?` is a star: AND ⇒ Mondays
    ['0 0 ? * 1', '2024-05-10T10:30:00Z', '2024-05-13T00:00:00.000Z'],
  ])('day-of-month/day-of-week: %j after %s ⇒ %s', (spec, after, want) => {
    expect(nextUtc(spec, after)).toBe(want);
  });

  it.each([
    ['@yearly', '2024-05-10T10:30:00Z', '2025-01-01T00:00:00.000Z'],
    ['@annually', '2024-05-10T10:30:00Z', '2025-01-01T00:00:00.000Z'],
    ['@monthly', '2024-05-10T10:30:00Z', '2024-06-01T00:00:00.000Z'],
    ['@weekly', '2024-05-10T10:30:00Z', '2024-05-12T00:00:00.000Z'], // Sunday
    ['@daily', '2024-05-10T10:30:00Z', '2024-05-11T00:00:00.000Z'],
    ['@midnight', '2024-05-10T10:30:00Z', '2024-05-11T00:00:00.000Z'],
    ['@hourly', '2024-05-10T10:30:00Z', '2024-05-10T11:00:00.000Z'],
    // @every: after with the sub-second part dropped, plus the whole-second delay; at least 1 s
    ['@every 1h30m', '2024-05-10T10:30:00.123Z', '2024-05-10T12:00:00.000Z'],
    ['@every 1.5s', '2024-05-10T10:30:00.900Z', '2024-05-10T10:30:01.000Z'],
    ['@every 10ms', '2024-05-10T10:30:00.500Z', '2024-05-10T10:30:01.000Z'],
    ['@every -5m', '2024-05-10T10:30:00Z', '2024-05-10T10:30:01.000Z'],
  ])('descriptor %j after %s ⇒ %s', (spec, after, want) => {
    expect(nextUtc(spec, after)).toBe(want);
  });

  it('matches in the process-local stand-in zone', () => {
    const berlin = new CronSchedule('0 2 * * *', { timeZone: 'Europe/Berlin' });
    expect(berlin.next(new Date('2024-05-10T10:30:00Z')).toISOString()).toBe('2024-05-11T00:00:00.000Z'); // 02:00 CEST
    expect(berlin.next(new Date('2024-01-10T10:30:00Z')).toISOString()).toBe('2024-01-11T01:00:00.000Z'); // 02:00 CET
    const def = new CronSchedule('0 0 * * *');
    expect(def.localTimeZone).toBe(processTimeZone());
  });

  it('a TZ=/CRON_TZ= prefix overrides the zone used for matching', () => {
    const s = new CronSchedule('CRON_TZ=Asia/Kolkata 0 9 * * *', { timeZone: 'UTC' });
    expect(s.location).toBe('Asia/Kolkata');
    expect(s.localTimeZone).toBe('UTC');
    expect(s.next(new Date('2024-05-10T10:30:00Z')).toISOString()).toBe('2024-05-11T03:30:00.000Z');
    expect(new CronSchedule('TZ=UTC @daily', { timeZone: 'Europe/Berlin' }).next(new Date('2024-05-10T10:30:00Z')).toISOString()).toBe(
      '2024-05-11T00:00:00.000Z',
    );
  });

  it('returns the Go zero time when nothing matches (robfig accepts the spec)', () => {
    for (const spec of ['0 0 30 2 *', '0 0 31 4,6,9,11 *']) {
      const next = new CronSchedule(spec, { timeZone: 'UTC' }).next(new Date('2024-05-10T10:30:00Z'));
      expect(isZeroTime(next)).toBe(true);
      expect(next.getTime()).toBe(GO_ZERO_TIME_MS);
    }
    // ... and beyond robfig's search limit (year of the start + 5): after 2096 the next 29 Feb is in 2104
    const leap = new CronSchedule('0 0 29 2 *', { timeZone: 'UTC' });
    expect(isZeroTime(leap.next(new Date('2098-03-01T00:00:00Z')))).toBe(true);
    expect(leap.next(new Date('2099-03-01T00:00:00Z')).toISOString()).toBe('2104-02-29T00:00:00.000Z');
  });

  it.each([
    ['', /empty spec/],
    ['0 0 * *', /exactly 5 fields/],
    ['0 0 0 * * *', /exactly 5 fields/],
    ['60 * * * *', /above maximum/],
    ['0 0 L * *', /failed to parse int/],
    ['0 0 * * 7', /above maximum/],
    ['@reboot', /unrecognized descriptor/],
    ['@every 1x', /failed to parse duration/],
    ['TZ=Nowhere/Land 0 0 * * *', /bad location/],
  ])('rejects %j', (spec, message) => {
    expect(() => new CronSchedule(spec)).toThrow(CronScheduleError);
    expect(() => new CronSchedule(spec)).toThrow(message);
  });

  it('rejects an unknown local zone and an invalid date', () => {
    expect(() => new CronSchedule('0 0 * * *', { timeZone: 'Mars/Olympus' })).toThrow(RangeError);
    expect(() => new CronSchedule('0 0 * * *', { timeZone: 'UTC' }).next(new Date(Number.NaN))).toThrow(/CronSchedule.next: invalid date/);
  });

  // robfig's walk: a time in the skipped DST hour does not fire that day; one in the repeated hour fires twice.
  it('DST transitions follow robfig/cron', () => {
    const s = new CronSchedule('30 2 * * *', { timeZone: 'Europe/Berlin' });
    expect(s.next(new Date('2024-03-31T00:00:00Z')).toISOString()).toBe('2024-04-01T00:30:00.000Z'); // 02:30 CEST next day
    expect(s.next(new Date('2024-10-27T00:00:00Z')).toISOString()).toBe('2024-10-27T00:30:00.000Z'); // 02:30 CEST
    expect(s.next(new Date('2024-10-27T00:30:00Z')).toISOString()).toBe('2024-10-27T01:30:00.000Z'); // 02:30 CET, again
    expect(s.next(new Date('2024-10-27T01:30:00Z')).toISOString()).toBe('2024-10-28T01:30:00.000Z'); // next day
    // A daily job at midnight in a zone whose DST change is at midnight (Santiago, 2024-09-08 00:00 ⇒ 01:00).
    const santiago = new CronSchedule('0 0 * * *', { timeZone: 'America/Santiago' });
    expect(santiago.next(new Date('2024-09-07T12:00:00Z')).toISOString()).toBe('2024-09-09T03:00:00.000Z'); // 8 Sept has no midnight: skipped;
    // Hourly across the spring-forward gap: 01:00 CET, then 03:00 CEST.
    const hourly = new CronSchedule('0 * * * *', { timeZone: 'Europe/Berlin' });
    expect(hourly.next(new Date('2024-03-31T00:00:00Z')).toISOString()).toBe('2024-03-31T01:00:00.000Z');
  });

  it.each([
    // month and day edges in UTC
    ['0 0 31 * *', '2024-04-15T00:00:00Z', '2024-05-31T00:00:00.000Z'],
    ['0 0 29 2 *', '2024-03-01T00:00:00Z', '2028-02-29T00:00:00.000Z'],
    ['59 23 31 12 *', '2024-12-31T23:59:00Z', '2025-12-31T23:59:00.000Z'],
    ['0 0 1 jan *', '2024-12-31T23:59:59.999Z', '2025-01-01T00:00:00.000Z'],
    ['*/15 * * * *', '2024-05-10T10:44:59.999Z', '2024-05-10T10:45:00.000Z'],
    ['*/15 * * * *', '2024-05-10T10:45:00.000Z', '2024-05-10T11:00:00.000Z'],
    ['0 */4 * * *', '2024-05-10T21:00:00Z', '2024-05-11T00:00:00.000Z'],
    // restricted day of month and day of week: either matches (robfig's star bit off on both)
    ['0 0 13 * fri', '2024-05-10T10:30:00Z', '2024-05-13T00:00:00.000Z'],
    // a star (`*/1` too) in either: both must match, so the other alone decides
    ['0 0 13 * */1', '2024-05-10T10:30:00Z', '2024-05-13T00:00:00.000Z'],
    ['0 0 */1 * fri', '2024-05-10T10:30:00Z', '2024-05-17T00:00:00.000Z'],
  ])('%j after %s ⇒ %s', (spec, after, want) => {
    expect(nextUtc(spec, after)).toBe(want);
  });

  it('matches in UTC without loading time-zone data (no Intl call)', () => {
    const original = Intl.DateTimeFormat;
    let calls = 0;
    const counting = function (this: unknown, ...args: ConstructorParameters<typeof Intl.DateTimeFormat>) {
      calls++;
      return new original(...args);
    } as unknown as typeof Intl.DateTimeFormat;
    Intl.DateTimeFormat = counting;
    try {
      const s = new CronSchedule('0 */1 * * *', { timeZone: 'Etc/UTC' });
      expect(s.next(new Date('2024-05-10T10:30:00Z')).toISOString()).toBe('2024-05-10T11:00:00.000Z');
      expect(wallTime(Date.parse('2024-05-10T22:30:15.250Z'), 'UTC').hour).toBe(22);
      expect(zonedTime({ year: 2024, month: 5, day: 10, hour: 3, minute: 0, second: 0, millisecond: 0 }, 'UTC').toISOString()).toBe(
        '2024-05-10T03:00:00.000Z',
      );
    } finally {
      Intl.DateTimeFormat = original;
    }
    expect(calls).toBe(0);
  });
});

describe('zone helpers (Go time.Date / t.Hour() on a Location)', () => {
  it('wallTime reads civil fields in a zone', () => {
    expect(wallTime(Date.parse('2024-05-10T22:30:15.250Z'), 'Asia/Kolkata')).toEqual({
      year: 2024,
      month: 5,
      day: 11,
      hour: 4,
      minute: 0,
      second: 15,
      millisecond: 250,
    });
    expect(wallTime(GO_ZERO_TIME_MS, 'UTC')).toMatchObject({ year: 1, month: 1, day: 1, hour: 0 });
  });

  it('zonedTime normalises out-of-range fields like time.Date', () => {
    const w = { year: 2024, month: 3, day: 1, hour: -1, minute: 0, second: 0, millisecond: 0 };
    expect(zonedTime(w, 'UTC').toISOString()).toBe('2024-02-29T23:00:00.000Z');
    expect(zonedTime({ ...w, hour: 24 * 7 - 168 + 5 }, 'UTC').toISOString()).toBe('2024-03-01T05:00:00.000Z');
    expect(zonedTime({ ...w, year: 1, month: 1, hour: 0 }, 'UTC').getTime()).toBe(GO_ZERO_TIME_MS);
  });

  it("maps skipped and repeated local times the way Go's time.Date does", () => {
    const at = (day: number, hour: number): string =>
      zonedTime(
        { year: 2024, month: day === 31 ? 3 : 10, day, hour, minute: 30, second: 0, millisecond: 0 },
        'Europe/Berlin',
      ).toISOString();
    expect(at(31, 2)).toBe('2024-03-31T01:30:00.000Z'); // 02:30 does not exist ⇒ 03:30 CEST
    expect(at(27, 2)).toBe('2024-10-27T01:30:00.000Z'); // 02:30 twice ⇒ the later (CET) one
    expect(at(27, 1)).toBe('2024-10-26T23:30:00.000Z');
  });
});
