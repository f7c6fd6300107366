import { createHash } from 'node:crypto';
import { encodeDeltaEvent, type DeltaEvent } from '../backup/delta-format.js';

/** A delta ready to be compressed and saved: the upstream payload and the revisions it covers. */
export interface DeltaPayload {
  /** JSON array ‖ sha256(JSON). */
  payload: Buffer;
  /** First and last mod_revision of the events inside. */
  firstRevision: number;
  lastRevision: number;
  events: number;
}

/**
 * Collects watch events in upstream's delta JSON form. The size it reports is what upstream compares
 * with `--delta-snapshot-memory-limit`: the opening `[` plus the events joined by `,`. Callers check
 * `size` after every event, so the buffer never exceeds the limit by more than one event.
 */
export class DeltaBuffer {
  private parts: Buffer[] = [];
  private bytes = 0;
  private first = 0;
  private last = 0;

  get size(): number {
    return this.bytes;
  }

  get isEmpty(): boolean {
    return this.parts.length === 0;
  }

  get lastRevision(): number {
    return this.last;
  }

  append(ev: DeltaEvent): void {
    const encoded = Buffer.from(encodeDeltaEvent(ev), 'utf8');
    if (this.parts.length === 0) {
      this.first = ev.modRevision;
      this.bytes = 1; // '['
    } else {
      this.bytes += 1; // ','
    }
    this.parts.push(encoded);
    this.bytes += encoded.length;
    this.last = ev.modRevision;
  }

  /** Returns the payload of everything buffered and empties the buffer; undefined when empty. */
  take(): DeltaPayload | undefined {
    if (this.parts.length === 0) return undefined;
    const pieces: Buffer[] = [Buffer.from('[')];
    this.parts.forEach((p, i) => {
      if (i > 0) pieces.push(Buffer.from(','));
      pieces.push(p);
    });
    pieces.push(Buffer.from(']'));
    const json = Buffer.concat(pieces);
    const out: DeltaPayload = {
      payload: Buffer.concat([json, createHash('sha256').update(json).digest()]),
      firstRevision: this.first,
      lastRevision: this.last,
      events: this.parts.length,
    };
    this.clear();
    return out;
  }

  clear(): void {
    this.parts = [];
    this.bytes = 0;
    this.first = 0;
    this.last = 0;
  }
}
