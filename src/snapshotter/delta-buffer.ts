import { createHash } from 'node:crypto';
import { deltaEventJsonLength, type DeltaEvent } from '../backup/delta-format.js';
import { EtcdbrError } from '../errors.js';

/**
 * A delta ready to be compressed and saved: its events as the buffer recorded them, and what the upstream
 * payload made of them (JSON array ‖ sha256(JSON)) measures. `deltaPayloadBatches` writes that payload out
 * a batch at a time, so the JSON of a delta at the memory limit is never held whole.
 */
export interface DeltaPayload {
  /** The used part of each slab, in order: the events as records (see DeltaBuffer). */
  records: readonly Buffer[];
  /**
   * Length of the upstream payload: the JSON array plus the 32-byte hash (the lease TTL fields a save adds,
   * `leaseTtls`, are not counted: a few bytes per lease, never part of the memory limit's account).
   */
  byteLength: number;
  /** First and last mod_revision of the events inside. */
  firstRevision: number;
  lastRevision: number;
  events: number;
  /** The buffer's slabs the records point into, whole: what releaseDeltaPayload frees. */
  slabs: readonly Buffer[];
  /** The distinct lease IDs the events name (none: empty). */
  leases: ReadonlySet<string>;
  /**
   * The granted TTL of each lease the sidecar knows it of, set before the payload is written: the first event
   * naming such a lease carries it (`"leaseTTL"`, DeltaEvent.leaseTTL). Fixed per payload, so that a save that
   * starts over writes the same bytes.
   */
  leaseTtls?: ReadonlyMap<string, number>;
}

/**
 * Frees a payload's slabs at once, once nothing reads them any more (the delta is stored, or dropped): the
 * garbage collector would free them only at its next major collection, and until then the slabs of the next
 * delta came on top: at etcd's top write rate with a 100 MiB limit the sidecar held two deltas' worth. Detaching
 * an ArrayBuffer (transfer to length 0) drops its memory now; slabs are allocUnsafeSlow's, each the whole of
 * its ArrayBuffer. Afterwards the payload's records are empty and it cannot be written out any more.
 */
export function releaseDeltaPayload(p: DeltaPayload): void {
  for (const slab of p.slabs) {
    const owned = slab.buffer;
    // ES2024's ArrayBuffer.prototype.transfer (Node 21+); the project's lib is ES2023.
    if (owned instanceof ArrayBuffer && !isDetached(owned)) (owned as ArrayBuffer & { transfer(length: number): ArrayBuffer }).transfer(0);
  }
}

function isDetached(ab: ArrayBufferLike): boolean {
  return (ab as ArrayBuffer & { detached?: boolean }).detached === true;
}

/** The payload as one buffer: for tests and small payloads only. */
export function deltaPayloadBytes(p: DeltaPayload): Buffer {
  return Buffer.concat([...deltaPayloadBatches(p)]);
}

/**
 * Yields the upstream payload in pieces of about `batchBytes` (an event larger than that comes as a piece of
 * its own), then the 32-byte sha256 of the JSON. One piece per event would make every downstream stage
 * (codec, store) pay its per-chunk cost thousands of times. Each call writes the payload afresh, so a save
 * that starts over gets the same bytes. Throws (E_INTERNAL) for a payload whose slabs were released.
 *
 * The JSON is written from the records straight into each piece's bytes (`writeEventJson`), with no string
 * in between: building it as text (base64 strings, the element, the joined batch, then its UTF-8 copy) made
 * ~4 KiB of JavaScript garbage per 1 KiB event, a scavenge every few hundred events in the sidecar's small
 * young generation.
 */
