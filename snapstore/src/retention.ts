/**
 * Garbage-collection policies as pure functions: (listed snapshots, now, policy) -> what to delete
 * (upstream `pkg/snapshot/snapshotter/garbagecollector.go`). `gc.ts` executes a plan.
 */
import { SnapStoreError } from './errors.js';
import { isDeletable } from './snapshot.js';
import { sortSnapshots } from './snapshot-order.js';
import type { Snapshot } from './snapshot.js';

export type GcPolicyKind = 'Exponential' | 'LimitBased';

export interface GcPolicy {
  /** `--garbage-collection-policy`. */
  kind: GcPolicyKind;
  /** `--max-backups`: LimitBased keeps this many newest full snapshots. Ignored by Exponential. */
  maxBackups: number;
  /** `--delta-snapshot-retention-period` in ms: deltas of older streams younger than this are kept. */
  deltaRetentionMs: number;
  /**
   * Last revision of the newest snapshot this process uploaded (upstream `PrevSnapshot.LastRevision`).
   * Chunks starting above it belong to an upload in flight. 0 = nothing uploaded yet: no chunk GC.
   */
  latestSnapshotRevision: number;
}

/** One snap stream (a full and the deltas up to the next full) with what to delete from it. */
export interface GcStreamPlan {
  /** Deltas to delete, newest first (upstream walks each stream backwards). */
  deltas: Snapshot[];
  /** The stream's full, to delete only if every delta deletion of this stream succeeded. */
  full?: Snapshot;
}

export interface GcPlan {
  /** Leftover chunk objects (GCS compose parts) to delete first. */
  chunks: Snapshot[];
  /** In upstream's processing order: Exponential newest stream first, LimitBased oldest first. */
  streams: GcStreamPlan[];
  /** Snapshots the policy would delete but that are immutable at `now`; left alone. */
  skippedImmutable: Snapshot[];
}

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
/** Go's `math.MaxInt32`, the "always delete" threshold of the Exponential policy. */
const MAX_INT32 = 2_147_483_647;

/**
 * Plans one garbage-collection run over a listing taken with `includeExcluded` (so excluded snapshots
 * age out too). The latest stream (newest full and its deltas) is never touched.
 *
 * Differences from upstream, on purpose:
 * - Chunk GC also keeps chunks whose parent object is not listed yet: GCS composes the parent only at
 *   the end of an upload, and an in-flight full's chunks start at revision 0 (docs/design-decisions.md, upstream quirks).
 * - Deltas older than the oldest full (a stream without a full) are only subject to delta retention;
 *   upstream would also run the full-snapshot rule on the first of them.
 * - The plan assumes every delta deletion succeeds. Upstream moves the Exponential week boundary only
 *   when it reaches a stream whose deltas were all deleted, so after a failed delta deletion older
 *   streams may be judged one day differently until the next run.
 */
