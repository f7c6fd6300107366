import { CodedError } from '../errors.js';
import { createReadStream } from 'node:fs';
import type { DeltaEvent } from '../backup/delta-format.js';
import { DELTA_READ_BYTES, DeltaPayloadParser } from '../backup/delta-parse.js';
import type { ReplayOp, ReplayTxns } from './replay-txns.js';
import type { GrantLease, OnlineLeases } from './online-leases.js';

export class RevisionMismatchError extends CodedError {
  readonly code = 'E_REVISION_MISMATCH';
  override readonly name = 'RevisionMismatchError';
}

export interface ApplyResult {
  /** Revisions written (one transaction each). */
  revisions: number;
  events: number;
  /** The store revision after the last transaction (unchanged if nothing was applied). */
  lastRevision: number;
}

/**
 * A revision whose transaction is not committed yet because the next delta may hold more of its events:
 * the Go snapshotter cuts a delta at its memory limit after any event, so one transaction's events can end
 * one delta and begin the next (whose name then starts one revision later than its first events).
 */
export interface OpenRevision {
  revision: number;
  ops: ReplayOp[];
}

export interface DeltaApply {
  /** The store revision before this delta. */
  currentRevision: number;
  stopAtRevision?: number;
  /** The previous delta's last revision, held back by `holdLast`. */
  carry?: OpenRevision | undefined;
  /** Hold back this delta's last revision (a later delta may continue it) instead of committing it. */
  holdLast?: boolean;
  /** Told when this delta's first events continue the carried revision. */
  onContinued?: (revision: number) => void;
  /** Leading events already applied from the delta before (FetchedDelta.skipEvents). */
  skipEvents?: number;
  /** Keep the keys' leases (online-leases.ts): the puts name them, granted before their transaction. */
  leases?: ReplayLeases | undefined;
}

/** The online replay's leases and how it grants one in its etcd. */
export interface ReplayLeases {
  tracker: OnlineLeases;
  grant: GrantLease;
}

/**
 * Replays one delta (a decompressed payload file) into etcd: one transaction per source revision, in
 * order, only events above `currentRevision` (or continuing the carried revision), up to `stopAtRevision`.
 * Each transaction must land exactly on its source revision, so the restored keys get the source's
 * mod/create revisions and versions. With `leases` the puts carry their lease (granted first); without, keys are
 * written without it (as upstream).
 */
export async function applyDeltaFile(
  txns: ReplayTxns,
  file: string,
  what: string,
  opts: DeltaApply,
): Promise<ApplyResult & { open?: OpenRevision }> {
  // The fetch checked the file's sha256 on its way to disk; the replay has no use for the events' times.
  const parser = new DeltaPayloadParser(what, { hashChecked: true, times: false, skipEvents: opts.skipEvents ?? 0 });
  // 64 KiB reads: the parser turns a whole chunk into events at once, and a 1 MiB chunk's thousands of
  // events outlived V8's young generation, so the old one filled with dead events (1M revisions: +90 MB RSS).
  createReadStream(file, { highWaterMark: DELTA_READ_BYTES })
    .on('error', (err) => parser.destroy(err))
    .pipe(parser);
  const stopAtRevision = opts.stopAtRevision ?? Number.MAX_SAFE_INTEGER;

  let revision = opts.currentRevision;
  let revisions = 0;
  let events = 0;
  let group: ReplayOp[] = opts.carry?.ops ?? [];
  let groupRevision = opts.carry?.revision ?? 0;
  let continued = opts.carry === undefined;

  const leases = opts.leases;
  const flush = async () => {
    if (group.length === 0) return;
    if (leases) await leases.tracker.grantFor(group, leases.grant);
    const applied = await txns.commit(group, groupRevision);
    if (applied !== groupRevision) {
      throw new RevisionMismatchError(
        `${what}: mismatched event revision while applying delta snapshot, expected ${groupRevision} but applied ${applied}`,
      );
    }
    revision = applied;
    revisions++;
    events += group.length;
    group = [];
  };

  for await (const ev of parser as AsyncIterable<DeltaEvent>) {
    if (ev.modRevision <= revision && ev.modRevision !== groupRevision) continue;
    if (ev.modRevision > stopAtRevision) {
      parser.destroy();
      break;
    }
    if (ev.modRevision !== groupRevision) {
      await flush();
      if (ev.modRevision !== revision + 1) {
        throw new RevisionMismatchError(
          `${what}: mismatched event revision while applying delta snapshot, expected ${revision + 1} but the next event is at ${ev.modRevision}`,
        );
      }
      groupRevision = ev.modRevision;
    } else if (!continued) {
      continued = true;
      opts.onContinued?.(groupRevision);
    }
    if (leases) {
      leases.tracker.note(ev);
      group.push(
        ev.type === 'PUT' ? { request_put: { key: ev.key, value: ev.value, lease: ev.lease } } : { request_delete_range: { key: ev.key } },
      );
    } else {
      group.push(ev.type === 'PUT' ? { request_put: { key: ev.key, value: ev.value } } : { request_delete_range: { key: ev.key } });
    }
  }
  if (opts.holdLast && group.length > 0) {
    return { revisions, events, lastRevision: revision, open: { revision: groupRevision, ops: group } };
  }
  await flush();
  return { revisions, events, lastRevision: revision };
}

/** Commits a revision held back by the last delta. */
export async function commitOpenRevision(
  txns: ReplayTxns,
  open: OpenRevision,
  what: string,
  leases?: ReplayLeases | undefined,
): Promise<ApplyResult> {
  if (leases) await leases.tracker.grantFor(open.ops, leases.grant);
  const applied = await txns.commit(open.ops, open.revision);
  if (applied !== open.revision) {
    throw new RevisionMismatchError(
      `${what}: mismatched event revision while applying delta snapshot, expected ${open.revision} but applied ${applied}`,
    );
  }
  return { revisions: 1, events: open.ops.length, lastRevision: applied };
}
