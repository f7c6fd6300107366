import type { Logger, SnapStore, Snapshot } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { CompressionConfig, EtcdConnectionConfig, SnapshotterConfig } from '../config/types.js';
import type { Metrics } from '../metrics.js';
import type { EtcdClient } from '../etcd/index.js';
import { GarbageCollector } from './garbage-collector.js';
import { CronSchedule } from '../config/schedule.js';
import { Snapshotter, type SnapshotterDeps, type StoredSnapshotInfo } from './snapshotter.js';

/** How long SIGTERM waits for the last delta snapshot before the process exits. */
export const FINAL_DELTA_TIMEOUT_MS = 20_000;

export interface SnapshotterFactoryInput {
  connection: EtcdConnectionConfig;
  snapshotter: SnapshotterConfig;
  compression: CompressionConfig;
  client: EtcdClient;
  store: () => Promise<SnapStore>;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  /** After every stored snapshot (Kubernetes leases, EtcdMember status). */
  onSnapshot?: (snap: Snapshot, info: StoredSnapshotInfo) => Promise<void> | void;
  /** Before every delta write (SnapshotterDeps.stillLeads). */
  stillLeads?: () => Promise<boolean | undefined>;
  /** After every delta period that stored nothing (the delta snapshot lease is renewed all the same). */
  onIdleDeltaPeriod?: SnapshotterDeps['onIdleDeltaPeriod'];
}

/** Builds snapshotters and garbage collectors from the flag groups; shared by `server` and `snapshot`. */
export function snapshotterFactory(input: SnapshotterFactoryInput) {
  const {
    connection,
    snapshotter: sc,
    compression,
    client,
    store,
    clock,
    logger,
    metrics,
    onSnapshot,
    stillLeads,
    onIdleDeltaPeriod,
  } = input;
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
        {
          client,
          store,
          clock,
          logger,
          metrics,
          ...(onSnapshot ? { onSnapshot } : {}),
          ...(stillLeads ? { stillLeads } : {}),
          ...(onIdleDeltaPeriod ? { onIdleDeltaPeriod } : {}),
        },
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
