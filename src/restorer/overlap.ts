/**
 * Two deltas of a chain that hold some of the same revisions (docs/how-it-works.md "How a restore works", Overlapping
 * deltas). Two cases give that, and only the events tell them apart:
 * - a transaction cut: the Go snapshotter cuts a delta at its memory limit after any event, so the last
 *   revision of one delta goes on at the start of the next with the rest of that transaction's events;
 * - an overlap: after a leadership change two sidecars wrote deltas from the same revision (or a late write
 *   of the old leader repeats what the new one wrote). Both are the same etcd's events: the shared ones
 *   must be identical, and are applied once.
 * `alignOverlap` decides from the events (pure); `overlapOf` reads them from the two payloads.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { CodedError } from '../errors.js';
import type { DeltaEvent } from '../backup/delta-format.js';
import { DELTA_READ_BYTES, DeltaPayloadDecoder } from '../backup/delta-parse.js';

/** Two deltas hold the same revision with different events: the store holds two histories. */
export class DeltaOverlapMismatchError extends CodedError {
  readonly code = 'E_DELTA_OVERLAP_MISMATCH';
  override readonly name = 'DeltaOverlapMismatchError';
}

/** What alignment compares of an event: everything etcd stored, the value as a digest (time is not etcd's). */
export interface ComparedEvent {
  revision: number;
  type: DeltaEvent['type'];
  /** latin1 of the key bytes: keys are compared and told apart, never printed from here. */
  key: string;
  valueDigest: string;
  createRevision: number;
  version: number;
  lease: string;
}

export function comparedEvent(ev: DeltaEvent): ComparedEvent {
  return {
    revision: ev.modRevision,
    type: ev.type,
    key: ev.key.toString('latin1'),
    valueDigest: createHash('sha256').update(ev.value).digest('base64'),
    createRevision: ev.createRevision,
    version: ev.version,
    lease: ev.lease,
  };
}

export interface OverlapInput {
  /** The earlier delta's events from the later delta's first event revision on. */
  prevTail: readonly ComparedEvent[];
  /** The later delta's events up to the earlier delta's last revision. */
  nextHead: readonly ComparedEvent[];
  /** The later delta goes on past the earlier one's last revision. */
  nextGoesOn: boolean;
  /** Object names, for the error. */
  prevName: string;
  nextName: string;
}

export interface Overlap {
  /** Leading events of the later delta that the chain already has: not applied again. */
  skip: number;
  /** The later delta's first events after `skip` continue the earlier delta's last revision (a cut transaction). */
  continuesLastRevision: boolean;
}

const sameEvent = (a: ComparedEvent, b: ComparedEvent): boolean =>
  a.revision === b.revision &&
  a.key === b.key &&
  a.type === b.type &&
  a.valueDigest === b.valueDigest &&
  a.createRevision === b.createRevision &&
  a.version === b.version &&
  a.lease === b.lease;

/**
 * How the later of two consecutive deltas continues the earlier one. Within one revision every key occurs
 * once (etcd refuses a transaction that names a key twice), so revision and key identify an event.
 * Throws DeltaOverlapMismatchError, naming both objects and the revision, when the shared events differ.
 */
