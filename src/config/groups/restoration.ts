import { defineGroup } from '../schema.js';
import type { RestorationConfig } from '../types.js';
import { cleanPath, urlListError, urlsMapError } from '../urls.js';

const DELTA_REPLAY_MODES: readonly string[] = ['auto', 'offline', 'online'];

/** The TTLs etcd grants: 1 s to its `MaxLeaseTTL` of 9,000,000,000 s. */
const MAX_LEASE_TTL_MS = 9_000_000_000 * 1000;

/** Restoration (`pkg/types/restorer.go`; `--delta-replay` and `--restored-lease-ttl` are ours). */
export const restorationGroup = defineGroup<RestorationConfig>({
  title: 'restoration',
  fields: {
    initialCluster: { type: 'string', flag: 'initial-cluster', usage: 'initial cluster configuration for restoration (name=peer-url,...)' },
    initialClusterToken: {
      type: 'string',
      flag: 'initial-cluster-token',
      usage: 'initial cluster token for the etcd cluster during restoration',
    },
    dataDir: { type: 'string', flag: 'data-dir', shorthand: 'd', usage: 'path to the etcd data directory' },
    tempDir: {
      type: 'string',
      flag: 'restoration-temp-snapshots-dir',
      usage: 'directory where delta snapshots are kept temporarily during restoration',
    },
    name: { type: 'string', flag: 'name', usage: 'human-readable name of this member' },
    autoCompactionRetention: {
      type: 'string',
      flag: 'auto-compaction-retention',
      usage: 'auto compaction retention of the embedded etcd during restoration (hours or a duration)',
    },
    autoCompactionMode: {
      type: 'string',
      flag: 'auto-compaction-mode',
      usage: 'auto compaction mode of the embedded etcd during restoration: periodic or revision',
    },
    initialAdvertisePeerURLs: {
      type: 'stringArray',
      flag: 'initial-advertise-peer-urls',
      usage: "this member's peer URLs advertised to the rest of the cluster",
    },
    maxTxnOps: {
      type: 'uint',
      flag: 'max-txn-ops',
      fileKey: 'MaxTxnOps',
      usage: 'maximum number of operations per transaction of the embedded etcd',
    },
    maxRequestBytes: {
      type: 'uint',
      flag: 'max-request-bytes',
      fileKey: 'MaxRequestBytes',
      usage: 'maximum client request size in bytes the embedded etcd accepts',
    },
    maxCallSendMsgSize: {
      type: 'int',
      flag: 'max-call-send-message-size',
      usage: 'maximum size in bytes of a request the restorer sends to the embedded etcd',
    },
    embeddedEtcdQuotaBytes: {
      type: 'int64',
      flag: 'embedded-etcd-quota-bytes',
      usage: 'backend quota in bytes of the embedded etcd used for restoration',
    },
    maxFetchers: { type: 'uint', flag: 'max-fetchers', usage: 'maximum number of delta snapshots fetched in parallel' },
    skipHashCheck: {
      type: 'bool',
      flag: 'skip-hash-check',
      usage: 'ignore the snapshot integrity hash (required when the snapshot was copied from a data directory)',
    },
    deltaReplay: {
      type: 'string',
      flag: 'delta-replay',
      usage:
        'how delta snapshots are applied: offline (straight into the restored backend, no etcd), online (through a local etcd), or auto (offline where it applies, else online)',
    },
    restoredLeaseTtl: {
      type: 'duration',
      flag: 'restored-lease-ttl',
      usage:
        'TTL a restore, or compact, gives a lease that keys name at the restored (compact: the newest) revision when neither the full snapshot nor a delta snapshot holds its TTL (deltas written by the Go tool); whole seconds, at least 1s',
    },
  },
  defaults: () => ({
    initialCluster: 'default=http://localhost:2380',
    initialClusterToken: 'etcd-cluster',
    dataDir: 'default.etcd',
    tempDir: 'default.restoration.tmp',
    name: 'default',
    autoCompactionRetention: '30m',
    autoCompactionMode: 'periodic',
    initialAdvertisePeerURLs: ['http://localhost:2380'],
    maxTxnOps: 10240,
    maxRequestBytes: 10 * 1024 * 1024,
    maxCallSendMsgSize: 10 * 1024 * 1024,
    embeddedEtcdQuotaBytes: 8 * 1024 * 1024 * 1024,
    maxFetchers: 6,
    skipHashCheck: false,
    deltaReplay: 'auto',
    restoredLeaseTtl: 60 * 60 * 1000,
  }),
  complete(c) {
    c.dataDir = cleanPath(c.dataDir);
    c.tempDir = cleanPath(c.tempDir);
  },
  validate(c, issues, flag) {
    const clusterErr = urlsMapError(c.initialCluster);
    if (clusterErr !== undefined) issues.add(`${flag('initialCluster')}: ${clusterErr}`);
    const peerErr = urlListError(c.initialAdvertisePeerURLs);
    if (peerErr !== undefined) issues.add(`${flag('initialAdvertisePeerURLs')}: ${peerErr}`);
    if (c.maxFetchers <= 0) issues.add(`${flag('maxFetchers')} must be greater than 0`);
    if (c.maxCallSendMsgSize <= 0) issues.add(`${flag('maxCallSendMsgSize')} must be greater than 0`);
    if (c.embeddedEtcdQuotaBytes <= 0) issues.add(`${flag('embeddedEtcdQuotaBytes')} must be greater than 0`);
    if (!DELTA_REPLAY_MODES.includes(c.deltaReplay)) {
      issues.add(`${flag('deltaReplay')}: unknown mode ${JSON.stringify(c.deltaReplay)}; use auto, offline or online`);
    }
    if (c.restoredLeaseTtl < 1000 || c.restoredLeaseTtl > MAX_LEASE_TTL_MS || c.restoredLeaseTtl % 1000 !== 0) {
      issues.add(`${flag('restoredLeaseTtl')} must be whole seconds from 1s to 9000000000s (etcd's longest lease)`);
    }
    if (c.autoCompactionMode !== 'periodic' && c.autoCompactionMode !== 'revision') {
      issues.add(`${flag('autoCompactionMode')}: unknown mode ${JSON.stringify(c.autoCompactionMode)}; use periodic or revision`);
    }
  },
});
