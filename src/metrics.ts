import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { readFileSync } from 'node:fs';

/**
 * The `etcdbr_*` metrics of etcd-backup-restore (upstream `pkg/metrics/metrics.go`) with upstream's names, types
 * and labels, pre-initialised to zero for every label combination, plus our own snapshot size metric.
 * One instance per process (or per test) — never a global registry, so tests can build their own.
 */
export const SNAPSHOT_KINDS = ['Full', 'Incr', 'Chunk'] as const;
const SUCCEEDED = ['false', 'true'] as const;
const RESTORE_KINDS = ['single_member', 'single_node'] as const;

/** The `result` label of etcdbr_backup_hash_drill_runs_total. */
export const HASH_DRILL_RESULTS = ['match', 'mismatch', 'inconclusive', 'error'] as const;
export type HashDrillResult = (typeof HASH_DRILL_RESULTS)[number];

export type MetricKind = (typeof SNAPSHOT_KINDS)[number];

export class Metrics {
  readonly registry = new Registry();

  readonly snapshotGcTotal = new Counter({
    name: 'etcdbr_snapshot_gc_total',
    help: 'Total number of garbage collected snapshots.',
    labelNames: ['kind', 'succeeded'] as const,
    registers: [this.registry],
  });
  readonly snapshotLatestRevision = new Gauge({
    name: 'etcdbr_snapshot_latest_revision',
    help: 'Revision number of latest snapshot taken.',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly snapshotLatestTimestamp = new Gauge({
    name: 'etcdbr_snapshot_latest_timestamp',
    help: 'Timestamp of latest snapshot taken.',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly snapshotRequired = new Gauge({
    name: 'etcdbr_snapshot_required',
    help: 'Indicates whether a new snapshot is required to be taken.',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  readonly snapshotDurationSeconds = new Histogram({
    name: 'etcdbr_snapshot_duration_seconds',
    help: 'Total latency distribution of saving snapshot to object store.',
    labelNames: ['kind', 'succeeded'] as const,
    registers: [this.registry],
  });
  readonly validationDurationSeconds = new Histogram({
    name: 'etcdbr_validation_duration_seconds',
    help: 'Total latency distribution of validating data directory.',
    labelNames: ['succeeded'] as const,
    registers: [this.registry],
  });
  readonly restorationDurationSeconds = new Histogram({
    name: 'etcdbr_restoration_duration_seconds',
    help: 'Total latency distribution required to restore the etcd member.',
    labelNames: ['restore', 'succeeded'] as const,
    registers: [this.registry],
  });
  readonly defragmentationDurationSeconds = new Histogram({
    name: 'etcdbr_defragmentation_duration_seconds',
    help: 'Total latency distribution of defragmentation of each etcd cluster member.',
    labelNames: ['succeeded', 'endpoint'] as const,
    registers: [this.registry],
  });
  readonly snapstoreLatestDeltasTotal = new Gauge({
    name: 'etcdbr_snapstore_latest_deltas_total',
    help: 'Total number of delta snapshots taken since the latest full snapshot.',
    registers: [this.registry],
  });
  readonly snapstoreLatestDeltasRevisionsTotal = new Gauge({
    name: 'etcdbr_snapstore_latest_deltas_revisions_total',
    help: 'Total number of revisions stored in delta snapshots taken since the latest full snapshot.',
    registers: [this.registry],
  });
  readonly snapshotterFailure = new Counter({
    name: 'etcdbr_snapshotter_failure',
    help: 'Total number of snapshotter errors.',
    labelNames: ['error'] as const,
    registers: [this.registry],
  });
  readonly clusterSize = new Gauge({
    name: 'etcdbr_cluster_size',
    help: 'Size of the etcd cluster.',
    registers: [this.registry],
  });
  readonly isLearner = new Gauge({
    name: 'etcdbr_is_learner',
    help: 'Whether this member is a learner.',
    registers: [this.registry],
  });
  readonly isLearnerCountTotal = new Counter({
    name: 'etcdbr_is_learner_count_total',
    help: 'Total number times member added as learner.',
    labelNames: ['succeeded'] as const,
    registers: [this.registry],
  });
  readonly addLearnerDurationSeconds = new Histogram({
    name: 'etcdbr_add_learner_duration_seconds',
    help: 'Total latency distribution of adding an etcd member as a learner.',
    labelNames: ['succeeded'] as const,
    registers: [this.registry],
  });
  readonly memberRemoveDurationSeconds = new Histogram({
    name: 'etcdbr_member_remove_duration_seconds',
    help: 'Total latency distribution of removing an etcd member from the cluster.',
    labelNames: ['succeeded'] as const,
    registers: [this.registry],
  });
  readonly memberPromoteDurationSeconds = new Histogram({
    name: 'etcdbr_member_promote_duration_seconds',
    help: 'Total latency distribution of promoting a learner to a voting member.',
    labelNames: ['succeeded'] as const,
    registers: [this.registry],
  });
  readonly networkTransmittedBytes = new Counter({
    name: 'etcdbr_network_transmitted_bytes',
    help: 'The total number of bytes transmitted over the network.',
    registers: [this.registry],
    collect: () => this.collectNetwork(),
  });
  readonly networkReceivedBytes = new Counter({
    name: 'etcdbr_network_received_bytes',
    help: 'The total number of bytes received over the network.',
    registers: [this.registry],
  });
  /** Ours (not upstream): bytes of the last stored snapshot object per kind. */
  readonly snapshotSizeBytes = new Gauge({
    name: 'etcdbr_snapshot_size_bytes',
    help: 'Size in bytes of the latest snapshot object per kind (Full, Incr) as stored: compressed, and encrypted when it is; 0: none since start and none listed.',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });

  // Ours: on-demand maintenance (POST /maintenance/defrag and /maintenance/compact).
  readonly maintenanceDurationSeconds = new Histogram({
    name: 'etcdbr_maintenance_duration_seconds',
    help: 'Duration of on-demand maintenance operations (defrag: rolling defragmentation; compact: history compaction).',
    labelNames: ['operation', 'succeeded'] as const,
    registers: [this.registry],
  });
  // Ours: what the last scrub of the backups (`verify`, --verify-schedule, /snapshot/verify) found.
  readonly backupLastVerifiedRevision = new Gauge({
    name: 'etcdbr_backup_last_verified_revision',
    help: 'Revision the newest backup chain restores to through objects that checked out, as the last verification found it (when a later object is broken, a restore needs --to-revision up to it); 0: none yet.',
    registers: [this.registry],
  });
  readonly backupVerifyFailures = new Counter({
    name: 'etcdbr_backup_verify_failures_total',
    help: 'Verifications that found the newest backup chain broken, or could not read the store.',
    registers: [this.registry],
  });
  readonly backupLatestRestorableTimestamp = new Gauge({
    name: 'etcdbr_backup_latest_restorable_timestamp_seconds',
    help: 'When the newest backup a restore would reach (as the last verification found) was taken, in Unix seconds: the recovery point.',
    registers: [this.registry],
  });

  // Ours: the hash drill (--hash-drill-schedule): etcd's HashKV against the one computed from the newest chain.
  readonly hashDrillLastProvenRevision = new Gauge({
    name: 'etcdbr_backup_hash_drill_last_proven_revision',
    help: "Revision at which the last hash drill found the store's HashKV equal to etcd's: the store gives back exactly what etcd held there; 0: none yet.",
    registers: [this.registry],
  });
  readonly hashDrillLastProvenTimestamp = new Gauge({
    name: 'etcdbr_backup_hash_drill_last_proven_timestamp_seconds',
    help: 'When the last hash drill that found the store equal to etcd ended, in Unix seconds; 0: none yet.',
    registers: [this.registry],
  });
  readonly hashDrillLastRunTimestamp = new Gauge({
    name: 'etcdbr_backup_hash_drill_last_run_timestamp_seconds',
    help: 'When the last hash drill ended, whatever its result, in Unix seconds; 0: none yet.',
    registers: [this.registry],
  });
  readonly hashDrillRuns = new Counter({
    name: 'etcdbr_backup_hash_drill_runs_total',
    help: 'Hash drills by result: match; mismatch (the store differs from etcd: the log names the first differing revisions); inconclusive (nothing comparable, the log says why); error (the store or etcd could not be read).',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });

  // Ours: a leader that could not continue the chain with deltas (etcd compacted the history, or the watch
  // failed) took a full snapshot instead; no point in time between the chain's end and that full restores.
  readonly snapshotChainGaps = new Counter({
    name: 'etcdbr_snapshot_chain_gaps_total',
    help: 'Times a leader could not back up the revisions since the last snapshot as deltas and took a full snapshot instead: no point in time between the two can be restored.',
    registers: [this.registry],
  });

  constructor(opts: { defaultMetrics?: boolean } = {}) {
    // The event-loop-lag histogram samples with a timer, and each wakeup of an idle process costs: alone in a
    // bare Node 24 here, the timer took 1.2 ms/s of CPU at 100 ms and 0.14 ms/s at 1 s (prom-client's default,
    // 10 ms, would take ~12). At 1 s a stall of a second or more always shows in nodejs_eventloop_lag_*, a
    // shorter one when it overlaps a tick; nodejs_eventloop_lag_seconds is measured at each scrape regardless.
    if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 1000 });
    this.preinitialise();
  }

  /** Upstream creates every label combination up front so dashboards see zeros, not gaps. */
  private preinitialise(): void {
    for (const kind of SNAPSHOT_KINDS) {
      this.snapshotLatestRevision.labels(kind).set(0);
      this.snapshotLatestTimestamp.labels(kind).set(0);
      this.snapshotRequired.labels(kind).set(0);
      this.snapshotSizeBytes.labels(kind).set(0);
      for (const s of SUCCEEDED) {
        this.snapshotGcTotal.labels(kind, s).inc(0);
        this.snapshotDurationSeconds.zero({ kind, succeeded: s });
      }
    }
    for (const s of SUCCEEDED) {
      this.validationDurationSeconds.zero({ succeeded: s });
      this.defragmentationDurationSeconds.zero({ succeeded: s, endpoint: '' });
      this.isLearnerCountTotal.labels(s).inc(0);
      this.addLearnerDurationSeconds.zero({ succeeded: s });
      this.memberRemoveDurationSeconds.zero({ succeeded: s });
      this.memberPromoteDurationSeconds.zero({ succeeded: s });
      for (const r of RESTORE_KINDS) this.restorationDurationSeconds.zero({ restore: r, succeeded: s });
    }
    for (const r of HASH_DRILL_RESULTS) this.hashDrillRuns.labels(r).inc(0);
    this.snapshotterFailure.labels('').inc(0);
    this.snapstoreLatestDeltasTotal.set(0);
    this.snapstoreLatestDeltasRevisionsTotal.set(0);
    this.clusterSize.set(0);
    this.isLearner.set(0);
  }

  private lastNet = { tx: 0, rx: 0 };

  /** Linux: bytes in /proc/self/net/dev summed over interfaces, exposed as monotonic counters. */
  private collectNetwork(): void {
    let text: string;
    try {
      text = readFileSync('/proc/self/net/dev', 'utf8');
    } catch {
      return;
    }
    let rx = 0;
    let tx = 0;
    for (const line of text.split('\n').slice(2)) {
      const parts = line.trim().split(/[:\s]+/);
      if (parts.length < 10) continue;
      rx += Number(parts[1]);
      tx += Number(parts[9]);
    }
    if (tx > this.lastNet.tx) this.networkTransmittedBytes.inc(tx - this.lastNet.tx);
    if (rx > this.lastNet.rx) this.networkReceivedBytes.inc(rx - this.lastNet.rx);
    this.lastNet = { tx, rx };
  }
}

/** Longest `error` label value of etcdbr_snapshotter_failure. */
const FAILURE_LABEL_MAX = 120;

/**
 * The `error` label of etcdbr_snapshotter_failure. Upstream uses the raw error message, whose snapshot
 * names, revisions, timestamps and addresses make a new time series for almost every failure: over weeks
 * that is an unbounded set of series in Prometheus. Digit runs become `N` and the text is cut, so one kind
 * of failure stays one series while the label still says what went wrong.
 */
export function failureLabel(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const normalized = message
    .replace(/[0-9a-f]{16,}/gi, 'X')
    .replace(/\d+/g, 'N')
    .replace(/\s+/g, ' ')
    .trim();
  return normalized.length > FAILURE_LABEL_MAX ? `${normalized.slice(0, FAILURE_LABEL_MAX - 1)}…` : normalized;
}