export function alignOverlap(input: OverlapInput): Overlap {
  const { prevTail, nextHead } = input;
  const first = prevTail[0];
  if (nextHead.length === 0 || first === undefined) return { skip: 0, continuesLastRevision: false };
  const lastRevision = prevTail.at(-1)!.revision;
  const differ = (revision: number, what: string): never => {
    throw new DeltaOverlapMismatchError(
      `delta snapshots ${input.prevName} and ${input.nextName} both hold revision ${revision}, but ${what}: ` +
        'they are not the same history (a store written by two clusters, or a corrupted object); restore to a revision ' +
        'before it, or remove the object that does not belong to this cluster',
    );
  };
  // Events the later delta has from before the earlier one's tail were applied from the deltas before it.
  let i = 0;
  while (i < nextHead.length && nextHead[i]!.revision < first.revision) i++;
  if (i === nextHead.length) return { skip: i, continuesLastRevision: false };
  const start = nextHead[i]!;
  const j = prevTail.findIndex((e) => e.revision === start.revision && e.key === start.key);
  if (j < 0) {
    // Nothing shared: only the rest of the earlier delta's last, cut revision may follow.
    const rest = nextHead.slice(i);
    const shared = rest.find((e) => e.revision !== lastRevision || prevTail.some((p) => p.revision === e.revision && p.key === e.key));
    if (shared !== undefined) differ(shared.revision, 'their events at it differ');
    return { skip: i, continuesLastRevision: true };
  }
  // The later delta may start inside a revision (cut there itself): the earlier one's events before it are of that revision.
  if (prevTail.slice(0, j).some((e) => e.revision !== start.revision))
    differ(first.revision, 'the later one lacks events the earlier one has');
  const shared = Math.min(prevTail.length - j, nextHead.length - i);
  for (let k = 0; k < shared; k++) {
    const a = prevTail[j + k]!;
    const b = nextHead[i + k]!;
    if (!sameEvent(a, b)) differ(Math.min(a.revision, b.revision), 'their events at it differ');
  }
  if (j + shared < prevTail.length) {
    // The later delta stops inside the earlier one: redundant if it ends there, a hole if it goes on.
    if (input.nextGoesOn) differ(prevTail[j + shared]!.revision, 'the later one lacks events the earlier one has');
    return { skip: i + shared, continuesLastRevision: false };
  }
  const extra = nextHead.slice(i + shared);
  const early = extra.find((e) => e.revision !== lastRevision);
  if (early !== undefined) differ(early.revision, 'the later one has events the earlier one lacks');
  return { skip: i + shared, continuesLastRevision: extra.length > 0 };
}

/** A delta payload (decompressed, sha256 already checked or checked elsewhere) to read events from. */
export interface PayloadSource {
  name: string;
  /** The revision the object's name ends at (its last event's). */
  lastRevision: number;
  /** The payload bytes from the start; destroyed once enough was read. */
  open(): Promise<Readable>;
}

/** A payload file on local disk (restore's fetch wrote it). */
export function payloadFile(name: string, lastRevision: number, file: string): PayloadSource {
  return { name, lastRevision, open: () => Promise.resolve(createReadStream(file, { highWaterMark: DELTA_READ_BYTES })) };
}

/** Events of a payload, in order, until `take` says stop (the rest is not read). */
async function readEvents(source: PayloadSource, take: (ev: DeltaEvent) => 'more' | 'stop'): Promise<void> {
  const decoder = new DeltaPayloadDecoder(`delta snapshot ${source.name}`, { hashChecked: true, times: false });
  const stream = await source.open();
  let stopped = false;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      decoder.write(chunk, (ev) => {
        if (!stopped && take(ev) === 'stop') stopped = true;
      });
      if (stopped) return;
    }
    decoder.end();
  } finally {
    stream.destroy();
  }
}

/**
 * The overlap of `next` with `prev`. Reads the start of `next` always; `prev` only when `next`'s first event
 * is at or below `prev`'s last revision (a cut transaction or an overlap).
 */
export async function overlapOf(prev: PayloadSource, next: PayloadSource): Promise<Overlap> {
  const nextHead: ComparedEvent[] = [];
  let nextGoesOn = false;
  await readEvents(next, (ev) => {
    if (ev.modRevision > prev.lastRevision) {
      nextGoesOn = true;
      return 'stop';
    }
    nextHead.push(comparedEvent(ev));
    return 'more';
  });
  const from = nextHead[0]?.revision;
  if (from === undefined) return { skip: 0, continuesLastRevision: false };
  const prevTail: ComparedEvent[] = [];
  await readEvents(prev, (ev) => {
    if (ev.modRevision >= from) prevTail.push(comparedEvent(ev));
    return 'more';
  });
  return alignOverlap({ prevTail, nextHead, nextGoesOn, prevName: prev.name, nextName: next.name });
}
