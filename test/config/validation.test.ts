import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { commandFlagSet } from '../../src/cli/help.js';
import { buildCommandConfig } from '../../src/config/build.js';
import { COMMAND_SPECS } from '../../src/config/commands.js';
import { cronScheduleError } from '../../src/config/cron.js';
import { ConfigError } from '../../src/config/schema.js';
import type { CommandName } from '../../src/config/types.js';

function build<N extends CommandName>(name: N, ...argv: string[]) {
  return buildCommandConfig(name, { flags: commandFlagSet(COMMAND_SPECS[name]).parse(argv).changed });
}

function problems(name: CommandName, ...argv: string[]): readonly string[] {
  try {
    build(name, ...argv);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe('validation (upstream rules)', () => {
  it.each<[CommandName, string[], RegExp]>([
    ['server', ['--etcd-connection-timeout=0s'], /^--etcd-connection-timeout must be greater than 0$/],
    [
      'server',
      ['--etcd-snapshot-timeout=10s', '--etcd-connection-timeout=30s'],
      /--etcd-snapshot-timeout must not be shorter than --etcd-connection-timeout/,
    ],
    ['server', ['--etcd-snapshot-timeout=-1s'], /--etcd-snapshot-timeout must be greater than 0/],
    ['server', ['--etcd-defrag-timeout=0s'], /--etcd-defrag-timeout must be greater than 0/],
    ['restore', ['--restored-lease-ttl=0s'], /^--restored-lease-ttl must be whole seconds from 1s to 9000000000s/],
    ['server', ['--restored-lease-ttl=1500ms'], /^--restored-lease-ttl must be whole seconds from 1s to 9000000000s/],
    ['initialize', ['--restored-lease-ttl=2500001h'], /^--restored-lease-ttl must be whole seconds/],
    ['server', ['--min-chunk-size=5242879'], /--min-chunk-size must be at least 5242880 bytes/],
    ['server', ['--max-parallel-chunk-uploads=0'], /--max-parallel-chunk-uploads must be greater than 0/],
    ['server', ['--garbage-collection-policy=Foo'], /--garbage-collection-policy: unknown policy "Foo"; use Exponential or LimitBased/],
    ['server', ['--garbage-collection-policy=LimitBased', '--max-backups=0'], /--max-backups must be greater than 0 with the LimitBased/],
    ['server', ['--reelection-period=1s'], /--reelection-period must be greater than 1s/],
    ['server', ['--etcd-connection-timeout-leader-election=500ms'], /--etcd-connection-timeout-leader-election must be greater than 1s/],
    ['server', ['--compression-policy=bzip2'], /--compression-policy: unknown policy "bzip2"; use gzip, lzw, zlib, zstd/],
    ['server', ['--schedule=* * * *'], /--schedule: invalid schedule "\* \* \* \*": expected exactly 5 fields, found 4/],
    ['server', ['--schedule=0 0 * * 7'], /end of range \(7\) above maximum \(6\)/],
    ['server', ['--schedule=0 0 L * *'], /failed to parse int from L/],
    ['server', ['--defragmentation-schedule=0 0 */0 * *'], /--defragmentation-schedule: .*step of range should be a positive number/],
    [
      'server',
      ['--storage-provider=FAILED'],
      /--storage-provider: storage provider "FAILED" is supported by etcd-backup-restore but not by this implementation; supported providers: Local, S3, ABS, GCS, Swift, OSS, ECS, OCS/,
    ],
    ['server', ['--storage-provider=s3'], /unknown storage provider "s3"; supported providers: Local, S3, ABS, GCS/],
    ['server', ['--store-endpoint-override=localhost:9000'], /--store-endpoint-override: "localhost:9000" must use http or https/],
    ['server', ['--store-endpoint-override=not a url'], /is not a URL/],
    ['server', ['--k8s-heartbeat-duration=0s'], /--k8s-heartbeat-duration must be greater than 0/],
    ['server', ['--enable-snapshot-lease-renewal', '--full-snapshot-lease-name='], /--full-snapshot-lease-name must not be empty/],
    ['server', ['--auto-compaction-mode=hourly'], /--auto-compaction-mode: unknown mode "hourly"; use periodic or revision/],
    [
      'server',
      ['--initial-cluster=default=localhost:2380'],
      /--initial-cluster: URL scheme must be http, https, unix, or unixs: localhost:2380/,
    ],
    ['server', ['--initial-cluster=default=http://localhost'], /does not have the form "host:port"/],
    ['server', ['--initial-advertise-peer-urls=http://h:2380/x'], /--initial-advertise-peer-urls: URL must not contain a path/],
    ['server', ['--max-fetchers=0'], /--max-fetchers must be greater than 0/],
    ['server', ['--embedded-etcd-quota-bytes=0'], /--embedded-etcd-quota-bytes must be greater than 0/],
    ['server', ['--max-call-send-message-size=0'], /--max-call-send-message-size must be greater than 0/],
    ['server', ['--server-port=70000'], /--server-port must be a TCP port/],
    ['server', ['--server-address=pod-ip'], /--server-address must be an IP address, got "pod-ip"/],
    [
      'server',
      ['--server-cert=/nonexistent/cert', '--server-key=/nonexistent/key'],
      /--server-cert: file \/nonexistent\/cert does not exist/,
    ],
    ['server', ['--secondary-backup-sync-enabled'], /needs a secondary store: give --secondary-storage-provider/],
    [
      'server',
      ['--secondary-backup-sync-enabled', '--secondary-storage-provider=S3', '--secondary-min-chunk-size=1'],
      /--secondary-min-chunk-size must be at least/,
    ],
    ['initialize', ['--validation-mode=quick'], /--validation-mode: unknown mode "quick"; use full or sanity/],
    ['compact', ['--etcd-snapshot-timeout=0s'], /--etcd-snapshot-timeout must be greater than 0/],
    ['copy', ['--storage-provider=Local', '--max-backups-to-copy=-2'], /--max-backups-to-copy must be -1 \(all\) or greater/],
    ['copy', ['--storage-provider=Local', '--max-backup-age=-2'], /--max-backup-age must be -1/],
    ['copy', ['--storage-provider=Local', '--max-parallel-copy-operations=0'], /--max-parallel-copy-operations must be greater than 0/],
    [
      'copy',
      ['--storage-provider=Local', '--wait-for-final-snapshot-timeout=-1s'],
      /--wait-for-final-snapshot-timeout must not be negative/,
    ],
    ['copy', ['--storage-provider=Local', '--source-min-chunk-size=1'], /--source-min-chunk-size must be at least/],
    ['copy', [], /--storage-provider is required: copy needs a destination store/],
    ['ls', ['--output=yaml'], /--output: unknown format "yaml"; use text or json/],
  ])('%s %j', (name, argv, message) => {
    const list = problems(name, ...argv);
    expect(
      list.some((p) => message.test(p)),
      `problems: ${JSON.stringify(list)}`,
    ).toBe(true);
  });

  it('accepts the defaults of every command that needs no store', () => {
    for (const name of ['server', 'snapshot', 'restore', 'initialize', 'compact', 'ls'] as const) {
      expect(problems(name)).toEqual([]);
    }
  });

  it('reports every problem at once', () => {
    const list = problems('server', '--max-fetchers=0', '--reelection-period=1s', '--compression-policy=x');
    expect(list).toHaveLength(3);
  });

  it('ignores an invalid secondary store while sync is off, as upstream', () => {
    expect(problems('server', '--secondary-min-chunk-size=1')).toEqual([]);
  });

  it('checks the compression policy only when compression is on', () => {
    expect(problems('server', '--compress-snapshots=false', '--compression-policy=x')).toEqual([]);
  });

  it('accepts zstd (ours) and lzw', () => {
    expect(build('server', '--compression-policy=zstd').config.compressionConfig.policy).toBe('zstd');
    expect(build('server', '--compression-policy=lzw').config.compressionConfig.policy).toBe('lzw');
  });

  it('accepts server TLS files that exist', () => {
    const dir = mkdtempSync(join(tmpdir(), 'etcdbr-tls-'));
    writeFileSync(join(dir, 'c'), 'x');
    writeFileSync(join(dir, 'k'), 'x');
    expect(problems('server', `--server-cert=${join(dir, 'c')}`, `--server-key=${join(dir, 'k')}`)).toEqual([]);
    // Only one of them set: TLS is off and nothing is checked.
    expect(problems('server', '--server-cert=/nonexistent')).toEqual([]);
  });
});

describe('completion', () => {
  it('resets a zero delta snapshot memory limit to 10 MiB and says so', () => {
    const r = build('server', '--delta-snapshot-memory-limit=0');
    expect(r.config.snapshotterConfig.deltaSnapshotMemoryLimit).toBe(10 * 1024 * 1024);
    expect(r.notes.join('\n')).toMatch(/memory limit/);
  });

  it('cleans data and temp dirs like Go path.Clean', () => {
    const c = build('restore', '--data-dir=./a/../b/', '--restoration-temp-snapshots-dir=x//y/.').config.restorationConfig;
    expect(c.dataDir).toBe('b');
    expect(c.tempDir).toBe('x/y');
  });

  it('merges the copy source with the destination (upstream MergeWith)', () => {
    const c = build(
      'copy',
      '--storage-provider=S3',
      '--store-prefix=dst',
      '--snapstore-temp-directory=/var/tmp',
      '--source-snapstore-temp-directory=',
    ).config;
    expect(c.sourceSnapstoreConfig.provider).toBe('S3');
    expect(c.sourceSnapstoreConfig.prefix).toBe('dst');
    expect(c.sourceSnapstoreConfig.tempDir).toBe('/var/tmp');
    const own = build(
      'copy',
      '--storage-provider=S3',
      '--source-storage-provider=GCS',
      '--source-store-prefix=src',
      '--store-prefix=dst',
    ).config;
    expect(own.sourceSnapstoreConfig.provider).toBe('GCS');
    expect(own.sourceSnapstoreConfig.prefix).toBe('src');
  });

  it('applies flags onto nested config objects', () => {
    const c = build('server', '--secondary-store-prefix=p', '--endpoints=a,b', '-e', 'c', '--max-txn-ops=5').config;
    expect(c.secondarySnapstoreConfig.storeConfig.prefix).toBe('p');
    expect(c.etcdConnectionConfig.endpoints).toEqual(['a', 'b', 'c']);
    expect(c.restorationConfig.maxTxnOps).toBe(5);
  });
});

describe('cron schedules (robfig ParseStandard)', () => {
  it.each([
    '0 */1 * * *',
    '0 0 */3 * *',
    '*/5 * * * *',
    '0 0 * * MON-FRI',
    '15,45 1-5/2 ? JAN,jul sun',
    '@hourly',
    '@every 1h30m',
    'TZ=Europe/Berlin 0 3 * * *',
    'CRON_TZ=UTC @daily',
    '  0   1 * * *  ',
  ])('accepts %j', (spec) => {
    expect(cronScheduleError(spec)).toBeUndefined();
  });

  it.each<[string, RegExp]>([
    ['', /empty spec string/],
    ['0 0 * * * *', /expected exactly 5 fields, found 6/],
    ['60 * * * *', /end of range \(60\) above maximum \(59\)/],
    ['* 24 * * *', /above maximum \(23\)/],
    ['* * 0 * *', /below minimum \(1\)/],
    ['* * * 13 *', /above maximum \(12\)/],
    ['5-1 * * * *', /beginning of range \(5\) beyond end of range \(1\)/],
    ['1-2-3 * * * *', /too many hyphens/],
    ['*/2/3 * * * *', /too many slashes/],
    ['x * * * *', /failed to parse int from x/],
    ['-1 * * * *', /failed to parse int from/],
    ['@fortnightly', /unrecognized descriptor/],
    ['@every soon', /failed to parse duration/],
    ['TZ=Nowhere/Land 0 * * * *', /bad location Nowhere\/Land/],
    ['* * * * 1#2', /failed to parse int from 1#2/],
  ])('rejects %j', (spec, message) => {
    expect(cronScheduleError(spec)).toMatch(message);
  });
});
