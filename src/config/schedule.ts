import { CodedError, EtcdbrError } from '../errors.js';
import { CRON_FIELD_BOUNDS, cronScheduleError, type CronFieldBounds } from './cron.js';
import { parseGoDurationNs } from './values.js';

/**
 * Upstream parses schedules with robfig/cron v3 `ParseStandard` (5 fields, descriptors, `@every`, optional
 * `TZ=`/`CRON_TZ=` prefix) and finds the next activation with its `SpecSchedule.Next`. Both are done here with
 * robfig's rules: its "star bit", which decides the day-of-month/day-of-week combination, and its calendar
 * walk, which also decides what happens around DST changes (a time in the skipped hour does not fire that
 * day, a time in the repeated hour fires twice).
 *
 * No cron library and, in UTC (where upstream images and ours run), no Intl: the zone arithmetic below is
 * plain Date arithmetic for UTC, and ICU's time-zone data (about 8 MB of a sidecar's memory) is only touched
 * for a named zone with an offset.
 */

/** Go's zero `time.Time` (0001-01-01T00:00:00Z): what robfig's Next returns when nothing matches within 5 years. */
export const GO_ZERO_TIME_MS = -62_135_596_800_000;

export function isZeroTime(d: Date): boolean {
  return d.getTime() === GO_ZERO_TIME_MS;
}

export class CronScheduleError extends CodedError {
  readonly code = 'E_INVALID_SCHEDULE';
  constructor(
    readonly spec: string,
    message: string,
  ) {
    super(message);
    this.name = 'CronScheduleError';
  }
}

export interface CronScheduleOptions {
  /**
   * IANA zone standing in for Go's `time.Local` (default: this process's zone, i.e. `TZ`). A `TZ=`/`CRON_TZ=`
   * prefix in the spec overrides it for matching, as in robfig.
   */
  timeZone?: string;
}

interface SpecFields {
  minute: number[];
  hour: number[];
  dom: number[];
  month: number[];
  dow: number[];
  domStar: boolean;
  dowStar: boolean;
}

/** A spec's fields as robfig keeps them: one flag per value, and the day fields' star bits. */
interface SpecMatch {
  minute: boolean[];
  hour: boolean[];
  dom: boolean[];
  month: boolean[];
  dow: boolean[];
  domStar: boolean;
  dowStar: boolean;
}

type Plan = { kind: 'spec'; match: SpecMatch } | { kind: 'every'; delayMs: number };

export class CronSchedule {
  readonly spec: string;
  /** The `time.Local` stand-in: zone of the times `next` is reasoned about in (see startup's wall-clock arithmetic). */
  readonly localTimeZone: string;
  /** Zone from a `TZ=`/`CRON_TZ=` prefix, if any. */
  readonly location: string | undefined;
  private readonly plan: Plan;

  /** Throws `CronScheduleError` for specs robfig's ParseStandard rejects. */
  constructor(spec: string, opts: CronScheduleOptions = {}) {
    const err = cronScheduleError(spec);
    if (err !== undefined) throw new CronScheduleError(spec, err);
    this.spec = spec;
    this.localTimeZone = opts.timeZone ?? processTimeZone();
    checkZone(this.localTimeZone); // rejects unknown zones early

    let s = spec.trim();
    if (s.startsWith('TZ=') || s.startsWith('CRON_TZ=')) {
      const space = s.indexOf(' ');
      this.location = s.slice(s.indexOf('=') + 1, space);
      s = s.slice(space).trim();
    }
    this.plan = buildPlan(s);
  }

  /** Zone the fields are matched in. */
  get matchTimeZone(): string {
    return this.location ?? this.localTimeZone;
  }

  /**
   * First activation strictly after `after` (at whole-second granularity, like robfig), or the Go zero time
   * (`isZeroTime`) when none exists within five years — upstream then refuses to arm the full-snapshot timer
   * ("error in full snapshot schedule").
   */
  next(after: Date): Date {
    const t = after.getTime();
    if (Number.isNaN(t)) throw new EtcdbrError('E_INTERNAL', 'CronSchedule.next: invalid date');
    switch (this.plan.kind) {
      case 'every':
        // robfig ConstantDelaySchedule: drop the sub-second part, then add the (whole-second) delay.
        return new Date(Math.floor(t / 1000) * 1000 + this.plan.delayMs);
      case 'spec':
        return new Date(nextActivation(this.plan.match, t, this.matchTimeZone));
    }
  }
}

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;

/**
 * robfig's SpecSchedule.Next: from the next whole second, advance the largest field that does not match
 * (month, then day, hour, minute), resetting the smaller ones the first time; a field that wraps around
 * starts over from the month ("WRAP"). Months and days advance in civil time (Go's AddDate, which keeps the
 * wall clock), hours and minutes in absolute time (Go's Add), which is what makes DST behave as upstream.
 */
