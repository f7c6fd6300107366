/**
 * Go-syntax value parsing and formatting, shared by the flag parser and the config file, so that a value
 * is accepted (or rejected, with the same message) wherever upstream's Go code would.
 *
 * Error messages copy Go's (`strconv.ParseUint: parsing "x": invalid syntax`, `time: invalid duration "x"`)
 * because pflag embeds them in its own messages and users search for them.
 */
import { CodedError } from '../errors.js';

export class ValueError extends CodedError {
  readonly code = 'E_INVALID_VALUE';
  override readonly name = 'ValueError';
}

/** Go's `strconv.Quote` for the strings that occur in practice (JSON escaping is close enough). */
export function goQuote(s: string): string {
  return JSON.stringify(s);
}

/** `strconv.ParseBool`: exactly the spellings Go accepts. */
export function parseGoBool(s: string): boolean {
  switch (s) {
    case '1':
    case 't':
    case 'T':
    case 'TRUE':
    case 'true':
    case 'True':
      return true;
    case '0':
    case 'f':
    case 'F':
    case 'FALSE':
    case 'false':
    case 'False':
      return false;
  }
  throw new ValueError(`strconv.ParseBool: parsing ${goQuote(s)}: invalid syntax`);
}

/** Go's rule for `_` in base-prefixed literals: only between digits, or between the base prefix and a digit. */
function underscoreOK(input: string): boolean {
  let s = input;
  if (s.startsWith('-') || s.startsWith('+')) s = s.slice(1);
  let saw = '^';
  let i = 0;
  let hex = false;
  const p = s[1]?.toLowerCase();
  if (s.length >= 2 && s[0] === '0' && (p === 'b' || p === 'o' || p === 'x')) {
    i = 2;
    saw = '0';
    hex = p === 'x';
  }
  for (; i < s.length; i++) {
    const c = s[i] as string;
    const lc = c.toLowerCase();
    if ((c >= '0' && c <= '9') || (hex && lc >= 'a' && lc <= 'f')) {
      saw = '0';
      continue;
    }
    if (c === '_') {
      if (saw !== '0') return false;
      saw = '_';
      continue;
    }
    if (saw === '_') return false;
    saw = '!';
  }
  return saw !== '_';
}

/**
 * `strconv.ParseUint(s, 0, bits)` without the sign: base prefixes 0x/0o/0b and a leading 0 (octal),
 * underscores as Go allows them. Returns undefined on a syntax error, the exact value otherwise.
 */
function parseUnsignedBase0(s: string): bigint | undefined {
  if (s === '') return undefined;
  let base = 10;
  let digits = s;
  if (s[0] === '0') {
    const p = s[1]?.toLowerCase();
    if (s.length >= 3 && p === 'x') {
      base = 16;
      digits = s.slice(2);
    } else if (s.length >= 3 && p === 'o') {
      base = 8;
      digits = s.slice(2);
    } else if (s.length >= 3 && p === 'b') {
      base = 2;
      digits = s.slice(2);
    } else {
      base = 8;
      digits = s.slice(1);
    }
  }
  let sawUnderscore = false;
  let n = 0n;
  const b = BigInt(base);
  for (const c of digits) {
    if (c === '_') {
      sawUnderscore = true;
      continue;
    }
    const d = parseInt(c, 36);
    if (Number.isNaN(d) || d >= base) return undefined;
    n = n * b + BigInt(d);
  }
  if (sawUnderscore && !underscoreOK(s)) return undefined;
  return n;
}

/**
 * pflag's uint/uint32 (`strconv.ParseUint(s, 0, bits)`). Values beyond 2^53-1 are rejected as out of
 * range even for 64-bit flags, because they would lose precision as JavaScript numbers.
 */
export function parseGoUint(s: string, bits: 32 | 64): number {
  const n = parseUnsignedBase0(s);
  if (n === undefined) throw new ValueError(`strconv.ParseUint: parsing ${goQuote(s)}: invalid syntax`);
  const max = bits === 32 ? 0xffff_ffffn : BigInt(Number.MAX_SAFE_INTEGER);
  if (n > max) throw new ValueError(`strconv.ParseUint: parsing ${goQuote(s)}: value out of range`);
  return Number(n);
}

/** pflag's int/int64 (`strconv.ParseInt(s, 0, 64)`), limited to safe JavaScript integers. */
export function parseGoInt(s: string): number {
  let body = s;
  let neg = false;
  if (s.startsWith('-') || s.startsWith('+')) {
    neg = s[0] === '-';
    body = s.slice(1);
  }
  const n = parseUnsignedBase0(body);
  if (n === undefined) throw new ValueError(`strconv.ParseInt: parsing ${goQuote(s)}: invalid syntax`);
  if (n > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new ValueError(`strconv.ParseInt: parsing ${goQuote(s)}: value out of range`);
  }
  return neg ? -Number(n) : Number(n);
}

const NS_PER_MS = 1_000_000n;
const DURATION_UNITS: Readonly<Record<string, bigint>> = {
  ns: 1n,
  us: 1_000n,
  '\u00b5s': 1_000n, // U+00B5 micro sign
  '\u03bcs': 1_000n, // U+03BC Greek mu
  ms: 1_000_000n,
  s: 1_000_000_000n,
  m: 60_000_000_000n,
  h: 3_600_000_000_000n,
};
const MAX_NS = (1n << 63n) - 1n;

/**
 * `time.ParseDuration`, exactly as Go accepts it (`300ms`, `1h30m`, `1.5h`, `-1s`, `0`), returning
 * nanoseconds. Overflow past int64 is an error, as in Go.
 */
