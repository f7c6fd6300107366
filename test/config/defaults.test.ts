import { describe, expect, it } from 'vitest';
import { defaultCommandConfig, flagBindings } from '../../src/config/build.js';
import { COMMAND_NAMES, COMMAND_SPECS } from '../../src/config/commands.js';
import type { CommandName } from '../../src/config/types.js';

const MiB = 1024 * 1024;
const s = 1000;
const m = 60 * s;

/** Upstream flag defaults (`AddFlags` in `pkg/types/*.go`) (durations in ms), with the flag's type and shorthand. */
const UPSTREAM: Record<string, [type: string, def: unknown, shorthand?: string]> = {
  // etcd connection
  endpoints: ['stringSlice', ['http://127.0.0.1:2379'], 'e'],
  'service-endpoints': ['stringSlice', []],
  'etcd-username': ['string', ''],
  'etcd-password': ['string', ''],
  'etcd-connection-timeout': ['duration', 30 * s],
  'etcd-snapshot-timeout': ['duration', 15 * m],
  'etcd-defrag-timeout': ['duration', 8 * m],
  'insecure-transport': ['bool', true],
  'insecure-skip-tls-verify': ['bool', true],
  cert: ['string', ''],
  key: ['string', ''],
  cacert: ['string', ''],
  // HTTP server
  'server-port': ['uint', 8080, 'p'],
  'enable-profiling': ['bool', false],
  'server-cert': ['string', ''],
  'server-address': ['string', ''],
  'server-key': ['string', ''],
  // snapshotter
  schedule: ['string', '0 */1 * * *', 's'],
  'delta-snapshot-period': ['duration', 20 * s],
  'delta-snapshot-memory-limit': ['uint', 10 * MiB],
  'garbage-collection-period': ['duration', 1 * m],
  'garbage-collection-policy': ['string', 'Exponential'],
  'max-backups': ['uint', 7, 'm'],
  'delta-snapshot-retention-period': ['duration', 0],
  // restoration
  'initial-cluster': ['string', 'default=http://localhost:2380'],
  'initial-cluster-token': ['string', 'etcd-cluster'],
  'data-dir': ['string', 'default.etcd', 'd'],
  'restoration-temp-snapshots-dir': ['string', 'default.restoration.tmp'],
  'initial-advertise-peer-urls': ['stringArray', ['http://localhost:2380']],
  name: ['string', 'default'],
  'skip-hash-check': ['bool', false],
  'max-fetchers': ['uint', 6],
  'max-call-send-message-size': ['int', 10 * MiB],
  'max-request-bytes': ['uint', 10 * MiB],
  'max-txn-ops': ['uint', 10240],
  'embedded-etcd-quota-bytes': ['int64', 8 * 1024 * MiB],
  'auto-compaction-mode': ['string', 'periodic'],
  'auto-compaction-retention': ['string', '30m'],
  // compression
  'compress-snapshots': ['bool', true],
  'compression-policy': ['string', 'gzip'],
  // health / leases
  'enable-snapshot-lease-renewal': ['bool', false],
  'enable-member-lease-renewal': ['bool', false],
  'k8s-heartbeat-duration': ['duration', 30 * s],
  'full-snapshot-lease-name': ['string', 'full-snapshot-revisions'],
  'delta-snapshot-lease-name': ['string', 'delta-snapshot-revisions'],
  // leader election
  'etcd-connection-timeout-leader-election': ['duration', 5 * s],
  'reelection-period': ['duration', 5 * s],
  // backoff
  'backoff-multiplier': ['uint', 2],
  'backoff-attempt-limit': ['uint', 6],
  'backoff-threshold-time': ['duration', 128 * s],
  // compactor (the shared names with the connection group are checked per command below)
  defragment: ['bool', true],
  'metrics-scrape-wait-duration': ['duration', 0],
  // copier
  'max-backups-to-copy': ['int', -1],
  'max-backup-age': ['int', -1],
  'max-parallel-copy-operations': ['int', 10],
  'wait-for-final-snapshot': ['bool', false],
  'wait-for-final-snapshot-timeout': ['duration', 0],
  // secondary extras
  'secondary-backup-sync-enabled': ['bool', false],
  'secondary-backup-sync-period': ['duration', 60 * m],
  // misc
  'config-file': ['string', ''],
  'log-level': ['uint32', 4],
  'log-format': ['string', 'json'],
  'defragmentation-schedule': ['string', '0 0 */3 * *'],
  'use-etcd-wrapper': ['bool', false],
  // member cleanup (ours; upstream removed its never-enabled member GC)
  'enable-member-cleanup': ['bool', true],
  // backup verification (ours)
  'verify-schedule': ['string', ''],
  // hash drill (ours)
  'hash-drill-schedule': ['string', 'after-full'],
  'against-endpoints': ['stringSlice', []],
  // API authentication (ours)
  'api-client-ca-file': ['string', ''],
  'api-token-file': ['string', ''],
  'api-open-probes': ['bool', true],
  'validation-mode': ['string', 'full'],
  // ls (ours)
  output: ['string', 'text', 'o'],
  all: ['bool', false],
  // restore (ours): point in time and plan only
  'dry-run': ['bool', false],
  'to-revision': ['int64', 0],
  'to-time': ['string', ''],
  'base-snapshot': ['string', ''],
  // restoration (ours): how delta snapshots are applied
  'delta-replay': ['string', 'auto'],
  // restoration (ours): the TTL of a restored lease whose TTL no delta recorded
  'restored-lease-ttl': ['duration', 60 * m],
  // age encryption of snapshot objects (ours)
  'encryption-recipients-file': ['string', ''],
  'encryption-identity-file': ['stringSlice', []],
};