function nextActivation(m: SpecMatch, afterMs: number, zone: string): number {
  let t = Math.floor(afterMs / 1000) * 1000 + 1000;
  let w = wallTime(t, zone);
  const yearLimit = w.year + 5;
  let added = false;
  for (;;) {
    // WRAP
    if (w.year > yearLimit) return GO_ZERO_TIME_MS;
    let wrapped = false;
    while (!m.month[w.month]) {
      if (!added) {
        added = true;
        t = zonedTime({ year: w.year, month: w.month, day: 1, hour: 0, minute: 0, second: 0, millisecond: 0 }, zone).getTime();
        w = wallTime(t, zone);
      }
      t = zonedTime({ ...w, month: w.month + 1 }, zone).getTime();
      w = wallTime(t, zone);
      if (w.month === 1) {
        wrapped = true;
        break;
      }
    }
    if (wrapped) continue;
    while (!dayMatches(m, w)) {
      if (!added) {
        added = true;
        t = zonedTime({ year: w.year, month: w.month, day: w.day, hour: 0, minute: 0, second: 0, millisecond: 0 }, zone).getTime();
        w = wallTime(t, zone);
      }
      t = zonedTime({ ...w, day: w.day + 1 }, zone).getTime();
      w = wallTime(t, zone);
      // A DST change can move midnight: back to it (forward from 23h, back from 1h), as robfig does.
      if (w.hour !== 0) {
        t += w.hour > 12 ? (24 - w.hour) * HOUR_MS : -w.hour * HOUR_MS;
        w = wallTime(t, zone);
      }
      if (w.day === 1) {
        wrapped = true;
        break;
      }
    }
    if (wrapped) continue;
    while (!m.hour[w.hour]) {
      if (!added) {
        added = true;
        t = zonedTime({ ...w, minute: 0, second: 0, millisecond: 0 }, zone).getTime();
      }
      t += HOUR_MS;
      w = wallTime(t, zone);
      if (w.hour === 0) {
        wrapped = true;
        break;
      }
    }
    if (wrapped) continue;
    while (!m.minute[w.minute]) {
      if (!added) {
        added = true;
        t = Math.floor(t / MINUTE_MS) * MINUTE_MS;
      }
      t += MINUTE_MS;
      w = wallTime(t, zone);
      if (w.minute === 0) {
        wrapped = true;
        break;
      }
    }
    if (wrapped) continue;
    // The second field is always 0 in a standard spec.
    if (w.second !== 0) {
      if (!added) {
        added = true;
        t = Math.floor(t / 1000) * 1000;
      }
      t += (60 - w.second) * 1000;
      w = wallTime(t, zone);
      continue; // the seconds wrapped to 0: robfig goes to WRAP
    }
    return t;
  }
}

/** robfig dayMatches: with a star bit in either day field both must match, otherwise either. */
function dayMatches(m: SpecMatch, w: WallTime): boolean {
  const domMatch = m.dom[w.day] === true;
  const dowMatch = m.dow[weekday(w)] === true;
  return m.domStar || m.dowStar ? domMatch && dowMatch : domMatch || dowMatch;
}

/** 0 = Sunday, of the civil date `w`. */
function weekday(w: WallTime): number {
  const d = new Date(0);
  d.setUTCFullYear(w.year, w.month - 1, w.day);
  return d.getUTCDay();
}

function buildPlan(s: string): Plan {
  if (s.startsWith('@')) {
    if (s.startsWith('@every ')) {
      // robfig Every(): at least one second, sub-second remainder truncated.
      let ns = parseGoDurationNs(s.slice('@every '.length));
      if (ns < 1_000_000_000n) ns = 1_000_000_000n;
      return { kind: 'every', delayMs: Number((ns - (ns % 1_000_000_000n)) / 1_000_000n) };
    }
    const f = DESCRIPTORS[s];
    if (f === undefined) throw new CronScheduleError(s, `unrecognized descriptor: ${s}`);
    return toPlan(f);
  }
  const parts = s.split(/\s+/);
  const [minute, hour, dom, month, dow] = parts.map((p, i) => parseField(p, CRON_FIELD_BOUNDS[i] as CronFieldBounds));
  if (minute === undefined || hour === undefined || dom === undefined || month === undefined || dow === undefined) {
    throw new CronScheduleError(s, `expected exactly 5 fields, found ${parts.length}: ${s}`);
  }
  return toPlan({
    minute: minute.values,
    hour: hour.values,
    dom: dom.values,
    month: month.values,
    dow: dow.values,
    domStar: dom.star,
    dowStar: dow.star,
  });
}

function flags(values: readonly number[]): boolean[] {
  const out: boolean[] = [];
  for (const v of values) out[v] = true;
  return out;
}

