import { createHash } from 'node:crypto';
import { deltaEventJsonLength, encodeDeltaEvent, type DeltaEvent } from '../backup/delta-format.js';
import { EtcdbrError } from '../errors.js';

/**
 * A delta ready to be compressed and saved: its events as the buffer recorded them, and what the upstream
 * payload made of them (JSON array ‖ sha256(JSON)) measures. `deltaPayloadBatches` writes that payload out
 * a batch at a time, so the JSON of a delta at the memory limit is never held whole.
 */
export interface DeltaPayload {
  /** The used part of each slab, in order: the events as records (see DeltaBuffer). */
  records: readonly Buffer[];
  /** Length of the upstream payload: the JSON array plus the 32-byte hash. */
  byteLength: number;
  /** First and last mod_revision of the events inside. */
  firstRevision: number;
  lastRevision: number;
  events: number;
  /** The buffer's slabs the records point into, whole: what releaseDeltaPayload frees. */
  slabs: readonly Buffer[];
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
  return Buffer.concat([...deltaPayloadBatches(p)], p.byteLength);
}

/**
 * Yields the upstream payload in pieces of about `batchBytes` (an event larger than that comes as a piece of
 * its own), then the 32-byte sha256 of the JSON. One piece per event would make every downstream stage
 * (codec, store) pay its per-chunk cost thousands of times. Each call writes the payload afresh, so a save
 * that starts over gets the same bytes. Throws (E_INTERNAL) for a payload whose slabs were released.
 */
export function* deltaPayloadBatches(p: DeltaPayload, batchBytes = 64 * 1024): Generator<Buffer> {
  if (p.slabs.some((s) => isDetached(s.buffer)))
    throw new EtcdbrError(
      'E_INTERNAL',
      `delta payload of revisions ${p.firstRevision}-${p.lastRevision} was released before it was written`,
    );
  const hash = createHash('sha256');
  let parts: string[] = [];
  let size = 0;
  let first = true;
  const flush = (): Buffer => {
    const out = Buffer.from(parts.join(''), 'utf8');
    hash.update(out);
    parts = [];
    size = 0;
    return out;
  };
  for (const ev of readRecords(p.records)) {
    const text = (first ? '[' : ',') + encodeDeltaEvent(ev);
    first = false;
    if (size > 0 && size + text.length > batchBytes) yield flush();
    parts.push(text);
    size += text.length;
  }
  parts.push(first ? '[]' : ']');
  yield flush();
  yield hash.digest();
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

/** The events of `records`, their keys and values views into the slabs (valid until the payload is released). */
function* readRecords(records: readonly Buffer[]): Generator<DeltaEvent> {
  for (const r of records) {
    let o = 0;
    while (o < r.length) {
      const type = r.readUInt8(o) === 1 ? 'DELETE' : 'PUT';
      const keyLength = r.readUInt32LE(o + 1);
      const valueLength = r.readUInt32LE(o + 5);
      const createRevision = r.readDoubleLE(o + 9);
      const modRevision = r.readDoubleLE(o + 17);
      const version = r.readDoubleLE(o + 25);
      const leaseLength = r.readUInt8(o + 33);
      const timeLength = r.readUInt16LE(o + 34);
      o += HEADER_BYTES;
      const lease = r.toString('latin1', o, o + leaseLength);
      o += leaseLength;
      const time = r.toString('utf8', o, o + timeLength);
      o += timeLength;
      const key = r.subarray(o, o + keyLength);
      o += keyLength;
      const value = r.subarray(o, o + valueLength);
      o += valueLength;
      yield { type, key, value, createRevision, modRevision, version, lease, time };
    }
  }
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
      // The closing `]` and the hash.
      byteLength: this.bytes + 1 + 32,
      firstRevision: this.first,
      lastRevision: this.last,
      events: this.count,
      slabs: this.slabs,
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
