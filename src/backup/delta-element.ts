/**
 * The fast path of the delta parser: one element of a delta payload read straight from its bytes, when it
 * has exactly the shape Go's encoding/json gives a `{etcdEvent, time}` (and our writer, delta-write.ts, byte for byte):
 *
 *   {"etcdEvent":{["type":1,]"kv":{["key":"b64"][,"create_revision":N][,"mod_revision":N][,"version":N]
 *     [,"value":"b64"][,"lease":N]}},"time":"RFC 3339"[,"leaseTTL":N]}
 *
 * No whitespace, fields in that order, decimal numbers without a sign or leading zeros (a lease may be
 * negative), padded base64, a time without escapes, a lease TTL (ours, see DeltaEvent.leaseTTL) from 1 to etcd's
 * largest. Anything else, valid JSON or not, gives undefined and
 * the parser takes its general path (JSON.parse), which decides what it means: this function only ever
 * agrees with that path, faster (no string, no JSON.parse, no regular expression per element).
 */
import { decodeBase64, isBase64 } from './base64.js';
import { isLeaseTtl, type DeltaEvent } from './delta-format.js';
import {
  ELEMENT_OPEN,
  KV_FIELDS,
  KV_OPEN,
  LEASE_TTL as TOKEN_LEASE_TTL,
  TIME as TOKEN_TIME,
  TYPE_DELETE as TOKEN_TYPE_DELETE,
} from './delta-tokens.js';

// The shared tokens (delta-tokens.ts) under the short names this file's fast path uses.
const HEAD = ELEMENT_OPEN;
const TYPE_DELETE = TOKEN_TYPE_DELETE;
const KV = KV_OPEN;
const TIME = TOKEN_TIME;
const LEASE_TTL = TOKEN_LEASE_TTL;
/** The kv fields in the order Go writes them (mvccpb.KeyValue's field order). */
const FIELDS = KV_FIELDS;
const KEY = 0;
const VALUE = 4;
const LEASE = 5;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const CLOSE_BRACE = 0x7d;
const MINUS = 0x2d;
const ZERO = 0x30;
const NINE = 0x39;
/** Revisions and versions above this many digits could exceed 2^53: the general path handles them. */
const MAX_SAFE_DIGITS = 15;

const EMPTY: Buffer = Buffer.alloc(0);

function startsWith(buf: Uint8Array, at: number, end: number, lit: Uint8Array): boolean {
  if (at + lit.length > end) return false;
  for (let i = 0; i < lit.length; i++) if (buf[at + i] !== lit[i]) return false;
  return true;
}

/** End of the decimal number at `at` (digits, no leading zero; a minus first when `signed`), or -1. */
function numberEnd(buf: Uint8Array, at: number, end: number, signed: boolean): number {
  let i = at;
  if (signed && buf[i] === MINUS) i++;
  const digits = i;
  while (i < end && buf[i]! >= ZERO && buf[i]! <= NINE) i++;
  if (i === digits || (buf[digits] === ZERO && i - digits > 1)) return -1;
  return i;
}

/** The decimal digits in buf[start, end) (at most MAX_SAFE_DIGITS of them) as a number. */
function digitsValue(buf: Uint8Array, start: number, end: number): number {
  let v = 0;
  for (let i = start; i < end; i++) v = v * 10 + (buf[i]! - ZERO);
  return v;
}

/** What to read of an element besides its revisions and type. */
export interface ElementReading {
  /** Decode keys and values (else they are checked, and left empty). */
  payloads: boolean;
  /**
   * With `payloads`, decode values too. Else they are checked and left empty, and where the value lies is
   * set in the element's `ElementEnd`: a reader decodes it then only if it needs it (see DeltaPayloadDecoder).
   */
  values: boolean;
  /** Keep the event's time (else it is left empty). */
  times: boolean;
}

const EVERYTHING: ElementReading = { payloads: true, values: true, times: true };

/** Where a canonical element ended, and where its value's base64 lies when it was not decoded. */
export interface ElementEnd {
  end: number;
  /** -1 when the event's `value` is the value (decoded, or absent: empty). */
  valueStart: number;
  valueEnd: number;
}

/**
 * The event in buf[start, end) (one whole element, braces included) when it has the canonical shape,
 * otherwise undefined.
 */