function toPlan(f: SpecFields): Plan {
  return {
    kind: 'spec',
    match: {
      minute: flags(f.minute),
      hour: flags(f.hour),
      dom: flags(f.dom),
      month: flags(f.month),
      dow: flags(f.dow),
      domStar: f.domStar,
      dowStar: f.dowStar,
    },
  };
}

function range(min: number, max: number): number[] {
  return Array.from({ length: max - min + 1 }, (_, i) => min + i);
}

const ALL = { minute: range(0, 59), hour: range(0, 23), dom: range(1, 31), month: range(1, 12), dow: range(0, 6) };

// robfig's descriptors: fields written as all(...) carry the star bit, single values do not.
const DESCRIPTORS: Readonly<Record<string, SpecFields>> = {
  '@yearly': { minute: [0], hour: [0], dom: [1], month: [1], dow: ALL.dow, domStar: false, dowStar: true },
  '@annually': { minute: [0], hour: [0], dom: [1], month: [1], dow: ALL.dow, domStar: false, dowStar: true },
  '@monthly': { minute: [0], hour: [0], dom: [1], month: ALL.month, dow: ALL.dow, domStar: false, dowStar: true },
  '@weekly': { minute: [0], hour: [0], dom: ALL.dom, month: ALL.month, dow: [0], domStar: true, dowStar: false },
  '@daily': { minute: [0], hour: [0], dom: ALL.dom, month: ALL.month, dow: ALL.dow, domStar: true, dowStar: true },
  '@midnight': { minute: [0], hour: [0], dom: ALL.dom, month: ALL.month, dow: ALL.dow, domStar: true, dowStar: true },
  '@hourly': { minute: [0], hour: ALL.hour, dom: ALL.dom, month: ALL.month, dow: ALL.dow, domStar: true, dowStar: true },
};

/**
 * robfig getField/getRange: comma list (empty items skipped) of `*`/`?`, `N`, `N-M`, each with optional `/step`
 * (`N/step` means `N-max/step`). The star bit is set by a `*`/`?` item unless its step is > 1, so `*` and `*\/1`
 * count as unrestricted while `*\/2` and `1-31` count as restricted.
 */
function parseField(field: string, b: CronFieldBounds): { values: number[]; star: boolean } {
  const values = new Set<number>();
  let star = false;
  for (const expr of field.split(',')) {
    if (expr === '') continue;
    const [rangePart = '', stepPart] = expr.split('/');
    const lowHigh = rangePart.split('-');
    let start: number;
    let end: number;
    let itemStar = false;
    if (lowHigh[0] === '*' || lowHigh[0] === '?') {
      start = b.min;
      end = b.max;
      itemStar = true;
    } else {
      start = nameOrInt(lowHigh[0] ?? '', b);
      end = lowHigh.length === 2 ? nameOrInt(lowHigh[1] ?? '', b) : start;
    }
    let step = 1;
    if (stepPart !== undefined) {
      step = Number(stepPart);
      if (lowHigh.length === 1) end = b.max;
      if (step > 1) itemStar = false;
    }
    if (!Number.isInteger(start) || !Number.isInteger(end) || !Number.isInteger(step) || step < 1) {
      throw new CronScheduleError(field, `invalid cron field: ${field}`);
    }
    for (let i = start; i <= end; i += step) values.add(i);
    star ||= itemStar;
  }
  return { values: [...values].sort((x, y) => x - y), star };
}

function nameOrInt(s: string, b: CronFieldBounds): number {
  return b.names?.[s.toLowerCase()] ?? (/^[+-]?[0-9]+$/.test(s) ? Number(s) : NaN);
}

/**
 * Upstream GetFullSnapshotMaxTimeWindow (hours): the longest gap it expects between scheduled full snapshots.
 * Purely textual on whitespace-separated fields, as upstream: fewer than 5 fields (descriptors, `@every`) ⇒ 24;
 * day-of-week field not exactly `*` (even `?`) ⇒ 168; day-of-month and day-of-week `*` and the hour field
 * contains `/` ⇒ the number after the first `/` if it parses as a float (`*\/4` ⇒ 4, `1-23/2` ⇒ 2); else 24.
 * A `TZ=` prefix shifts the fields by one, exactly as it does upstream.
 */
export function fullSnapshotMaxTimeWindowHours(schedule: string): number {
  const DEFAULT = 24;
  const fields = schedule.split(/\s+/).filter((f) => f !== '');
  if (fields.length < 5) return DEFAULT;
  const hour = fields[1] as string;
  const dom = fields[2];
  const dow = fields[4];
  if (dow !== '*') return DEFAULT * 7;
  if (dom === '*' && hour.includes('/')) {
    const v = parseGoFloat(hour.slice(hour.indexOf('/') + 1));
    if (v !== undefined) return v;
  }
  return DEFAULT;
}

