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

/**
 * Collects watch events in upstream's delta JSON form, hashing as it goes. The size it reports is what
 * upstream compares with `--delta-snapshot-memory-limit`: the opening `[` plus the events joined by `,`.
 * Callers check `size` between revisions, so the buffer exceeds the limit by at most one revision's events.
 */
export class DeltaBuffer {
  private parts: Buffer[] = [];
  private hash: Hash | undefined;
  private bytes = 0;
  private first = 0;
  private last = 0;

  get size(): number {
    return this.bytes;
  }

  get isEmpty(): boolean {
    return this.parts.length === 0;
  }

  get firstRevision(): number {
    return this.first;
  }

  get lastRevision(): number {
    return this.last;
  }

  append(ev: DeltaEvent): void {
    const first = this.parts.length === 0;
    // The separator travels with the event, so the pieces concatenate to the exact upstream JSON.
    const encoded = Buffer.from((first ? '[' : ',') + encodeDeltaEvent(ev), 'utf8');
    if (first) {
      this.first = ev.modRevision;
      this.hash = createHash('sha256');
    }
    this.hash!.update(encoded);
    this.parts.push(encoded);
    this.bytes += encoded.length;
    this.last = ev.modRevision;
  }

  /** Returns the payload of everything buffered and empties the buffer; undefined when empty. */
  take(): DeltaPayload | undefined {
    if (this.parts.length === 0 || !this.hash) return undefined;
    const close = Buffer.from(']');
    const digest = this.hash.update(close).digest();
    const out: DeltaPayload = {
      chunks: [...this.parts, close, digest],
      byteLength: this.bytes + close.length + digest.length,
      firstRevision: this.first,
      lastRevision: this.last,
      events: this.parts.length,
    };
    this.clear();
    return out;
  }

  clear(): void {
    this.parts = [];
    this.hash = undefined;
    this.bytes = 0;
    this.first = 0;
    this.last = 0;
  }
}
