import { CodedError } from '../errors.js';
import { sortSnapshots, type Snapshot } from '@etcdbrctl/snapstore';

/** Where to stop replaying (a difference from upstream: point-in-time restore). */
export interface RestoreTarget {
  /** Replay events up to and including this revision. */
  revision?: number;
  /** Use only snapshots created at or before this time (name timestamps, second precision). */
  time?: Date;
}

export interface RestorePlan {
  /** The full snapshot to restore from; undefined when the store has none (upstream: nothing to do). */
  base: Snapshot | undefined;
  /** Deltas to replay in order after the base; each covers revisions after the previous. */
  deltas: Snapshot[];
  /** The store revision the restored data dir will have (the target revision if it cuts the chain). */
  targetRevision: number;
  /** Bytes to fetch (stored object sizes) where the store listed them. */
  fetchBytes: number;
}

export class RestorePlanError extends CodedError {
  readonly code = 'E_RESTORE_PLAN';
  override readonly name = 'RestorePlanError';
}

/**
 * Chooses what to restore from a store listing: the newest full snapshot (not after the target) and the
 * deltas after it, in revision order, cut at the target. Checks that the chain has no gaps, so a broken
 * store fails before anything is written (upstream finds a gap only while applying).
 *
 * Deltas may overlap the full snapshot: the full's name carries the revision read before its stream was
 * opened, so the first delta may start at or below it (only its newer events are applied).
 */
export function planRestore(listing: readonly Snapshot[], target: RestoreTarget = {}): RestorePlan {
  const all = sortSnapshots(listing.filter((s) => !s.isChunk));
  const inTime = (s: Snapshot) => target.time === undefined || s.createdOn.getTime() <= target.time.getTime();
  const inRevision = (s: Snapshot) => target.revision === undefined || s.lastRevision <= target.revision;

  let baseIndex = -1;
  for (let i = all.length - 1; i >= 0; i--) {
    const s = all[i]!;
    if (s.kind === 'Full' && inTime(s) && inRevision(s)) {
      baseIndex = i;
      break;
    }
  }
  if (baseIndex < 0) {
    if (target.revision !== undefined || target.time !== undefined) {
      const anyFull = all.some((s) => s.kind === 'Full');
      if (anyFull) throw new RestorePlanError(`no full snapshot at or before the restore target (${describeTarget(target)})`);
    }
    return { base: undefined, deltas: [], targetRevision: 0, fetchBytes: 0 };
  }
  const base = all[baseIndex]!;
  const deltas: Snapshot[] = [];
  let covered = base.lastRevision;
  for (const s of all.slice(baseIndex + 1)) {
    if (s.kind !== 'Incr') break; // a newer full that is past the target ends the chain
    if (!inTime(s)) break;
    if (s.lastRevision <= covered) continue; // entirely inside what we have (e.g. inside the full)
    if (target.revision !== undefined && s.startRevision > target.revision) break;
    if (s.startRevision > covered + 1) {
      throw new RestorePlanError(
        `gap in the delta chain: ${s.snapName} starts at revision ${s.startRevision}, but the snapshots before it end at ${covered}`,
      );
    }
    deltas.push(s);
    covered = s.lastRevision;
  }
  if (target.revision !== undefined && target.revision > covered) {
    throw new RestorePlanError(`the store's snapshots end at revision ${covered}, before the requested revision ${target.revision}`);
  }
  const targetRevision = target.revision !== undefined ? Math.min(target.revision, covered) : covered;
  const fetchBytes = [base, ...deltas].reduce((n, s) => n + (s.sizeBytes ?? 0), 0);
  return { base, deltas, targetRevision, fetchBytes };
}

/** The restore command found no full snapshot to start from (the initialization path starts a new member instead). */
export class NothingToRestoreError extends CodedError {
  readonly code = 'E_NOTHING_TO_RESTORE';
  override readonly name = 'NothingToRestoreError';
}

/**
 * Why `listing` holds nothing a restore could start from, naming `where` it looked: no snapshots at all, or
 * only deltas (a delta chain needs its full snapshot).
 */
export function nothingToRestore(listing: readonly Snapshot[], where: string): NothingToRestoreError {
  const deltas = listing.filter((s) => s.kind === 'Incr' && !s.isChunk).length;
  const found = deltas === 0 ? 'no snapshots' : `no full snapshot (only ${deltas} delta snapshot${deltas === 1 ? '' : 's'})`;
  return new NothingToRestoreError(
    `nothing to restore: ${found} in ${where}; check --storage-provider, --store-container and --store-prefix`,
  );
}

function describeTarget(t: RestoreTarget): string {
  const parts: string[] = [];
  if (t.revision !== undefined) parts.push(`revision ${t.revision}`);
  if (t.time !== undefined) parts.push(`time ${t.time.toISOString()}`);
  return parts.join(', ');
}