export function* deltaPayloadBatches(p: DeltaPayload, batchBytes = 64 * 1024): Generator<Buffer> {
  if (p.slabs.some((s) => isDetached(s.buffer)))
    throw new EtcdbrError(
      'E_INTERNAL',
      `delta payload of revisions ${p.firstRevision}-${p.lastRevision} was released before it was written`,
    );
  const hash = createHash('sha256');
  const ttls = p.leaseTtls !== undefined && p.leaseTtls.size > 0 ? new LeaseTtlWriter(p.leaseTtls) : undefined;
  let out = Buffer.allocUnsafe(batchBytes);
  let o = 0;
  out[o++] = 0x5b; // [
  let first = true;
  for (const r of p.records) {
    for (let at = 0; at < r.length;) {
      const bound = eventJsonBound(r, at);
      if (o + bound + 2 > out.length) {
        const piece = out.subarray(0, o);
        hash.update(piece);
        yield piece;
        out = Buffer.allocUnsafe(Math.max(batchBytes, bound + 2));
        o = 0;
      }
      if (!first) out[o++] = 0x2c; // ,
      first = false;
      const end = o + bound;
      o = writeEventJson(r, at, out, o, ttls);
      // Writes past a Buffer's end are dropped silently: a bound that fell short must fail the save, not cut the JSON.
      if (o > end)
        throw new EtcdbrError('E_INTERNAL', `delta event JSON at revision ${r.readDoubleLE(at + FIELD.modRevision)} exceeds its bound`);
      at = nextRecord(r, at);
    }
  }
  out[o++] = 0x5d; // ]
  const last = out.subarray(0, o);
  hash.update(last);
  yield last;
  yield hash.digest();
}

/** The payload's length for `accountedBytes` of buffered JSON (DeltaBuffer.size): the closing `]` and the hash come on top. */
export function deltaPayloadLength(accountedBytes: number): number {
  return accountedBytes + 1 + 32;
}

/** The first slab is small, so a quiet period's delta of a few events holds little; later ones double up to this. */
const FIRST_SLAB_BYTES = 64 * 1024;
const MAX_SLAB_BYTES = 1024 * 1024;

/**
 * A record: u8 flags (1 = DELETE), u32 key length, u32 value length, f64 create revision, f64 mod
 * revision, f64 version, u8 lease length, u16 time length, then the lease (ASCII digits), the time, the
 * key and the value. Revisions and versions are below 2^53 (etcd's are int64 counters that never get there).
 */
const HEADER_BYTES = 1 + 4 + 4 + 8 + 8 + 8 + 1 + 2;
/** Where each header field of a record starts, from the record's start (the order above). */
const FIELD = {
  type: 0,
  keyLength: 1,
  valueLength: 5,
  createRevision: 9,
  modRevision: 17,
  version: 25,
  leaseLength: 33,
  timeLength: 34,
} as const;

function recordLength(ev: DeltaEvent, time: number): number {
  return HEADER_BYTES + ev.lease.length + time + ev.key.length + ev.value.length;
}

function writeRecord(ev: DeltaEvent, time: number, slab: Buffer, at: number): number {
  let o = slab.writeUInt8(ev.type === 'DELETE' ? 1 : 0, at);
  o = slab.writeUInt32LE(ev.key.length, o);
  o = slab.writeUInt32LE(ev.value.length, o);
  o = slab.writeDoubleLE(ev.createRevision, o);
  o = slab.writeDoubleLE(ev.modRevision, o);
  o = slab.writeDoubleLE(ev.version, o);
  o = slab.writeUInt8(ev.lease.length, o);
  o = slab.writeUInt16LE(time, o);
  o += slab.write(ev.lease, o, 'latin1');
  o += slab.write(ev.time, o, 'utf8');
  o += ev.key.copy(slab, o);
  o += ev.value.copy(slab, o);
  return o;
}

/** Offset of the record after the one at `at`. */
function nextRecord(r: Buffer, at: number): number {
  return (
    at +
    HEADER_BYTES +
    r.readUInt8(at + FIELD.leaseLength) +
    r.readUInt16LE(at + FIELD.timeLength) +
    r.readUInt32LE(at + FIELD.keyLength) +
    r.readUInt32LE(at + FIELD.valueLength)
  );
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
    4 * Math.ceil(keyLength / 3) +
    4 * Math.ceil(valueLength / 3) +
    r.readUInt8(at + FIELD.leaseLength) +
    r.readUInt16LE(at + FIELD.timeLength)
  );
}

