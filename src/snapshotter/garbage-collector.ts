import {
  planGarbageCollection,
  runGarbageCollection,
  type GcPolicyKind,
  type GcResult,
  type Logger,
  type SnapStore,
  type Snapshot,
} from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import { failureLabel, type Metrics } from '../metrics.js';

export interface GarbageCollectorConfig {
  policy: GcPolicyKind;
  maxBackups: number;
  deltaRetentionMs: number;
  /** `--garbage-collection-period`; <= 1 s disables GC (upstream). */
  periodMs: number;
}

/**
 * Deletes old snapshots on the leader every `--garbage-collection-period` (first run after one period).
 * The decision is the pure `planGarbageCollection`; this class only schedules it, executes the plan,
 * and counts results. Failures are counted in metrics and logged, never fatal.
 */
export class GarbageCollector {
  constructor(
    private readonly config: GarbageCollectorConfig,
    private readonly deps: {
      /** Re-created every run, as upstream does, so rotated credentials take effect. */
      store: () => Promise<SnapStore>;
      /** The last stored snapshot's revision (chunks above it belong to uploads in flight). */
      latestSnapshotRevision: () => number;
      clock: Clock;
      logger: Logger;
      metrics: Metrics;
    },
  ) {}

  get enabled(): boolean {
    return this.config.periodMs > 1000;
  }

  async run(signal: AbortSignal): Promise<void> {
    if (!this.enabled) {
      this.deps.logger.info({ periodMs: this.config.periodMs }, 'garbage collection period <= 1s: garbage collection disabled');
      return;
    }
    while (!signal.aborted) {
      try {
        await this.deps.clock.sleep(this.config.periodMs, signal);
      } catch {
        return;
      }
      if (signal.aborted) return;
      await this.collectOnce();
    }
  }

  /** One GC pass; never throws. */
  async collectOnce(): Promise<GcResult | undefined> {
    const m = this.deps.metrics;
    try {
      const store = await this.deps.store();
      const list = await store.list({ includeExcluded: true });
      const plan = planGarbageCollection(list, this.deps.clock.now(), {
        kind: this.config.policy,
        maxBackups: this.config.maxBackups,
        deltaRetentionMs: this.config.deltaRetentionMs,
        latestSnapshotRevision: this.deps.latestSnapshotRevision(),
      });
      const result = await runGarbageCollection(store, plan, this.deps.logger);
      for (const snap of result.deleted) m.snapshotGcTotal.labels(metricKind(snap), 'true').inc();
      for (const f of result.failed) {
        m.snapshotGcTotal.labels(metricKind(f.snap), 'false').inc();
        m.snapshotterFailure.labels(failureLabel(f.error)).inc();
      }
      if (result.deleted.length > 0 || result.failed.length > 0) {
        this.deps.logger.info(
          { deleted: result.deleted.length, failed: result.failed.length, immutable: result.skippedImmutable.length },
          'garbage collection finished',
        );
      }
      return result;
    } catch (err) {
      m.snapshotterFailure.labels(failureLabel(err)).inc();
      this.deps.logger.warn({ err }, 'garbage collection failed');
      return undefined;
    }
  }
}

function metricKind(snap: Snapshot): 'Full' | 'Incr' | 'Chunk' {
  return snap.isChunk ? 'Chunk' : snap.kind;
}
