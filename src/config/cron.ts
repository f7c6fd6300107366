import { parseGoDuration, ValueError } from './values.js';

/**
 * Validates a cron expression the way upstream's robfig/cron `ParseStandard` does: five fields
 * (minute hour day-of-month month day-of-week), `*`, `?`, ranges, steps, lists, month and weekday names,
 * descriptors (`@hourly`, `@every 1h`, ...) and an optional `TZ=`/`CRON_TZ=` prefix. Extensions other
 * cron libraries accept (`L`, `W`, `#`, seconds, weekday 7) are rejected, as upstream rejects them.
 *
 * Returns a message describing the problem, or undefined when the expression is valid.
 */
export function cronScheduleError(spec: string): string | undefined {
  let s = spec.trim();
  if (s === '') return 'empty spec string';
  if (s.startsWith('TZ=') || s.startsWith('CRON_TZ=')) {
    const space = s.indexOf(' ');
    const tz = s.slice(s.indexOf('=') + 1, space < 0 ? undefined : space);
    try {
      new Intl.DateTimeFormat('en-US', { timeZone: tz });
    } catch {
      return `provided bad location ${tz}`;
    }
    s = space < 0 ? '' : s.slice(space).trim();
  }
  if (s.startsWith('@')) return descriptorError(s);
  const fields = s.split(/\s+/).filter((f) => f !== '');
  if (fields.length !== 5) return `expected exactly 5 fields, found ${fields.length}: ${s}`;
  for (let i = 0; i < 5; i++) {
    const err = fieldError(fields[i] as string, CRON_FIELD_BOUNDS[i] as CronFieldBounds);
    if (err !== undefined) return err;
  }
  return undefined;
}

/** The values a cron field may take (robfig's bounds), and the names it accepts for some. */
export interface CronFieldBounds {
  min: number;
  max: number;
  names?: Readonly<Record<string, number>>;
}

const MONTHS = { jan: 1, feb: 2, mar: 3, apr: 4, may: 5, jun: 6, jul: 7, aug: 8, sep: 9, oct: 10, nov: 11, dec: 12 };
const DAYS = { sun: 0, mon: 1, tue: 2, wed: 3, thu: 4, fri: 5, sat: 6 };
/** Minute, hour, day of month, month, day of week. */
export const CRON_FIELD_BOUNDS: readonly CronFieldBounds[] = [
  { min: 0, max: 59 },
  { min: 0, max: 23 },
  { min: 1, max: 31 },
  { min: 1, max: 12, names: MONTHS },
  { min: 0, max: 6, names: DAYS },
];

function descriptorError(s: string): string | undefined {
  switch (s) {
    case '@yearly':
    case '@annually':
    case '@monthly':
    case '@weekly':
    case '@daily':
    case '@midnight':
    case '@hourly':
      return undefined;
  }
  if (s.startsWith('@every ')) {
    try {
      parseGoDuration(s.slice('@every '.length));
      return undefined;
    } catch (err) {
      return `failed to parse duration ${s}: ${err instanceof ValueError ? err.message : String(err)}`;
    }
  }
  return `unrecognized descriptor: ${s}`;
}

function parseIntStrict(expr: string, whole: string): number | string {
  if (!/^[+-]?[0-9]+$/.test(expr)) return `failed to parse int from ${expr}: strconv.Atoi: parsing ${JSON.stringify(expr)}: invalid syntax`;
  const n = Number(expr);
  if (n < 0) return `negative number (${n}) not allowed: ${whole}`;
  return n;
}

function fieldError(field: string, b: CronFieldBounds): string | undefined {
  for (const expr of field.split(',')) {
    const rangeAndStep = expr.split('/');
    if (rangeAndStep.length > 2) return `too many slashes: ${expr}`;
    const lowAndHigh = (rangeAndStep[0] as string).split('-');
    const single = lowAndHigh.length === 1;
    let start: number;
    let end: number;
    if (lowAndHigh[0] === '*' || lowAndHigh[0] === '?') {
      start = b.min;
      end = b.max;
    } else {
      if (lowAndHigh.length > 2) return `too many hyphens: ${expr}`;
      const lo = nameOrInt(lowAndHigh[0] as string, b, expr);
      if (typeof lo === 'string') return lo;
      start = lo;
      end = lo;
      if (lowAndHigh.length === 2) {
        const hi = nameOrInt(lowAndHigh[1] as string, b, expr);
        if (typeof hi === 'string') return hi;
        end = hi;
      }
    }
    if (rangeAndStep.length === 2) {
      const step = parseIntStrict(rangeAndStep[1] as string, expr);
      if (typeof step === 'string') return step;
      if (single) end = b.max;
      if (step === 0) return `step of range should be a positive number: ${expr}`;
    }
    if (start < b.min) return `beginning of range (${start}) below minimum (${b.min}): ${expr}`;
    if (end > b.max) return `end of range (${end}) above maximum (${b.max}): ${expr}`;
    if (start > end) return `beginning of range (${start}) beyond end of range (${end}): ${expr}`;
  }
  return undefined;
}

function nameOrInt(s: string, b: CronFieldBounds, expr: string): number | string {
  const named = b.names?.[s.toLowerCase()];
  if (named !== undefined) return named;
  return parseIntStrict(s, expr);
}
