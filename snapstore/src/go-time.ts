/** Go's `time.Time` as upstream's names and JSON carry it: whole Unix seconds, RFC 3339 with nanoseconds. */
import { SnapStoreError } from './errors.js';

/** Go's `Time.Unix()`: whole seconds, rounded down (also before 1970). */
export function unixSeconds(d: Date): number {
  return Math.floor(d.getTime() / 1000);
}

/** Go's RFC3339Nano for a UTC time: fraction with trailing zeros dropped, `Z`. */
export function formatGoTime(d: Date): string {
  const pad = (n: number, w: number): string => String(n).padStart(w, '0');
  const year = d.getUTCFullYear();
  if (year < 0 || year > 9999) {
    throw new SnapStoreError('E_BAD_NAME', `time ${d.toISOString()} is outside the years 0000-9999 JSON can carry`);
  }
  const ms = d.getUTCMilliseconds();
  const fraction = ms === 0 ? '' : `.${pad(ms, 3)}`.replace(/0+$/, '');
  return (
    `${pad(year, 4)}-${pad(d.getUTCMonth() + 1, 2)}-${pad(d.getUTCDate(), 2)}` +
    `T${pad(d.getUTCHours(), 2)}:${pad(d.getUTCMinutes(), 2)}:${pad(d.getUTCSeconds(), 2)}${fraction}Z`
  );
}

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

/** RFC 3339 with up to 9 fractional digits (truncated to ms); years below 100 are taken literally. */
export function parseGoTime(s: string): Date | undefined {
  const m = RFC3339.exec(s);
  if (m === null) return undefined;
  const num = (i: number): number => Number(m[i] ?? '0');
  const d = new Date(0);
  d.setUTCFullYear(num(1), num(2) - 1, num(3));
  d.setUTCHours(num(4), num(5), num(6), Number((m[7] ?? '').padEnd(3, '0').slice(0, 3)));
  if (m[9] !== undefined) {
    const offsetMinutes = (num(10) * 60 + num(11)) * (m[9] === '-' ? -1 : 1);
    d.setTime(d.getTime() - offsetMinutes * 60_000);
  }
  return Number.isNaN(d.getTime()) ? undefined : d;
}
