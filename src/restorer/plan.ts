import { CodedError } from '../errors.js';
import { sortSnapshots, type Snapshot } from '@etcdbrctl/snapstore';

/** Where to stop replaying (a difference from upstream: point-in-time restore). */
export interface RestoreTarget {
  /** Replay events up to and including this revision. */
  revision?: number;
  /** Use only snapshots created at or before this time (name timestamps, second precision). */
  time?: Date;
  /** Start from the full snapshot of this name (e.g. to go around a broken newer one), not the newest. */
  baseName?: string;
}

export interface RestorePlan {
  /** The full snapshot to restore from; undefined when the store has none (upstream: nothing to do). */
  base: Snapshot | undefined;
  /** Deltas to replay in order after the base; each reaches further than the previous, overlapping at most it. */
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
 * deltas after it, in revision order (also those listed after a newer full, while they go on without a
 * gap), cut at the target. Checks that the chain has no gaps, so a broken
 * store fails before anything is written (upstream finds a gap only while applying).
 *
 * Deltas may overlap the full snapshot: the full's name carries the revision read before its stream was
 * opened, so the first delta may start at or below it (only its newer events are applied). Deltas may
 * overlap each other after a leadership change: the plan takes the fewest that cover the chain.
 */
export function planRestore(listing: readonly Snapshot[], target: RestoreTarget = {}): RestorePlan {
  const all = sortSnapshots(listing.filter((s) => !s.isChunk));
  const inTime = (s: Snapshot) => target.time === undefined || s.createdOn.getTime() <= target.time.getTime();
  const inRevision = (s: Snapshot) => target.revision === undefined || s.lastRevision <= target.revision;

  let baseIndex = -1;
  if (target.baseName !== undefined) {
    baseIndex = chosenBaseIndex(all, target.baseName);
    const s = all[baseIndex]!;
    if (!inTime(s) || !inRevision(s))
      throw new RestorePlanError(`full snapshot ${target.baseName} is after the restore target (${describeTarget(target)})`);
  }
  for (let i = all.length - 1; baseIndex < 0 && i >= 0; i--) {
    const s = all[i]!;
    if (s.kind === 'Full' && inTime(s) && inRevision(s)) baseIndex = i;
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
  // Newer fulls are stepped over while the deltas go on without a gap. Our snapshotter's deltas go on across a
  // full (the first delta after it starts where the delta before it ended), so a point in time between the last
  // delta before a full and the full itself is reached from the older full; and the deltas after a broken full
  // (--base-snapshot) usually continue the older chain's. A gap right after such a full ends the chain there:
  // deltas that start after it (upstream's, which restart at the full) hold nothing for an older base.
  let steppedOverFull = false;
  for (const s of all.slice(baseIndex + 1)) {
    if (s.kind !== 'Incr') {
      steppedOverFull = true;
      continue;
    }
    if (!inTime(s)) break;
    // The base itself reaches the target (a newer full's first delta goes back into it): nothing to fetch.
    if (target.revision !== undefined && deltas.length === 0 && base.lastRevision >= target.revision) break;
    if (s.lastRevision <= covered) continue; // entirely inside what we have (e.g. inside the full)
    // A delta named from the revision after the target may still hold the rest of the target's revision (a
    // transaction the Go snapshotter cut); only the events up to the target are applied.
    if (target.revision !== undefined && s.startRevision > target.revision + 1) break;
    if (s.startRevision > covered + 1) {
      if (steppedOverFull) break;
      throw new RestorePlanError(
        `gap in the delta chain: ${s.snapName} starts at revision ${s.startRevision}, but the snapshots before it end at ${covered}`,
      );
    }
    // Overlapping deltas (two leaders wrote from the same revision) are one history: the one that reaches
    // furthest stands for the others, so a delta that follows on from the one before the last makes the last
    // redundant, and each delta of the plan overlaps at most the one before it (fetch.ts checks that overlap).
    while (deltas.length > 0 && s.startRevision <= (deltas.at(-2)?.lastRevision ?? base.lastRevision) + 1) deltas.pop();
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

/** Index of the full snapshot named `name` in `all`; a typed error naming the fulls there are when it is not one. */
function chosenBaseIndex(all: readonly Snapshot[], name: string): number {
  const i = all.findIndex((s) => s.snapName === name);
  if (i >= 0 && all[i]!.kind === 'Full') return i;
  const fulls = all.filter((s) => s.kind === 'Full').map((s) => s.snapName);
  const what = i >= 0 ? `${name} is a delta snapshot, not a full one` : `no snapshot named ${name} in the store`;
  throw new RestorePlanError(`--base-snapshot: ${what}; the full snapshots are: ${fulls.length > 0 ? fulls.join(', ') : 'none'}`);
}

/** A chain a restore could start from instead: its full snapshot and the revision its names reach. */
export interface OlderChain {
  base: Snapshot;
  /** The revision the chain's names reach without a gap (its objects are not read here). */
  lastRevision: number;
  deltas: number;
}

/**
 * The newest chain older than the full snapshot `broken`, as far as its names go gaplessly (stepping over
 * `broken` as `--base-snapshot` does): what to restore when `broken` cannot be. Undefined when there is no
 * older full snapshot, or its own deltas have a gap.
 */
export function olderChain(listing: readonly Snapshot[], broken: Snapshot): OlderChain | undefined {
  const all = sortSnapshots(listing.filter((s) => !s.isChunk));
  const at = all.findIndex((s) => s.snapName === broken.snapName);
  const base = all
    .slice(0, Math.max(0, at))
    .filter((s) => s.kind === 'Full')
    .at(-1);
  if (base === undefined) return undefined;
  try {
    const plan = planRestore(all, { baseName: base.snapName });
    return { base, lastRevision: plan.targetRevision, deltas: plan.deltas.length };
  } catch (err) {
    if (err instanceof RestorePlanError) return undefined; // a gap in the older chain itself: no way around
    throw err;
  }
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
