import type { CompressionConfig, EtcdConnectionConfig, SnapshotterConfig } from '../config/types.js';
import { GarbageCollector } from './garbage-collector.js';
import { CronSchedule } from '../config/schedule.js';
import { Snapshotter, type SnapshotterDeps } from './snapshotter.js';

/** How long SIGTERM waits for the last delta snapshot before the process exits. */
export const FINAL_DELTA_TIMEOUT_MS = 20_000;

/** The flag groups a snapshotter is built from, and what it runs with (SnapshotterDeps, passed on as they are). */
export interface SnapshotterFactoryInput extends SnapshotterDeps {
  connection: EtcdConnectionConfig;
  snapshotter: SnapshotterConfig;
  compression: CompressionConfig;
}

/** Builds snapshotters and garbage collectors from the flag groups; shared by `server` and `snapshot`. */
export function snapshotterFactory(input: SnapshotterFactoryInput) {
  const { connection, snapshotter: sc, compression, ...deps } = input;
  const { store, clock, logger, metrics } = deps;
  return {
    createSnapshotter: () =>
      Snapshotter.create(
        {
          schedule: new CronSchedule(sc.schedule),
          deltaSnapshotPeriodMs: sc.deltaSnapshotPeriod,
          deltaSnapshotMemoryLimit: sc.deltaSnapshotMemoryLimit,
          snapshotTimeoutMs: connection.snapshotTimeout,
          connectionTimeoutMs: connection.connectionTimeout,
          compression: compression.enabled ? compression.policy : undefined,
          finalDeltaTimeoutMs: FINAL_DELTA_TIMEOUT_MS,
        },
        deps,
      ),
    createGarbageCollector: (s: Snapshotter) =>
      new GarbageCollector(
        {
          policy: sc.garbageCollectionPolicy,
          maxBackups: sc.maxBackups,
          deltaRetentionMs: sc.deltaSnapshotRetentionPeriod,
          periodMs: sc.garbageCollectionPeriod,
        },
        { store, latestSnapshotRevision: () => s.chain.prevSnapshot?.lastRevision ?? 0, clock, logger, metrics },
      ),
  };
}
