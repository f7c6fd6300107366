import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { commandFlagSet } from '../../src/cli/help.js';
import { buildCommandConfig } from '../../src/config/build.js';
import { COMMAND_SPECS } from '../../src/config/commands.js';
import * as yamlLibrary from 'yaml';
import { parseConfigText, readConfigFile } from '../../src/config/file.js';
import { ConfigError } from '../../src/config/schema.js';

/** Shaped like upstream's example/00-backup-restore-server-config.yaml. */
const EXAMPLE = `
etcdConnectionConfig:
  endpoints:
  - "https://etcd-main-local:2379"
  serviceEndpoints: ["https://etcd-main-client:2379"]
  connectionTimeout: "10s"
  snapshotTimeout: 20m
  insecureTransport: false
  caFile: /var/etcd/ssl/ca/bundle.crt
  maxCallSendMsgSize: 2097152
serverConfig:
  port: 9090
  server-cert: /var/tls/tls.crt
snapshotterConfig:
  schedule: "*/30 * * * *"
  garbageCollectionPolicy: LimitBased
  maxBackups: 3
  deltaSnapshotPeriod: 5000000000
snapstoreConfig:
  provider: S3
  container: bucket
  prefix: etcd-main
  envPrefix: ""
  isSource: false
secondarySnapstoreConfig:
  StoreConfig:
    provider: GCS
    container: other
  backupSyncEnabled: true
  syncPeriod: 30m
compressionConfig:
  enabled: true
  policy: zlib
restorationConfig:
  dataDir: /var/etcd/data/new.etcd/
  MaxTxnOps: 20000
  maxrequestbytes: 1048576
  initialAdvertisePeerURLs: ["https://etcd-main-0:2380"]
  restoreDataDir: /var/etcd/data
healthConfig:
  snapshotLeaseRenewalEnabled: true
  heartbeatDuration: 10s
leaderElectionConfig:
  reelectionPeriod: 7s
exponentialBackoffConfig:
  multiplier: 3
defragmentationSchedule: "0 1 * * *"
useEtcdWrapper: true
somethingElse: 1
`;

function withFile(text: string, ...argv: string[]) {
  const flags = commandFlagSet(COMMAND_SPECS.server).parse(argv).changed;
  return buildCommandConfig('server', {
    flags,
    configDocument: parseConfigText(text, 'cfg.yaml', yamlLibrary),
    configFilePath: 'cfg.yaml',
  });
}