export function decodeCanonicalElement(
  buf: Buffer,
  start: number,
  end: number,
  reading: ElementReading = EVERYTHING,
  at: ElementEnd = { end: 0, valueStart: -1, valueEnd: -1 },
): DeltaEvent | undefined {
  const ev = readCanonicalElement(buf, start, end, reading, at);
  return ev && at.end === end ? ev : undefined;
}

/**
 * The event of the canonical element that starts at buf[start] and ends at or before `end`, with `at.end`
 * set past its closing brace; undefined when the bytes there are not a canonical element or it runs past
 * `end` (the caller then finds the element's end itself). Lets a parser read an element and find its end
 * in one pass.
 */
export function readCanonicalElement(
  buf: Buffer,
  start: number,
  end: number,
  reading: ElementReading,
  at: ElementEnd,
): DeltaEvent | undefined {
  const { payloads, values } = reading;
  at.valueStart = -1;
  if (!startsWith(buf, start, end, HEAD)) return undefined;
  let p = start + HEAD.length;
  let type: DeltaEvent['type'] = 'PUT';
  if (startsWith(buf, p, end, TYPE_DELETE)) {
    type = 'DELETE';
    p += TYPE_DELETE.length;
  }
  if (!startsWith(buf, p, end, KV)) return undefined;
  p += KV.length;

  let key: Buffer = EMPTY;
  let value: Buffer = EMPTY;
  let createRevision = 0;
  let modRevision = 0;
  let version = 0;
  let lease = '0';
  let next = 0;
  while (p < end && buf[p] !== CLOSE_BRACE) {
    if (next > 0) {
      if (buf[p] !== COMMA) return undefined;
      p++;
    }
    let field = next;
    while (field < FIELDS.length && !startsWith(buf, p, end, FIELDS[field]!)) field++;
    if (field === FIELDS.length) return undefined;
    p += FIELDS[field]!.length;
    next = field + 1;
    if (field === KEY || field === VALUE) {
      // Base64 holds no quote or backslash: the first quote closes the string. Found by a native search: a
      // value is most of an event's bytes (a JS loop took 360 ns over a 700-byte value, the search 40 ns).
      const close = buf.indexOf(QUOTE, p);
      if (close < 0 || close >= end) return undefined;
      const decode = payloads && (values || field === KEY);
      const decoded = decode ? decodeBase64(buf, p, close) : isBase64(buf, p, close) ? EMPTY : undefined;
      if (decoded === undefined) return undefined;
      if (field === KEY) key = decoded;
      else if (decode) value = decoded;
      else if (payloads) {
        at.valueStart = p;
        at.valueEnd = close;
      }
      p = close + 1;
    } else if (field === LEASE) {
      const e = numberEnd(buf, p, end, true);
      if (e < 0) return undefined;
      lease = buf.toString('latin1', p, e);
      p = e;
    } else {
      const e = numberEnd(buf, p, end, false);
      if (e < 0 || e - p > MAX_SAFE_DIGITS) return undefined;
      const v = digitsValue(buf, p, e);
      if (field === 1) createRevision = v;
      else if (field === 2) modRevision = v;
      else version = v;
      p = e;
    }
    if (p >= end) return undefined;
  }
  if (!startsWith(buf, p, end, TIME)) return undefined;
  p += TIME.length;
  const timeStart = p;
  while (p < end && buf[p] !== QUOTE) {
    const b = buf[p]!;
    if (b === BACKSLASH || b < 0x20 || b > 0x7e) return undefined;
    p++;
  }
  const timeEnd = p;
  p++;
  let leaseTTL = 0;
  // Ours, and rare: one byte tells most elements apart.
  if (buf[p] === COMMA && startsWith(buf, p, end, LEASE_TTL)) {
    p += LEASE_TTL.length;
    const e = numberEnd(buf, p, end, false);
    if (e < 0 || e - p > MAX_SAFE_DIGITS) return undefined;
    leaseTTL = digitsValue(buf, p, e);
    // Out of range: the general path says what is wrong with it.
    if (!isLeaseTtl(leaseTTL)) return undefined;
    p = e;
  }
  // The element's closing brace as its last byte.
  if (p + 1 > end || buf[p] !== CLOSE_BRACE) return undefined;
  at.end = p + 1;
  const ev: DeltaEvent = {
    type,
    key,
    value,
    createRevision,
    modRevision,
    version,
    lease,
    time: reading.times ? buf.toString('latin1', timeStart, timeEnd) : '',
  };
  // Only when there is one: nearly every event has none, and they keep the shape they always had.
  if (leaseTTL > 0) ev.leaseTTL = leaseTTL;
  return ev;
}
