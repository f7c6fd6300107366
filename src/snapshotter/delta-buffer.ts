import { createHash, type Hash } from 'node:crypto';
import { encodeDeltaEvent, type DeltaEvent } from '../backup/delta-format.js';

/**
 * A delta ready to be compressed and saved: the upstream payload (JSON array ‖ sha256(JSON)) as the
 * pieces it was collected in, and the revisions it covers. The pieces are never joined into one buffer: at
 * the memory limit that would hold the delta two or three times over.
 */
export interface DeltaPayload {
  /** `[ev1`, `,ev2`, …, `]`, then the 32-byte sha256 of everything before it. */
  chunks: readonly Buffer[];
  /** Sum of the chunk lengths (JSON plus the 32-byte hash). */
  byteLength: number;
  /** First and last mod_revision of the events inside. */
  firstRevision: number;
  lastRevision: number;
  events: number;
  /** The buffer's slabs the chunks point into, whole: what releaseDeltaPayload frees. */
  slabs?: readonly Buffer[];
}

/**
 * Frees a payload's slabs at once, once nothing reads them any more (the delta is stored, or dropped): the
 * garbage collector would free them only at its next major collection, and until then the slabs of the next
 * delta came on top: at etcd's top write rate with a 100 MiB limit the sidecar held two deltas' worth. Detaching
 * an ArrayBuffer (transfer to length 0) drops its memory now; slabs are allocUnsafeSlow's, each the whole of
 * its ArrayBuffer. Afterwards the payload's chunks are empty.
 */
export function releaseDeltaPayload(p: DeltaPayload): void {
  for (const slab of p.slabs ?? []) {
    const owned = slab.buffer;
    // ES2024's ArrayBuffer.prototype.transfer (Node 21+); the project's lib is ES2023.
    if (owned instanceof ArrayBuffer && !isDetached(owned)) (owned as ArrayBuffer & { transfer(length: number): ArrayBuffer }).transfer(0);
  }
}

function isDetached(ab: ArrayBuffer): boolean {
  return (ab as ArrayBuffer & { detached?: boolean }).detached === true;
}

/** The payload as one buffer: for tests and small payloads only. */
export function deltaPayloadBytes(p: DeltaPayload): Buffer {
  return Buffer.concat(p.chunks as Buffer[], p.byteLength);
}

/**
 * Yields the payload in pieces of about `batchBytes`: one JSON event per chunk would make every downstream
 * stage (codec, store) pay its per-chunk cost thousands of times; batching copies only one batch at a time.
 */
export function* deltaPayloadBatches(p: DeltaPayload, batchBytes = 64 * 1024): Generator<Buffer> {
  let batch: Buffer[] = [];
  let size = 0;
  for (const c of p.chunks) {
    if (size > 0 && size + c.length > batchBytes) {
      yield batch.length === 1 ? batch[0]! : Buffer.concat(batch, size);
      batch = [];
      size = 0;
    }
    batch.push(c);
    size += c.length;
  }
  if (size > 0) yield batch.length === 1 ? batch[0]! : Buffer.concat(batch, size);
}

/** The first slab is small, so a quiet period's delta of a few events holds little; later ones double up to this. */
const FIRST_SLAB_BYTES = 64 * 1024;
const MAX_SLAB_BYTES = 1024 * 1024;

/**
 * Collects watch events in upstream's delta JSON form, hashing as it goes. The size it reports is what
 * upstream compares with `--delta-snapshot-memory-limit`: the opening `[` plus the events joined by `,`.
 * Callers check `size` between revisions, so the buffer exceeds the limit by at most one revision's events.
 *
 * The JSON is copied into slabs of up to 1 MiB rather than kept as one Buffer per event: a Buffer is a heap
 * object of its own (~100 bytes beside its bytes), which for kube-sized events of a few hundred bytes would
 * add a third to what the limit accounts. With slabs the memory held is the accounted size plus at most one
 * slab's unused tail, so `--delta-snapshot-memory-limit` bounds the RSS the buffer costs.
 */
export class DeltaBuffer {
  private slabs: Buffer[] = [];
  /** Bytes used in the last slab. */
  private used = 0;
  private hash: Hash | undefined;
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

  /** Bytes the buffer holds in memory: the accounted size plus the unused tail of the current slab. */
  get heldBytes(): number {
    let n = 0;
    for (const s of this.slabs) n += s.length;
    return n;
  }

  append(ev: DeltaEvent): void {
    const first = this.count === 0;
    // The separator travels with the event, so the pieces concatenate to the exact upstream JSON.
    const text = (first ? '[' : ',') + encodeDeltaEvent(ev);
    if (first) {
      this.first = ev.modRevision;
      this.hash = createHash('sha256');
    }
    this.hash!.update(text, 'utf8');
    this.bytes += this.writeIn(text);
    this.count += 1;
    this.last = ev.modRevision;
  }

  /** Returns the payload of everything buffered and empties the buffer; undefined when empty. */
  take(): DeltaPayload | undefined {
    if (this.count === 0 || !this.hash) return undefined;
    const close = Buffer.from(']');
    const digest = this.hash.update(close).digest();
    const full = this.slabs.slice(0, -1);
    const lastSlab = this.slabs[this.slabs.length - 1]!;
    const out: DeltaPayload = {
      chunks: [...full, lastSlab.subarray(0, this.used), close, digest],
      byteLength: this.bytes + close.length + digest.length,
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
    this.used = 0;
    this.hash = undefined;
    this.bytes = 0;
    this.count = 0;
    this.first = 0;
    this.last = 0;
  }

  /**
   * Appends the UTF-8 bytes of `text`; returns their count. Written straight into the current slab when it
   * has room: an intermediate Buffer per event would be garbage outside the JavaScript heap (Node's 8 KiB pool
   * slabs), which V8 collects late, so at a high event rate it added tens of MiB to the RSS.
   */
  private writeIn(text: string): number {
    const length = Buffer.byteLength(text, 'utf8');
    const slab = this.slabs[this.slabs.length - 1];
    if (slab && slab.length - this.used >= length) {
      slab.write(text, this.used, 'utf8');
      this.used += length;
      return length;
    }
    this.copyIn(Buffer.from(text, 'utf8'));
    return length;
  }

  /** Appends bytes to the slabs; an event may straddle two slabs (only the concatenation matters). */
  private copyIn(data: Buffer): void {
    let offset = 0;
    while (offset < data.length) {
      let slab = this.slabs[this.slabs.length - 1];
      if (!slab || this.used === slab.length) {
        const size = slab ? Math.min(slab.length * 2, MAX_SLAB_BYTES) : FIRST_SLAB_BYTES;
        // Unpooled: slabs live until the delta is saved and must not pin Node's shared 8 KiB pool.
        slab = Buffer.allocUnsafeSlow(size);
        this.slabs.push(slab);
        this.used = 0;
      }
      const n = Math.min(data.length - offset, slab.length - this.used);
      data.copy(slab, this.used, offset, offset + n);
      this.used += n;
      offset += n;
    }
  }
}
