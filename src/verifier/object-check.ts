/**
 * What the scrub of a full and of a delta snapshot share: the verdict on one object, and the stored size held
 * against the listing.
 */
import type { Snapshot } from '@etcdbrctl/snapstore';
import { asError, errorCode } from '../errors.js';

/**
 * What an object that could not be read says. An encrypted object that no identity opens (none given, or not
 * the one it was encrypted to) says nothing about the backup: it is `unverifiable`, not broken.
 */
export function readProblem(err: unknown): { problem: string; unverifiable?: true } {
  const e = asError(err);
  if (errorCode(e) !== 'E_NO_IDENTITY') return { problem: e.message };
  return { problem: `cannot check: no identity for encrypted objects: ${e.message}`, unverifiable: true };
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
  /** Not ok, and yet not broken: encrypted, and no identity given opens it (`problem` says so). */
  unverifiable?: true;
}
