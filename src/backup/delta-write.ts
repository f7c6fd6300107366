/**
 * The writer of the delta snapshot payload of etcd-backup-restore, byte for byte (upstream
 * `pkg/snapshot/snapshotter/snapshotter.go` `handleDeltaWatchEvents`, `TakeDeltaSnapshot`): a compact JSON
 * array of `{"etcdEvent":{...},"time":"..."}` elements as Go's encoding/json writes `clientv3.Event`
 * (omitempty everywhere, `type` 1 for DELETE and absent for PUT, base64 key/value; delta-tokens.ts), followed by
 * 32 raw bytes of sha256 over the JSON. The Go tool restores from these bytes, and its parser is ours too
 * (delta-parse.ts): test/backup/delta-write.test.ts pins the bytes and reads them back.
 *
 * The sidecar writes from the compact records its delta buffer holds (delta-record.ts) straight into the bytes
 * of each piece, with no string in between: building the JSON as text (base64 strings, the element, the
 * joined batch, then its UTF-8 copy) made ~4 KiB of JavaScript garbage per 1 KiB event, a scavenge every few
 * hundred events in the sidecar's small young generation. `encodeDeltaEvent` runs one event through the same
 * writer, for tests and tools that want an element as text.
 */
import { createHash } from 'node:crypto';
import { constantBytes } from '../encoding/constant-bytes.js';
import { EtcdbrError } from '../errors.js';
import { hasLease, hasLeaseTtl, type DeltaEvent } from './delta-format.js';
import { FIELD, nextRecord, RECORD_DELETE, RECORD_HEADER_BYTES, recordLength, recordModRevision, writeRecord } from './delta-record.js';
import {
  CREATE_REVISION,
  ELEMENT_CLOSE,
  ELEMENT_OPEN,
  KEY,
  KV_OPEN,
  LEASE,
  LEASE_TTL,
  MOD_REVISION,
  TIME,
  TYPE_DELETE,
  VALUE,
  VERSION,
} from './delta-tokens.js';

const OPEN_BRACKET = 0x5b;
const COMMA = 0x2c;
const CLOSE_BRACKET = 0x5d;
const QUOTE = 0x22;
const CLOSE_BRACE = 0x7d;
const DIGIT_ZERO = 0x30;
const PAD = 0x3d;
const SHA256_BYTES = 32;

/**
 * Yields the payload of the events recorded in `records` (each a run of records, in order) in pieces of about
 * `batchBytes` (an event larger than that comes as a piece of its own), then the 32-byte sha256 of the JSON.
 * One piece per event would make every downstream stage (codec, store) pay its per-chunk cost thousands of
 * times. The first event naming a lease in `leaseTtls` carries its TTL. Each call writes the payload afresh,
 * so a save that starts over gets the same bytes.
 */
export function* deltaPayloadPieces(
  records: readonly Buffer[],
  leaseTtls: ReadonlyMap<string, number> | undefined,
  batchBytes: number,
): Generator<Buffer> {
  const hash = createHash('sha256');
  const ttls = leaseTtls !== undefined && leaseTtls.size > 0 ? new LeaseTtlWriter(leaseTtls) : undefined;
  let out = Buffer.allocUnsafe(batchBytes);
  let o = 0;
  out[o++] = OPEN_BRACKET;
  let first = true;
  for (const r of records) {
    for (let at = 0; at < r.length;) {
      const bound = eventJsonBound(r, at);
      if (o + bound + 2 > out.length) {
        const piece = out.subarray(0, o);
        hash.update(piece);
        yield piece;
        out = Buffer.allocUnsafe(Math.max(batchBytes, bound + 2));
        o = 0;
      }
      if (!first) out[o++] = COMMA;
      first = false;
      const end = o + bound;
      o = writeEventJson(r, at, out, o, ttls);
      // Writes past a Buffer's end are dropped silently: a bound that fell short must fail the save, not cut the JSON.
      if (o > end) throw new EtcdbrError('E_INTERNAL', `delta event JSON at revision ${recordModRevision(r, at)} exceeds its bound`);
      at = nextRecord(r, at);
    }
  }
  out[o++] = CLOSE_BRACKET;
  const last = out.subarray(0, o);
  hash.update(last);
  yield last;
  yield hash.digest();
}

/** The payload's length for `accountedBytes` of JSON so far (`[` and the events joined by `,`): the closing `]` and the hash come on top. */
export function deltaPayloadLength(accountedBytes: number): number {
  return accountedBytes + 1 + SHA256_BYTES;
}

/**
 * One element as the payload writer writes it, as text: for tests and tools. Throws (E_INVALID_INPUT) for an
 * event the JSON cannot carry, as the delta buffer does.
 */
