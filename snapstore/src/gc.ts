/**
 * Executes a garbage-collection plan from `planGarbageCollection` against a store, with upstream's
 * failure rules (`garbagecollector.go` `GarbageCollectDeltaSnapshots`; docs/design-decisions.md): immutability refusals are skips, not failures; a stream stops after 5 failed
 * deletions; a stream's full is deleted only when all of its planned delta deletions succeeded.
 */
import { isSnapStoreError } from './errors.js';
import type { Logger } from './logger.js';
import type { GcPlan } from './retention.js';
import { listedObjectKey } from './snapshot.js';
import type { Snapshot } from './snapshot.js';
import type { SnapStore } from './store.js';

/** Upstream `DeltaSnapshotGCErrorThreshold`: failed deletions after which a stream is abandoned. */
export const GC_STREAM_ERROR_THRESHOLD = 5;

export interface GcFailure {
  snap: Snapshot;
  error: unknown;
}

export interface GcResult {
  /** Deleted objects in deletion order (chunks have `isChunk`, for the `kind="Chunk"` metric label). */
  deleted: Snapshot[];
  /** Deletions that failed for another reason than immutability. */
  failed: GcFailure[];
  /** Left alone because immutable: planned skips first, then deletions the store refused (E_IMMUTABLE). */
  skippedImmutable: Snapshot[];
}

/**
 * Deletes chunks first, then stream by stream in plan order: the deltas (newest first), then the
 * full. Deletions are sequential. Never throws for a failed deletion; the caller reads `failed`.
 */
export async function runGarbageCollection(store: SnapStore, plan: GcPlan, logger: Logger): Promise<GcResult> {
  const result: GcResult = { deleted: [], failed: [], skippedImmutable: [...plan.skippedImmutable] };
  for (const snap of plan.skippedImmutable) {
    logger.info({ snapshot: listedObjectKey(snap) }, 'GC: Skipping snapshot, since it is immutable');
  }

  const remove = async (snap: Snapshot, what: string): Promise<'ok' | 'immutable' | 'failed'> => {
    const key = listedObjectKey(snap);
    logger.info({ snapshot: key }, `GC: Deleting ${what}`);
    try {
      await store.delete(snap);
      result.deleted.push(snap);
      return 'ok';
    } catch (error) {
      if (isSnapStoreError(error, 'E_IMMUTABLE')) {
        logger.info({ snapshot: key }, 'GC: Skipping snapshot, since it is immutable');
        result.skippedImmutable.push(snap);
        return 'immutable';
      }
      logger.warn({ snapshot: key, err: error }, 'GC: Failed to delete snapshot');
      result.failed.push({ snap, error });
      return 'failed';
    }
  };

  // Swift's chunks are the segments of dynamic large objects: they are the snapshot's data, removed with
  // it, never on their own (upstream drops chunk entries for Swift).
  const chunks = store.provider === 'Swift' ? [] : plan.chunks;
  for (const chunk of chunks) await remove(chunk, 'chunk of an uploaded snapshot');

  for (const stream of plan.streams) {
    let errors = 0;
    for (const delta of stream.deltas) {
      if ((await remove(delta, 'old delta snapshot')) === 'failed') errors++;
      if (errors >= GC_STREAM_ERROR_THRESHOLD) {
        logger.warn(
          { errors, fullSnapshot: stream.full === undefined ? undefined : listedObjectKey(stream.full) },
          'GC: Too many failed delta deletions in this snapshot stream; leaving the rest of it for the next run',
        );
        break;
      }
    }
    if (stream.full === undefined) continue;
    if (errors > 0) {
      logger.info(
        { snapshot: listedObjectKey(stream.full) },
        'GC: Not deleting full snapshot, since deleting some of its delta snapshots failed',
      );
      continue;
    }
    await remove(stream.full, 'old full snapshot');
  }

  logger.info(
    { deleted: result.deleted.length, failed: result.failed.length, skippedImmutable: result.skippedImmutable.length },
    'GC: Total number garbage collected snapshots',
  );
  return result;
}