/** The snapstore group, registered with each prefix. */
for (const p of ['', 'source-', 'secondary-']) {
  UPSTREAM[`${p}storage-provider`] = ['string', ''];
  UPSTREAM[`${p}store-container`] = ['string', ''];
  UPSTREAM[`${p}store-endpoint-override`] = ['string', ''];
  UPSTREAM[`${p}store-prefix`] = ['string', ''];
  UPSTREAM[`${p}max-parallel-chunk-uploads`] = ['uint', 5];
  UPSTREAM[`${p}min-chunk-size`] = ['int64', 5 * MiB];
  UPSTREAM[`${p}snapstore-temp-directory`] = ['string', '/tmp'];
}

/** Where a command's flag has a different default than the table (the compactor's own timeouts). */
const PER_COMMAND: Partial<Record<CommandName, Record<string, unknown>>> = {
  compact: { 'etcd-snapshot-timeout': 30 * m, 'etcd-defrag-timeout': 8 * m },
  // The drill's TLS check is on unless asked off (server's flag takes upstream's default from --insecure-transport).
  verify: { 'insecure-skip-tls-verify': false },
};

const connection = [
  'endpoints',
  'service-endpoints',
  'etcd-username',
  'etcd-password',
  'etcd-connection-timeout',
  'etcd-snapshot-timeout',
  'etcd-defrag-timeout',
  'insecure-transport',
  'insecure-skip-tls-verify',
  'cert',
  'key',
  'cacert',
];
const http = ['server-port', 'server-address', 'enable-profiling', 'server-cert', 'server-key'];
const snapshotter = [
  'schedule',
  'delta-snapshot-period',
  'delta-snapshot-memory-limit',
  'garbage-collection-period',
  'garbage-collection-policy',
  'max-backups',
  'delta-snapshot-retention-period',
];
const store = (p: string) =>
  [
    'storage-provider',
    'store-container',
    'store-endpoint-override',
    'store-prefix',
    'max-parallel-chunk-uploads',
    'min-chunk-size',
    'snapstore-temp-directory',
  ].map((f) => p + f);
const restoration = [
  'initial-cluster',
  'initial-cluster-token',
  'data-dir',
  'restoration-temp-snapshots-dir',
  'initial-advertise-peer-urls',
  'name',
  'skip-hash-check',
  'max-fetchers',
  'max-call-send-message-size',
  'max-request-bytes',
  'max-txn-ops',
  'embedded-etcd-quota-bytes',
  'auto-compaction-mode',
  'auto-compaction-retention',
  'delta-replay',
  'restored-lease-ttl',
];
const compression = ['compress-snapshots', 'compression-policy'];
const health = [
  'enable-snapshot-lease-renewal',
  'enable-member-lease-renewal',
  'k8s-heartbeat-duration',
  'full-snapshot-lease-name',
  'delta-snapshot-lease-name',
];
const leader = ['etcd-connection-timeout-leader-election', 'reelection-period'];
const backoff = ['backoff-multiplier', 'backoff-attempt-limit', 'backoff-threshold-time'];
const compactor = [
  'defragment',
  'etcd-snapshot-timeout',
  'etcd-defrag-timeout',
  'full-snapshot-lease-name',
  'delta-snapshot-lease-name',
  'enable-snapshot-lease-renewal',
  'metrics-scrape-wait-duration',
];
const encryption = ['encryption-recipients-file', 'encryption-identity-file'];
const copier = [
  'max-backups-to-copy',
  'max-backup-age',
  'max-parallel-copy-operations',
  'wait-for-final-snapshot',
  'wait-for-final-snapshot-timeout',
];