export function encodeDeltaEvent(ev: DeltaEvent): string {
  const length = deltaEventJsonLength(ev);
  const time = Buffer.byteLength(ev.time, 'utf8');
  const record = Buffer.allocUnsafe(recordLength(ev, time));
  writeRecord(ev, time, record, 0);
  const ttls = hasLeaseTtl(ev) ? new LeaseTtlWriter(new Map([[ev.lease, ev.leaseTTL!]])) : undefined;
  const out = Buffer.allocUnsafe(eventJsonBound(record, 0));
  const end = writeEventJson(record, 0, out, 0, ttls);
  if (end !== length)
    throw new EtcdbrError('E_INTERNAL', `delta event JSON at revision ${ev.modRevision}: ${end} bytes, counted ${length}`);
  return out.toString('utf8', 0, end);
}

/**
 * The UTF-8 length of the element the writer writes for `ev`, counted without building it: what the delta
 * buffer accounts against the memory limit while it holds the event as a record. Throws (E_INVALID_INPUT) for
 * an event the JSON cannot carry: a lease ID that is not an int64, a lease TTL etcd could not have granted.
 */
export function deltaEventJsonLength(ev: DeltaEvent): number {
  // Counted without a helper closure: called once per watched event, and the bundle (esbuild's keepNames)
  // names every function it creates, which cost more than the counting itself.
  let kv = 0;
  let fields = 0;
  if (ev.key.length > 0) {
    kv += KEY.length + base64Length(ev.key.length) + 1;
    fields++;
  }
  if (ev.createRevision !== 0) {
    kv += CREATE_REVISION.length + decimalDigits(ev.createRevision);
    fields++;
  }
  if (ev.modRevision !== 0) {
    kv += MOD_REVISION.length + decimalDigits(ev.modRevision);
    fields++;
  }
  if (ev.version !== 0) {
    kv += VERSION.length + decimalDigits(ev.version);
    fields++;
  }
  if (ev.value.length > 0) {
    kv += VALUE.length + base64Length(ev.value.length) + 1;
    fields++;
  }
  if (hasLease(ev)) {
    kv += LEASE.length + ev.lease.length;
    fields++;
  }
  if (fields > 1) kv += fields - 1; // the commas between fields
  const ttl = hasLeaseTtl(ev) ? LEASE_TTL.length + String(ev.leaseTTL).length : 0;
  const type = ev.type === 'DELETE' ? TYPE_DELETE.length : 0;
  return ELEMENT_OPEN.length + type + KV_OPEN.length + kv + TIME.length + Buffer.byteLength(ev.time, 'utf8') + ELEMENT_CLOSE.length + ttl;
}

/** The length of `String(n)` for a revision or version (a safe integer, maybe negative), without the string. */
function decimalDigits(n: number): number {
  let digits = n < 0 ? 2 : 1;
  for (let v = Math.abs(n); v >= 10; v = Math.floor(v / 10)) digits++;
  return digits;
}

function base64Length(bytes: number): number {
  return 4 * Math.ceil(bytes / 3);
}

/** Which lease TTLs a payload carries and which of them one writing of it has written already. */
class LeaseTtlWriter {
  private readonly written = new Set<string>();
  constructor(private readonly ttls: ReadonlyMap<string, number>) {}

  /** The TTL to write with the event naming `lease`: on the first such event of the payload only. */
  take(lease: string): number | undefined {
    const ttl = this.ttls.get(lease);
    if (ttl === undefined || this.written.has(lease)) return undefined;
    this.written.add(lease);
    return ttl;
  }
}

/** At least the length of the JSON `writeEventJson` writes for the record at `at` (its numbers counted at 17 digits). */
function eventJsonBound(r: Buffer, at: number): number {
  const keyLength = r.readUInt32LE(at + FIELD.keyLength);
  const valueLength = r.readUInt32LE(at + FIELD.valueLength);
  // 116 bytes of names, braces, quotes and commas when every field is there, 12 more and 10 digits for a
  // lease TTL.
  return (
    150 +
    3 * 17 +
    base64Length(keyLength) +
    base64Length(valueLength) +
    r.readUInt8(at + FIELD.leaseLength) +
    r.readUInt16LE(at + FIELD.timeLength)
  );
}

/**
 * Writes the record at `at` as upstream's JSON element (the fields, order and omissions of Go's encoding/json)
 * into `out` at `o`, which must have room for `eventJsonBound`; returns the offset after it.
 */