export function parseGoDurationNs(orig: string): bigint {
  const invalid = (): ValueError => new ValueError(`time: invalid duration ${goQuote(orig)}`);
  let s = orig;
  let neg = false;
  if (s !== '' && (s[0] === '-' || s[0] === '+')) {
    neg = s[0] === '-';
    s = s.slice(1);
  }
  if (s === '0') return 0n;
  if (s === '') throw invalid();
  let total = 0n;
  while (s !== '') {
    const c0 = s[0] as string;
    if (!(c0 === '.' || (c0 >= '0' && c0 <= '9'))) throw invalid();
    const intMatch = /^[0-9]*/.exec(s)?.[0] ?? '';
    s = s.slice(intMatch.length);
    let fracDigits = '';
    let post = false;
    if (s.startsWith('.')) {
      s = s.slice(1);
      fracDigits = /^[0-9]*/.exec(s)?.[0] ?? '';
      s = s.slice(fracDigits.length);
      post = fracDigits.length > 0;
    }
    if (intMatch === '' && !post) throw invalid();
    let i = 0;
    while (i < s.length) {
      const c = s[i] as string;
      if (c === '.' || (c >= '0' && c <= '9')) break;
      i++;
    }
    if (i === 0) throw new ValueError(`time: missing unit in duration ${goQuote(orig)}`);
    const u = s.slice(0, i);
    s = s.slice(i);
    const unit = DURATION_UNITS[u];
    if (unit === undefined) throw new ValueError(`time: unknown unit ${goQuote(u)} in duration ${goQuote(orig)}`);
    let v = intMatch === '' ? 0n : BigInt(intMatch);
    if (v > (1n << 63n) / unit) throw invalid();
    v *= unit;
    if (fracDigits !== '') {
      // Go multiplies in float64; integer arithmetic gives the exact (floored) value instead.
      v += (BigInt(fracDigits) * unit) / 10n ** BigInt(fracDigits.length);
      if (v > 1n << 63n) throw invalid();
    }
    total += v;
    if (total > 1n << 63n) throw invalid();
  }
  if (neg) return -total;
  if (total > MAX_NS) throw invalid();
  return total;
}

/** `time.ParseDuration` in milliseconds (fractional below 1 ms), the unit every Duration field uses. */
export function parseGoDuration(s: string): number {
  const ns = parseGoDurationNs(s);
  return Number(ns / NS_PER_MS) + Number(ns % NS_PER_MS) / 1e6;
}

function fmtFrac(v: bigint, prec: number): string {
  const scale = 10n ** BigInt(prec);
  const int = v / scale;
  let frac = (v % scale).toString().padStart(prec, '0').replace(/0+$/, '');
  if (frac !== '') frac = '.' + frac;
  return int.toString() + frac;
}

/** Go's `time.Duration.String()` for a duration given in milliseconds: `1h30m0s`, `300ms`, `0s`. */
export function formatGoDuration(ms: number): string {
  const ns = BigInt(Math.round(ms * 1e6));
  if (ns === 0n) return '0s';
  const neg = ns < 0n;
  const u = neg ? -ns : ns;
  let out: string;
  if (u < 1_000_000_000n) {
    if (u < 1_000n) out = `${u}ns`;
    else if (u < 1_000_000n) out = `${fmtFrac(u, 3)}\u00b5s`;
    else out = `${fmtFrac(u, 6)}ms`;
  } else {
    out = `${fmtFrac(u % 60_000_000_000n, 9)}s`;
    if (u >= 60_000_000_000n) {
      const totalMin = u / 60_000_000_000n;
      out = `${totalMin % 60n}m${out}`;
      if (totalMin >= 60n) out = `${totalMin / 60n}h${out}`;
    }
  }
  return neg ? '-' + out : out;
}

/**
 * One record of Go's `encoding/csv` reader with default settings, as pflag's StringSlice uses it:
 * comma-separated, `"` quoting with `""` as an escaped quote, no trimming, a bare `"` in an unquoted
 * field is an error. The record ends at the first newline outside quotes.
 */
export function parseCsvRecord(input: string): string[] {
  if (input === '') return [];
  // Go's reader skips empty lines before the first record.
  const s = input.replace(/^(\r?\n)+/, '');
  if (s === '') throw new ValueError('EOF');
  const fields: string[] = [];
  let pos = 0;
  const col = (): number => input.length - s.length + pos + 1;
  for (;;) {
    if (s[pos] === '"') {
      pos++;
      let field = '';
      for (;;) {
        const q = s.indexOf('"', pos);
        if (q < 0) {
          pos = s.length;
          throw new ValueError(`parse error on line 1, column ${col()}: extraneous or missing " in quoted-field`);
        }
        field += s.slice(pos, q);
        pos = q + 1;
        if (s[pos] === '"') {
          field += '"';
          pos++;
          continue;
        }
        break;
      }
      fields.push(field);
      const next = s[pos];
      if (next === ',') {
        pos++;
        continue;
      }
      if (next === undefined || next === '\n' || (next === '\r' && s[pos + 1] === '\n')) return fields;
      throw new ValueError(`parse error on line 1, column ${col()}: extraneous or missing " in quoted-field`);
    }
    let end = pos;
    while (end < s.length && s[end] !== ',' && s[end] !== '\n') end++;
    let field = s.slice(pos, end);
    if (s[end] === '\n' && field.endsWith('\r')) field = field.slice(0, -1);
    const bare = field.indexOf('"');
    if (bare >= 0) {
      pos += bare;
      throw new ValueError(`parse error on line 1, column ${col()}: bare " in non-quoted-field`);
    }
    fields.push(field);
    if (s[end] === ',') {
      pos = end + 1;
      continue;
    }
    return fields;
  }
}

/** pflag's rendering of a string list (`[a,b]`), used for defaults in help text. */
export function formatStringList(values: readonly string[]): string {
  return `[${values.join(',')}]`;
}
