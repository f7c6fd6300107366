import type { CompressionPolicy, Logger, SnapStore, Snapshot } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { CronSchedule } from '../config/schedule.js';
import type { EtcdClient } from '../etcd/index.js';
import type { Metrics } from '../metrics.js';

export interface SnapshotterConfig {
  schedule: CronSchedule;
  /** < 1000 ms disables delta snapshots (upstream). */
  deltaSnapshotPeriodMs: number;
  deltaSnapshotMemoryLimit: number;
  snapshotTimeoutMs: number;
  connectionTimeoutMs: number;
  compression: CompressionPolicy | undefined;
  /** How long SIGTERM may wait for the last delta (ours; upstream drops buffered events). */
  finalDeltaTimeoutMs: number;
}

export interface SnapshotterDeps {
  client: EtcdClient;
  /** The store, re-created by the caller when credentials rotate. */
  store: () => Promise<SnapStore>;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  /** Called after every stored snapshot (leases, status). Errors are logged, never fatal. */
  onSnapshot?: (snap: Snapshot, info: StoredSnapshotInfo) => Promise<void> | void;
  /**
   * Asked right before a delta is written (a multi-member cluster): false when another member leads now. The
   * delta is then not written and the run ends with LeadershipLost: the new leader stores those events from
   * the store's newest revision, and a write of ours landing after it read the store would only overlap it.
   * Undefined (no answer) counts as leading: the events are written, as upstream would.
   */
  stillLeads?: () => Promise<boolean | undefined>;
  /**
   * Called when a delta period ends without a stored delta: a delta timer tick or an on-demand delta with
   * nothing buffered, and the start-up catch-up with nothing to catch up. Upstream renews the delta snapshot
   * lease on every delta tick, events or not (DeltaSnapshotCaseLeaseUpdate), and etcd-druid's BackupReady
   * condition wants that lease renewed within two delta periods: an idle etcd must still renew it. A stored
   * delta goes to `onSnapshot` instead. Runs beside the snapshot queue (an idle period does not hold it while
   * a slow API server answers); `signal` aborts when the run ends. At most one call runs at a time: a period
   * that ends while the previous call still runs is skipped. Errors are logged, never fatal.
   */
  onIdleDeltaPeriod?: (signal: AbortSignal) => Promise<void> | void;
}

/** What the snapshotter knows about a snapshot it just stored, besides its name. */
export interface StoredSnapshotInfo {
  /** Size of the uncompressed snapshot file (full: database ‖ sha256; delta: JSON ‖ sha256). */
  uncompressedBytes: number;
  /** The full snapshot the chain builds on after this one (the snapshot itself for a full). */
  baseFull: Snapshot | undefined;
}

/** The chain state that survives loop restarts: what the store holds, newest first. */
export interface ChainState {
  /** Last stored snapshot (delta or full); a dummy full at revision 0 when the store is empty. */
  prevSnapshot: Snapshot | undefined;
  prevFull: Snapshot | undefined;
  prevDeltas: Snapshot[];
  prevFullSucceeded: boolean;
}