const ASCII = (text: string): Buffer => Buffer.from(text, 'latin1');
const OPEN = ASCII('{"etcdEvent":{');
const DELETE_TYPE = ASCII('"type":1,');
const KV = ASCII('"kv":{');
const KEY = ASCII('"key":"');
const CREATE_REVISION = ASCII('"create_revision":');
const MOD_REVISION = ASCII('"mod_revision":');
const VERSION = ASCII('"version":');
const VALUE = ASCII('"value":"');
const LEASE = ASCII('"lease":');
const TIME = ASCII('}},"time":"');
const CLOSE = ASCII('"}');
const LEASE_TTL = ASCII(',"leaseTTL":');

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
const BASE64 = ASCII('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/');

/**
 * Writes the record at `at` as upstream's JSON element (`encodeDeltaEvent` in backup/delta-format.ts: the
 * same fields, order and omissions; test/snapshotter/delta-buffer.test.ts holds the two to the same bytes)
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
  const lease = at + HEADER_BYTES;
  const time = lease + leaseLength;
  const key = time + timeLength;
  const value = key + keyLength;
  o = put(OPEN, out, o);
  if (r.readUInt8(at + FIELD.type) === 1) o = put(DELETE_TYPE, out, o);
  o = put(KV, out, o);
  const start = o;
  if (keyLength > 0) {
    o = put(KEY, out, o);
    o = base64Into(r, key, key + keyLength, out, o);
    out[o++] = 0x22; // "
  }
  if (createRevision !== 0) o = uintInto(createRevision, out, put(CREATE_REVISION, out, comma(out, o, start)));
  if (modRevision !== 0) o = uintInto(modRevision, out, put(MOD_REVISION, out, comma(out, o, start)));
  if (version !== 0) o = uintInto(version, out, put(VERSION, out, comma(out, o, start)));
  if (valueLength > 0) {
    o = put(VALUE, out, comma(out, o, start));
    o = base64Into(r, value, value + valueLength, out, o);
    out[o++] = 0x22; // "
  }
  // "0" and "" name no lease (hasLease in delta-format.ts); append checked that any other is an int64.
  let ttl: number | undefined;
  if (leaseLength > 1 || (leaseLength === 1 && r[lease] !== 0x30)) {
    o = put(LEASE, out, comma(out, o, start));
    o += r.copy(out, o, lease, lease + leaseLength);
    ttl = ttls?.take(r.toString('latin1', lease, lease + leaseLength));
  }
  o = put(TIME, out, o);
  o += r.copy(out, o, time, time + timeLength);
  if (ttl === undefined) return put(CLOSE, out, o);
  out[o++] = 0x22; // "
  o = uintInto(ttl, out, put(LEASE_TTL, out, o));
  out[o++] = 0x7d; // }
  return o;
}

/** A comma before a field unless it is the first of the kv object, which starts at `start`. */
function comma(out: Buffer, o: number, start: number): number {
  if (o > start) out[o++] = 0x2c;
  return o;
}

function put(bytes: Buffer, out: Buffer, o: number): number {
  for (let i = 0; i < bytes.length; i++) out[o++] = bytes[i]!;
  return o;
}

/** The decimal digits of a non-negative integer below 2^53, as JSON writes it. */
function uintInto(n: number, out: Buffer, o: number): number {
  let digits = 1;
  for (let v = n; v >= 10; v = Math.floor(v / 10)) digits++;
  let p = o + digits;
  for (let v = n; p > o; v = Math.floor(v / 10)) out[--p] = 0x30 + (v % 10);
  return o + digits;
}

/** Standard base64 with padding, as Go's encoding/json writes []byte. */
function base64Into(src: Buffer, s: number, e: number, out: Buffer, o: number): number {
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
    out[o + 2] = 0x3d;
    out[o + 3] = 0x3d;
    o += 4;
  } else if (e - i === 2) {
    const n = (src[i]! << 16) | (src[i + 1]! << 8);
    out[o] = BASE64[n >>> 18]!;
    out[o + 1] = BASE64[(n >>> 12) & 63]!;
    out[o + 2] = BASE64[(n >>> 6) & 63]!;
    out[o + 3] = 0x3d;
    o += 4;
  }
  return o;
}