function fileProblems(text: string): readonly string[] {
  try {
    withFile(text);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe('--config-file', () => {
  it('reads upstream keys, durations and capitalised keys; unspecified keys keep defaults', () => {
    const { config: c, warnings } = withFile(EXAMPLE);
    expect(c.etcdConnectionConfig.endpoints).toEqual(['https://etcd-main-local:2379']);
    expect(c.etcdConnectionConfig.serviceEndpoints).toEqual(['https://etcd-main-client:2379']);
    expect(c.etcdConnectionConfig.connectionTimeout).toBe(10_000);
    expect(c.etcdConnectionConfig.snapshotTimeout).toBe(20 * 60_000);
    expect(c.etcdConnectionConfig.defragTimeout).toBe(8 * 60_000);
    expect(c.etcdConnectionConfig.insecureTransport).toBe(false);
    expect(c.etcdConnectionConfig.caFile).toBe('/var/etcd/ssl/ca/bundle.crt');
    expect(c.etcdConnectionConfig.maxCallSendMsgSize).toBe(2097152);
    // Struct default, not the flag's quirky true (docs/design-decisions.md, upstream quirks).
    expect(c.etcdConnectionConfig.insecureSkipVerify).toBe(false);
    expect(c.serverConfig).toEqual({ port: 9090, address: '', enableProfiling: false, serverCert: '/var/tls/tls.crt', serverKey: '' });
    expect(c.snapshotterConfig.schedule).toBe('*/30 * * * *');
    expect(c.snapshotterConfig.garbageCollectionPolicy).toBe('LimitBased');
    expect(c.snapshotterConfig.maxBackups).toBe(3);
    // A number is nanoseconds (upstream wrappers.Duration).
    expect(c.snapshotterConfig.deltaSnapshotPeriod).toBe(5_000);
    expect(c.snapshotterConfig.garbageCollectionPeriod).toBe(60_000);
    expect(c.snapstoreConfig).toMatchObject({ provider: 'S3', container: 'bucket', prefix: 'etcd-main', tempDir: '/tmp' });
    expect(c.secondarySnapstoreConfig.storeConfig).toMatchObject({ provider: 'GCS', container: 'other', maxParallelChunkUploads: 5 });
    expect(c.secondarySnapstoreConfig.backupSyncEnabled).toBe(true);
    expect(c.secondarySnapstoreConfig.syncPeriod).toBe(30 * 60_000);
    expect(c.compressionConfig).toEqual({ enabled: true, policy: 'zlib' });
    expect(c.restorationConfig.dataDir).toBe('/var/etcd/data/new.etcd');
    expect(c.restorationConfig.maxTxnOps).toBe(20000);
    expect(c.restorationConfig.maxRequestBytes).toBe(1048576);
    expect(c.restorationConfig.initialAdvertisePeerURLs).toEqual(['https://etcd-main-0:2380']);
    expect(c.healthConfig.snapshotLeaseRenewalEnabled).toBe(true);
    expect(c.healthConfig.heartbeatDuration).toBe(10_000);
    expect(c.leaderElectionConfig).toEqual({ reelectionPeriod: 7_000, etcdConnectionTimeout: 5_000 });
    expect(c.exponentialBackoffConfig).toEqual({ multiplier: 3, attemptLimit: 6, thresholdTime: 128_000 });
    expect(c.defragmentationSchedule).toBe('0 1 * * *');
    expect(c.useEtcdWrapper).toBe(true);
    expect(warnings).toEqual([
      'config file cfg.yaml: unknown key somethingElse ignored',
      'config file cfg.yaml: unknown key restorationConfig.restoreDataDir ignored',
    ]);
  });

  it('lets flags given on the command line override the file (our deliberate difference)', () => {
    const { config: c } = withFile(
      EXAMPLE,
      '--max-backups=9',
      '--insecure-skip-tls-verify',
      '--endpoints=http://x:2379',
      '--secondary-store-container=c2',
    );
    expect(c.snapshotterConfig.maxBackups).toBe(9);
    expect(c.etcdConnectionConfig.insecureSkipVerify).toBe(true);
    expect(c.etcdConnectionConfig.endpoints).toEqual(['http://x:2379']);
    expect(c.secondarySnapstoreConfig.storeConfig.container).toBe('c2');
    // Not given on the command line: the file's value stays.
    expect(c.snapshotterConfig.garbageCollectionPolicy).toBe('LimitBased');
  });

  it('validates the merged result, naming flag and file key', () => {
    expect(fileProblems('snapshotterConfig:\n  garbageCollectionPolicy: LimitBased\n  maxBackups: 0\n')).toEqual([
      '--max-backups (config file: snapshotterConfig.maxBackups) must be greater than 0 with the LimitBased garbage collection policy',
    ]);
    expect(fileProblems('etcdConnectionConfig:\n  maxCallSendMsgSize: 0\n')).toEqual([
      'etcdConnectionConfig.maxCallSendMsgSize must be greater than 0',
    ]);
  });

  it.each<[string, RegExp]>([
    ['serverConfig:\n  port: "8080"\n', /serverConfig\.port: expected an integer, got string "8080"/],
    ['serverConfig:\n  port: -1\n', /serverConfig\.port: expected an unsigned integer, got -1/],
    ['compressionConfig:\n  enabled: yes\n', /compressionConfig\.enabled: expected true or false, got string "yes"/],
    ['etcdConnectionConfig:\n  endpoints: http://a:2379\n', /etcdConnectionConfig\.endpoints: expected a list of strings/],
    ['etcdConnectionConfig:\n  connectionTimeout: "30"\n', /etcdConnectionConfig\.connectionTimeout: time: missing unit in duration "30"/],
    ['etcdConnectionConfig:\n  connectionTimeout: true\n', /expected a duration such as "30s", got boolean true/],
    ['snapshotterConfig: 5\n', /snapshotterConfig must be a mapping/],
  ])('rejects %j', (text, message) => {
    const list = fileProblems(text);
    expect(
      list.some((p) => message.test(p)),
      JSON.stringify(list),
    ).toBe(true);
  });

  it('matches keys case-insensitively like encoding/json, preferring exact matches', () => {
    const { config: c } = withFile('SNAPSHOTTERCONFIG:\n  MAXBACKUPS: 4\nrestorationConfig:\n  maxTxnOps: 7\n');
    expect(c.snapshotterConfig.maxBackups).toBe(4);
    expect(c.restorationConfig.maxTxnOps).toBe(7);
  });

  it('leaves values alone for null and for empty sections and documents', () => {
    expect(withFile('snapshotterConfig:\n  maxBackups: null\n').config.snapshotterConfig.maxBackups).toBe(7);
    expect(withFile('snapshotterConfig:\n').config.snapshotterConfig.maxBackups).toBe(7);
    expect(withFile('').config.serverConfig.port).toBe(8080);
  });

  it('reports YAML syntax errors and unreadable files with the path', async () => {
    expect(() => parseConfigText('a: [1,\n', 'bad.yaml', yamlLibrary)).toThrow(/--config-file bad\.yaml: invalid YAML/);
    await expect(readConfigFile('/nonexistent/cfg.yaml')).rejects.toThrow('--config-file: cannot read /nonexistent/cfg.yaml: ENOENT');
    const dir = mkdtempSync(join(tmpdir(), 'etcdbr-cfg-'));
    writeFileSync(join(dir, 'c.yaml'), 'serverConfig:\n  port: 1234\n');
    expect(await readConfigFile(join(dir, 'c.yaml'))).toEqual({ serverConfig: { port: 1234 } });
  });

  it('rejects a document that is not a mapping', () => {
    expect(() => withFile('- a\n- b\n')).toThrow(/the document must be a mapping of sections/);
  });
});