function writeEventJson(r: Buffer, at: number, out: Buffer, o: number, ttls?: LeaseTtlWriter): number {
  const keyLength = r.readUInt32LE(at + FIELD.keyLength);
  const valueLength = r.readUInt32LE(at + FIELD.valueLength);
  const createRevision = r.readDoubleLE(at + FIELD.createRevision);
  const modRevision = r.readDoubleLE(at + FIELD.modRevision);
  const version = r.readDoubleLE(at + FIELD.version);
  const leaseLength = r.readUInt8(at + FIELD.leaseLength);
  const timeLength = r.readUInt16LE(at + FIELD.timeLength);
  const lease = at + RECORD_HEADER_BYTES;
  const time = lease + leaseLength;
  const key = time + timeLength;
  const value = key + keyLength;
  o = put(ELEMENT_OPEN, out, o);
  if (r.readUInt8(at + FIELD.type) === RECORD_DELETE) o = put(TYPE_DELETE, out, o);
  o = put(KV_OPEN, out, o);
  const start = o;
  if (keyLength > 0) {
    o = put(KEY, out, o);
    o = base64Into(r, key, key + keyLength, out, o);
    out[o++] = QUOTE;
  }
  if (createRevision !== 0) o = uintInto(createRevision, out, put(CREATE_REVISION, out, comma(out, o, start)));
  if (modRevision !== 0) o = uintInto(modRevision, out, put(MOD_REVISION, out, comma(out, o, start)));
  if (version !== 0) o = uintInto(version, out, put(VERSION, out, comma(out, o, start)));
  if (valueLength > 0) {
    o = put(VALUE, out, comma(out, o, start));
    o = base64Into(r, value, value + valueLength, out, o);
    out[o++] = QUOTE;
  }
  // "0" and "" name no lease (hasLease in delta-format.ts); the buffer checked that any other is an int64.
  let ttl: number | undefined;
  if (leaseLength > 1 || (leaseLength === 1 && r[lease] !== DIGIT_ZERO)) {
    o = put(LEASE, out, comma(out, o, start));
    o += r.copy(out, o, lease, lease + leaseLength);
    ttl = ttls?.take(r.toString('latin1', lease, lease + leaseLength));
  }
  o = put(TIME, out, o);
  o += r.copy(out, o, time, time + timeLength);
  if (ttl === undefined) return put(ELEMENT_CLOSE, out, o);
  out[o++] = QUOTE;
  o = uintInto(ttl, out, put(LEASE_TTL, out, o));
  out[o++] = CLOSE_BRACE;
  return o;
}

/** A comma before a field unless it is the first of the kv object, which starts at `start`. */
function comma(out: Buffer, o: number, start: number): number {
  if (o > start) out[o++] = COMMA;
  return o;
}

function put(bytes: Buffer, out: Buffer, o: number): number {
  for (let i = 0; i < bytes.length; i++) out[o++] = bytes[i]!;
  return o;
}

/** The decimal digits of a non-negative integer below 2^53, as JSON writes it. */
function uintInto(n: number, out: Buffer, o: number): number {
  const digits = decimalDigits(n);
  let p = o + digits;
  for (let v = n; p > o; v = Math.floor(v / 10)) out[--p] = DIGIT_ZERO + (v % 10);
  return o + digits;
}

const BASE64 = constantBytes('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/', 'latin1');

/**
 * From this many bytes on, Node's native encoder (through a string) beats the loop below: 1 KiB values 5x
 * (0.25 against 1.3 µs), 200 bytes 1.8x; shorter ones, most keys, are faster in the loop.
 */
const NATIVE_BASE64_FROM = 128;

/** Standard base64 with padding, as Go's encoding/json writes []byte. */
function base64Into(src: Buffer, s: number, e: number, out: Buffer, o: number): number {
  if (e - s >= NATIVE_BASE64_FROM) return o + out.write(src.toString('base64', s, e), o, 'latin1');
  let i = s;
  for (; i + 2 < e; i += 3) {
    const n = (src[i]! << 16) | (src[i + 1]! << 8) | src[i + 2]!;
    out[o] = BASE64[n >>> 18]!;
    out[o + 1] = BASE64[(n >>> 12) & 63]!;
    out[o + 2] = BASE64[(n >>> 6) & 63]!;
    out[o + 3] = BASE64[n & 63]!;
    o += 4;
  }
  if (e - i === 1) {
    const n = src[i]! << 16;
    out[o] = BASE64[n >>> 18]!;
    out[o + 1] = BASE64[(n >>> 12) & 63]!;
    out[o + 2] = PAD;
    out[o + 3] = PAD;
    o += 4;
  } else if (e - i === 2) {
    const n = (src[i]! << 16) | (src[i + 1]! << 8);
    out[o] = BASE64[n >>> 18]!;
    out[o + 1] = BASE64[(n >>> 12) & 63]!;
    out[o + 2] = BASE64[(n >>> 6) & 63]!;
    out[o + 3] = PAD;
    o += 4;
  }
  return o;
}
