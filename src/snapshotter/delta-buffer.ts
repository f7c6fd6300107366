import type { DeltaEvent } from '../backup/delta-format.js';
import { recordLength, writeRecord } from '../backup/delta-record.js';
import { deltaEventJsonLength, deltaPayloadLength, deltaPayloadPieces } from '../backup/delta-write.js';
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
 * Yields the upstream payload in pieces of about `batchBytes`, then the 32-byte sha256 of the JSON
 * (`deltaPayloadPieces` in backup/delta-write.ts, which writes the records straight into each piece's bytes).
 * Each call writes the payload afresh, so a save that starts over gets the same bytes. Throws (E_INTERNAL)
 * for a payload whose slabs were released.
 */
export function* deltaPayloadBatches(p: DeltaPayload, batchBytes = 64 * 1024): Generator<Buffer> {
  // A generator, so that a released payload fails the stream that reads it, not the code that builds the stream.
  if (p.slabs.some((s) => isDetached(s.buffer)))
    throw new EtcdbrError(
      'E_INTERNAL',
      `delta payload of revisions ${p.firstRevision}-${p.lastRevision} was released before it was written`,
    );
  yield* deltaPayloadPieces(p.records, p.leaseTtls, batchBytes);
}

/** The first slab is small, so a quiet period's delta of a few events holds little; later ones double up to this. */
const FIRST_SLAB_BYTES = 64 * 1024;
const MAX_SLAB_BYTES = 1024 * 1024;

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
