import { defineGroup } from '../schema.js';
import type { CompactorConfig } from '../types.js';

/** Compactor (`pkg/types/compactor.go`, only `compact`). Its snapshot timeout default differs from the connection group's. */
export const compactorGroup = defineGroup<CompactorConfig>({
  title: 'compactor',
  fields: {
    // Compaction is offline (src/compactor/offline.ts): the result is compact by construction, and a local
    // etcd runs only for a chain the offline writer refuses. The usages say so.
    defragment: {
      type: 'bool',
      flag: 'defragment',
      usage: 'defragment the local etcd after compaction (only when compacting through etcd; the offline result needs none)',
    },
    snapshotTimeout: {
      type: 'duration',
      flag: 'etcd-snapshot-timeout',
      usage: 'timeout for storing the compacted snapshot (through etcd: also for the compaction call)',
    },
    defragTimeout: {
      type: 'duration',
      flag: 'etcd-defrag-timeout',
      usage: 'timeout for the defragmentation of the local etcd (only when compacting through etcd)',
    },
    fullSnapshotLeaseName: { type: 'string', flag: 'full-snapshot-lease-name', usage: 'name of the full snapshot lease' },
    deltaSnapshotLeaseName: { type: 'string', flag: 'delta-snapshot-lease-name', usage: 'name of the delta snapshot lease' },
    snapshotLeaseRenewalEnabled: {
      type: 'bool',
      flag: 'enable-snapshot-lease-renewal',
      usage: 'renew the full snapshot lease in Kubernetes after compaction',
    },
    metricsScrapeWaitDuration: {
      type: 'duration',
      flag: 'metrics-scrape-wait-duration',
      usage: 'time to wait after compaction so that Prometheus can scrape the metrics',
    },
  },
  defaults: () => ({
    defragment: true,
    snapshotTimeout: 30 * 60_000,
    defragTimeout: 8 * 60_000,
    fullSnapshotLeaseName: 'full-snapshot-revisions',
    deltaSnapshotLeaseName: 'delta-snapshot-revisions',
    snapshotLeaseRenewalEnabled: false,
    metricsScrapeWaitDuration: 0,
  }),
  validate(c, issues, flag) {
    if (c.snapshotTimeout <= 0) issues.add(`${flag('snapshotTimeout')} must be greater than 0`);
    if (c.defragTimeout <= 0) issues.add(`${flag('defragTimeout')} must be greater than 0`);
    if (c.metricsScrapeWaitDuration < 0) issues.add(`${flag('metricsScrapeWaitDuration')} must not be negative`);
    if (c.snapshotLeaseRenewalEnabled && c.fullSnapshotLeaseName === '') {
      issues.add(`${flag('fullSnapshotLeaseName')} must not be empty when snapshot lease renewal is enabled`);
    }
  },
});