/** The flag groups (upstream `cmd/*.go`) of each subcommand (plus --log-level everywhere, ours outside server). */
const EXPECTED_FLAGS: Record<CommandName, string[]> = {
  server: [
    'log-level',
    'log-format',
    'config-file',
    'defragmentation-schedule',
    'use-etcd-wrapper',
    ...connection,
    ...http,
    ...snapshotter,
    ...store(''),
    ...encryption,
    ...store('secondary-'),
    'secondary-backup-sync-enabled',
    'secondary-backup-sync-period',
    ...compression,
    ...restoration,
    ...health,
    ...leader,
    ...backoff,
    'enable-member-cleanup',
    'verify-schedule',
    'hash-drill-schedule',
    'api-client-ca-file',
    'api-token-file',
    'api-open-probes',
  ],
  snapshot: [
    'log-level',
    'log-format',
    ...connection,
    ...store(''),
    ...encryption,
    ...snapshotter,
    ...compression,
    ...backoff,
    'defragmentation-schedule',
  ],
  restore: [
    'log-level',
    'log-format',
    ...restoration,
    ...store(''),
    ...encryption,
    'dry-run',
    'to-revision',
    'to-time',
    'base-snapshot',
    'output',
  ],
  initialize: ['log-level', 'log-format', 'validation-mode', ...restoration, ...store(''), ...encryption, ...connection],
  compact: ['log-level', 'log-format', ...restoration, ...store(''), ...encryption, ...compactor],
  copy: ['log-level', 'log-format', ...copier, ...store('source-'), ...store(''), ...encryption],
  ls: ['log-level', 'log-format', ...store(''), ...encryption, 'output', 'all'],
  verify: [
    'log-level',
    'log-format',
    ...store(''),
    ...encryption,
    'output',
    'all',
    'max-fetchers',
    'against-endpoints',
    'cacert',
    'cert',
    'key',
    'insecure-skip-tls-verify',
    'etcd-username',
    'etcd-password',
  ],
};

describe('flag groups match upstream', () => {
  it.each(COMMAND_NAMES)('%s has exactly its groups’ flags', (name) => {
    const flags = [...flagBindings(COMMAND_SPECS[name]).keys()].sort();
    expect(flags).toEqual([...EXPECTED_FLAGS[name]].sort());
  });

  const rows = COMMAND_NAMES.flatMap((name) => [...flagBindings(COMMAND_SPECS[name])].map(([flag, b]) => ({ name, flag, b })));
  it.each(rows)('$name --$flag: type, shorthand and default are upstream’s', ({ name, flag, b }) => {
    const expected = UPSTREAM[flag];
    expect(expected, `no upstream entry for --${flag}`).toBeDefined();
    const [type, def, shorthand] = expected as [string, unknown, string?];
    expect(b.field.type).toBe(type);
    expect(b.field.shorthand).toBe(shorthand);
    expect(b.defaultValue).toEqual(PER_COMMAND[name]?.[flag] ?? def);
  });

  it('every upstream entry is used by some command', () => {
    const used = new Set(rows.map((r) => r.flag));
    expect(Object.keys(UPSTREAM).filter((f) => !used.has(f))).toEqual([]);
  });

  it('builds the full default server config in upstream’s file layout', () => {
    const c = defaultCommandConfig('server');
    expect(c.etcdConnectionConfig.insecureSkipVerify).toBe(true);
    expect(c.etcdConnectionConfig.maxCallSendMsgSize).toBe(10 * MiB);
    expect(c.secondarySnapstoreConfig).toEqual({
      backupSyncEnabled: false,
      syncPeriod: 60 * m,
      storeConfig: {
        provider: '',
        container: '',
        endpointOverride: '',
        prefix: '',
        tempDir: '/tmp',
        maxParallelChunkUploads: 5,
        minChunkSize: 5 * MiB,
      },
    });
    expect(c.logLevel).toBe(4);
    expect(c.defragmentationSchedule).toBe('0 0 */3 * *');
    expect(c.enableMemberCleanup).toBe(true);
    // From a config file the struct default applies (the upstream quirk is flag-only).
    expect(defaultCommandConfig('server', true).etcdConnectionConfig.insecureSkipVerify).toBe(false);
  });

  it('returns fresh objects (no shared default arrays)', () => {
    const a = defaultCommandConfig('server');
    a.etcdConnectionConfig.endpoints.push('x');
    expect(defaultCommandConfig('server').etcdConnectionConfig.endpoints).toEqual(['http://127.0.0.1:2379']);
  });
});
