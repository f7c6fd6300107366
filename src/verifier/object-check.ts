/**
 * What the scrub of a full and of a delta snapshot share: the verdict on one object, the stored bytes counted,
 * and held against the listing.
 */
import { Transform, type TransformCallback } from 'node:stream';
import type { Snapshot } from '@etcdbrctl/snapstore';

/** Counts the bytes that pass (the stored object's size, before decompression). */
export class ByteCounter extends Transform {
  bytes = 0;
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    cb(null, chunk);
  }
}

/** What the store's listing says against what was downloaded; undefined when they agree. */
export function sizeProblem(snap: Snapshot, bytes: number): string | undefined {
  // An encrypted object is counted as decrypted; its length is checked by age's authentication instead.
  if (snap.sizeBytes === undefined || snap.isEncrypted === true || snap.sizeBytes === bytes) return undefined;
  return `the store lists ${snap.sizeBytes} bytes, but ${bytes} bytes were downloaded`;
}

/** The scrub's verdict on one stored object. */
export interface ObjectVerdict {
  snapName: string;
  kind: 'Full' | 'Incr';
  ok: boolean;
  /** Bytes downloaded (as stored, compressed). */
  bytes: number;
  /** Full: the store revision of its database. Delta: its last event's revision. */
  revision?: number;
  events?: number;
  problem?: string;
}