/**
 * Collects watch events for a delta. The size it reports is what upstream compares with
 * `--delta-snapshot-memory-limit`: the length of the upstream JSON so far, the opening `[` plus the events
 * joined by `,`. Callers check `size` between revisions, so the buffer exceeds the limit by at most one
 * revision's events.
 *
 * What it holds is smaller than that: each event as a compact record (its key and value as they are, the
 * revisions as numbers) in slabs of up to 1 MiB, and the JSON is written only when the delta is saved.
 * Base64 makes keys and values a third longer and the JSON names every field, so a kube-sized or 1 KiB event
 * is held in about three quarters of the bytes it accounts (measured on the footprint bench's delta case: at
 * etcd's top rate with a 100 MiB limit, the RSS over the figure before the load went from 118.0 MiB with the
 * JSON held to 87.6). Slabs rather than a Buffer per event: a Buffer is a heap object of
 * its own (~100 bytes beside its bytes), a third more for kube-sized events.
 */
export class DeltaBuffer {
  private slabs: Buffer[] = [];
  /** Where the records of each slab but the last end. */
  private ends: number[] = [];
  /** Bytes used in the last slab. */
  private used = 0;
  private bytes = 0;
  private count = 0;
  private first = 0;
  private last = 0;
  private leases = new Set<string>();

  get size(): number {
    return this.bytes;
  }

  get isEmpty(): boolean {
    return this.count === 0;
  }

  get firstRevision(): number {
    return this.first;
  }

  get lastRevision(): number {
    return this.last;
  }

  /** Bytes the buffer holds in memory: its records plus the unused tail of the current slab. */
  get heldBytes(): number {
    let n = 0;
    for (const s of this.slabs) n += s.length;
    return n;
  }

  /** Throws (E_INVALID_INPUT) for an event the JSON cannot carry, before anything is kept. */
  append(ev: DeltaEvent): void {
    // The separator (`[` before the first event, `,` before the others) counts with the event.
    const accounted = 1 + deltaEventJsonLength(ev);
    const time = Buffer.byteLength(ev.time, 'utf8');
    if (ev.lease.length > 0xff || time > 0xffff)
      throw new EtcdbrError('E_INVALID_INPUT', `delta event at revision ${ev.modRevision}: lease ID or time too long to record`);
    const length = recordLength(ev, time);
    const slab = this.slabFor(length);
    this.used = writeRecord(ev, time, slab, this.used);
    if (ev.lease !== '0' && ev.lease !== '') this.leases.add(ev.lease);
    if (this.count === 0) this.first = ev.modRevision;
    this.bytes += accounted;
    this.count += 1;
    this.last = ev.modRevision;
  }

  /** Returns the payload of everything buffered and empties the buffer; undefined when empty. */
  take(): DeltaPayload | undefined {
    if (this.count === 0) return undefined;
    const ends = [...this.ends, this.used];
    const records = this.slabs.map((s, i) => s.subarray(0, ends[i]));
    const out: DeltaPayload = {
      records,
      byteLength: deltaPayloadLength(this.bytes),
      firstRevision: this.first,
      lastRevision: this.last,
      events: this.count,
      slabs: this.slabs,
      leases: this.leases,
    };
    this.clear();
    return out;
  }

  clear(): void {
    this.slabs = [];
    this.ends = [];
    this.used = 0;
    this.bytes = 0;
    this.count = 0;
    this.first = 0;
    this.last = 0;
    this.leases = new Set();
  }

  /**
   * The slab the next record of `length` bytes goes into, whole: a record never straddles two slabs. A slab
   * that cannot take it is closed at what it holds (its records end there) and a new one is started, twice the
   * last up to 1 MiB, or the record's own size when it is larger.
   */
  private slabFor(length: number): Buffer {
    const slab = this.slabs[this.slabs.length - 1];
    if (slab && slab.length - this.used >= length) return slab;
    if (slab) this.ends.push(this.used);
    const size = Math.max(length, slab ? Math.min(slab.length * 2, MAX_SLAB_BYTES) : FIRST_SLAB_BYTES);
    // Unpooled: slabs live until the delta is saved and must not pin Node's shared 8 KiB pool.
    const next = Buffer.allocUnsafeSlow(size);
    this.slabs.push(next);
    this.used = 0;
    return next;
  }
}