export function planGarbageCollection(list: readonly Snapshot[], now: Date, policy: GcPolicy): GcPlan {
  validatePolicy(policy);
  const sorted = sortSnapshots(list);
  const skippedImmutable: Snapshot[] = [];
  const chunks = planChunks(sorted, now, policy.latestSnapshotRevision, skippedImmutable);

  const snaps = sorted.filter((s) => !s.isChunk);
  // Upstream getSnapStreamIndexList: index 0 always starts a stream, even when it is a delta.
  const fullIdx = [0];
  for (let i = 1; i < snaps.length; i++) if (snaps[i]?.kind === 'Full') fullIdx.push(i);

  const cutoffMs = now.getTime() - policy.deltaRetentionMs;
  const streamAt = (k: number): Snapshot[] => snaps.slice(fullIdx[k], fullIdx[k + 1]);
  const deltasToDelete = (stream: readonly Snapshot[]): Snapshot[] => {
    const out: Snapshot[] = [];
    for (let i = stream.length - 1; i >= 0; i--) {
      const s = stream[i] as Snapshot;
      if (s.kind !== 'Incr' || s.createdOn.getTime() >= cutoffMs) continue;
      if (isDeletable(s, now)) out.push(s);
      else skippedImmutable.push(s);
    }
    return out;
  };
  /** The stream's head if it is a deletable full; immutable ones are recorded as skipped. */
  const fullToDelete = (head: Snapshot): Snapshot | undefined => {
    if (head.kind !== 'Full') return undefined;
    if (isDeletable(head, now)) return head;
    skippedImmutable.push(head);
    return undefined;
  };

  const streams: GcStreamPlan[] = [];
  const add = (deltas: Snapshot[], full: Snapshot | undefined): void => {
    if (deltas.length === 0 && full === undefined) return;
    streams.push(full === undefined ? { deltas } : { deltas, full });
  };

  if (policy.kind === 'LimitBased') {
    for (let k = 0; k < fullIdx.length - 1; k++) {
      const stream = streamAt(k);
      const deltas = deltasToDelete(stream);
      const full = k < fullIdx.length - policy.maxBackups ? fullToDelete(stream[0] as Snapshot) : undefined;
      add(deltas, full);
    }
    return { chunks, streams, skippedImmutable };
  }

  // Exponential: keep every full of the current hour, the newest per hour for the rest of today, per
  // day for the 7 days before, per week up to 5 weeks; older ones go. Arithmetic mirrors Go exactly
  // (integer truncation of hours, eod moved back one day when the weekly band is first entered).
  const nowMs = now.getTime();
  let eod = Math.floor(nowMs / DAY_MS) * DAY_MS + DAY_MS - 1000;
  let trackingWeek = false;
  const hours = (fromMs: number, to: Snapshot): number => (fromMs - to.createdOn.getTime()) / HOUR_MS;
  for (let k = fullIdx.length - 1; k > 0; k--) {
    const snap = snaps[fullIdx[k] as number] as Snapshot;
    const stream = streamAt(k - 1);
    const next = stream[0] as Snapshot;
    const deltas = deltasToDelete(stream);
    if (next.kind !== 'Full') {
      add(deltas, undefined);
      continue;
    }

    const age = eod - next.createdOn.getTime();
    let threshold: number;
    if (age < DAY_MS) {
      threshold = next.createdOn.getUTCHours() === now.getUTCHours() ? 0 : 1;
    } else if (age < 8 * DAY_MS) {
      threshold = 24;
    } else if (age < 35 * DAY_MS) {
      // Weeks end with the previous day, so week windows are counted from yesterday's end.
      if (!trackingWeek) {
        eod -= DAY_MS;
        trackingWeek = true;
      }
      threshold = 24 * 7;
    } else {
      threshold = MAX_INT32;
    }

    const hourChange = Math.trunc(hours(eod, next)) - Math.trunc(hours(eod, snap));
    const dayChange = Math.trunc(hours(eod, next) / 24) - Math.trunc(hours(eod, snap) / 24);
    const weekChange = Math.trunc(hours(eod, next) / (24 * 7)) - Math.trunc(hours(eod, snap) / (24 * 7));
    const keep =
      threshold === 0 ||
      Math.trunc(hourChange / threshold) !== 0 ||
      Math.trunc((dayChange * 24) / threshold) !== 0 ||
      Math.trunc((weekChange * 24 * 7) / threshold) !== 0;
    add(deltas, keep ? undefined : fullToDelete(next));
  }
  return { chunks, streams, skippedImmutable };
}

/**
 * Upstream GarbageCollectChunks, plus: a chunk is only deleted once its parent object is listed, so
 * chunks of an upload in flight (which may start at revision 0) are never touched. Chunks whose parent
 * never arrives (a crashed upload) therefore stay until removed by hand.
 */
function planChunks(sorted: readonly Snapshot[], now: Date, latestRevision: number, skippedImmutable: Snapshot[]): Snapshot[] {
  if (latestRevision === 0) return [];
  const identity = (s: Snapshot): string => `${s.prefix}\u0000${s.snapDir}\u0000${s.snapName}`;
  const complete = new Set(sorted.filter((s) => !s.isChunk).map(identity));
  const out: Snapshot[] = [];
  for (const s of sorted) {
    if (!s.isChunk || s.startRevision > latestRevision || !complete.has(identity(s))) continue;
    if (isDeletable(s, now)) out.push(s);
    else skippedImmutable.push(s);
  }
  return out;
}

function validatePolicy(policy: GcPolicy): void {
  const bad = (reason: string): never => {
    throw new SnapStoreError('E_CONFIG', `invalid garbage-collection policy: ${reason}`);
  };
  if (policy.kind !== 'Exponential' && policy.kind !== 'LimitBased') bad(`unknown kind ${JSON.stringify(policy.kind)}`);
  if (!Number.isSafeInteger(policy.maxBackups) || policy.maxBackups < 0) {
    bad(`max-backups ${policy.maxBackups} is not a non-negative integer`);
  }
  if (!Number.isFinite(policy.deltaRetentionMs) || policy.deltaRetentionMs < 0) {
    bad(`delta retention ${policy.deltaRetentionMs} ms is not a non-negative duration`);
  }
  if (!Number.isSafeInteger(policy.latestSnapshotRevision) || policy.latestSnapshotRevision < 0) {
    bad(`latest snapshot revision ${policy.latestSnapshotRevision} is not a non-negative integer`);
  }
}