/** strconv.ParseFloat for decimal input (hex floats are not valid cron steps anyway). */
function parseGoFloat(s: string): number | undefined {
  if (/^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$/.test(s)) return Number(s);
  if (/^[+-]?inf(?:inity)?$/i.test(s)) return s.startsWith('-') ? -Infinity : Infinity;
  if (/^nan$/i.test(s)) return NaN;
  return undefined;
}

// ---------------------------------------------------------------------------------------------------------
// Zone arithmetic shared with startup.ts (Go's time.Date/Hour()/... on a Location).

/**
 * Names of the zone that is UTC at every instant. Their arithmetic needs no time-zone data, so a schedule in
 * one of them never loads ICU's (see the module comment).
 */
const UTC_ZONES: ReadonlySet<string> = new Set(
  ['UTC', 'UCT', 'GMT', 'GMT0', 'GMT+0', 'GMT-0', 'Greenwich', 'Universal', 'Zulu'].flatMap((z) => [z, `Etc/${z}`]),
);

function isUtc(zone: string): boolean {
  return UTC_ZONES.has(zone);
}

/**
 * This process's zone (Go's `time.Local`), as an IANA name. `UTC` without asking Intl when `TZ` names UTC,
 * or when `TZ` is unset and the zone has offset 0 in January and in July (no DST, no offset: the arithmetic
 * of every current time is UTC's, whatever the zone is called).
 */
export function processTimeZone(): string {
  const tz = process.env['TZ'];
  if (tz !== undefined && (tz === '' || isUtc(tz.replace(/^:/, '')))) return 'UTC';
  if (tz === undefined) {
    const year = new Date().getUTCFullYear();
    if (new Date(Date.UTC(year, 0, 1)).getTimezoneOffset() === 0 && new Date(Date.UTC(year, 6, 1)).getTimezoneOffset() === 0) {
      return 'UTC';
    }
  }
  return Intl.DateTimeFormat().resolvedOptions().timeZone;
}

/** Throws RangeError for a zone name Intl does not know. */
function checkZone(zone: string): void {
  if (!isUtc(zone)) zoneFormatter(zone);
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function zoneFormatter(zone: string): Intl.DateTimeFormat {
  let f = formatters.get(zone);
  if (f === undefined) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: zone,
      hourCycle: 'h23',
      era: 'short',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatters.set(zone, f);
  }
  return f;
}

export interface WallTime {
  year: number;
  /** 1–12 */
  month: number;
  day: number;
  hour: number;
  minute: number;
  second: number;
  millisecond: number;
}

/** UTC instant of the given civil fields read as UTC; out-of-range fields normalise like Go's time.Date. */
function civilAsUtc(w: WallTime): number {
  const d = new Date(0);
  d.setUTCFullYear(w.year, w.month - 1, w.day); // unlike Date.UTC, years 0–99 stay literal
  d.setUTCHours(w.hour, w.minute, w.second, w.millisecond);
  return d.getTime();
}

/** Offset (ms east of UTC) of `zone` at `instantMs`. */
function offsetAt(instantMs: number, zone: string): number {
  if (isUtc(zone)) return 0;
  const whole = Math.floor(instantMs / 1000) * 1000;
  const w: WallTime = { year: 0, month: 1, day: 1, hour: 0, minute: 0, second: 0, millisecond: 0 };
  let bc = false;
  for (const p of zoneFormatter(zone).formatToParts(whole)) {
    const n = Number(p.value);
    if (p.type === 'year') w.year = n;
    else if (p.type === 'month') w.month = n;
    else if (p.type === 'day') w.day = n;
    else if (p.type === 'hour') w.hour = n;
    else if (p.type === 'minute') w.minute = n;
    else if (p.type === 'second') w.second = n;
    else if (p.type === 'era') bc = p.value.startsWith('B');
  }
  if (bc) w.year = 1 - w.year;
  return civilAsUtc(w) - whole;
}

/** Civil time of `instantMs` in `zone` (Go's t.In(loc).Date()/Clock()). */
export function wallTime(instantMs: number, zone: string): WallTime {
  const d = new Date(instantMs + offsetAt(instantMs, zone));
  return {
    year: d.getUTCFullYear(),
    month: d.getUTCMonth() + 1,
    day: d.getUTCDate(),
    hour: d.getUTCHours(),
    minute: d.getUTCMinutes(),
    second: d.getUTCSeconds(),
    millisecond: d.getUTCMilliseconds(),
  };
}

/**
 * Go's time.Date(y, m, d, h, min, s, ns, loc): fields normalise first (hour −24 ⇒ previous day), then the
 * offset is looked up the way Go does it, which decides what a skipped or repeated local time maps to.
 */
export function zonedTime(w: WallTime, zone: string): Date {
  const unix = civilAsUtc(w);
  return new Date(unix - offsetAt(unix - offsetAt(unix, zone), zone));
}
