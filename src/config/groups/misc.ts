import { existsSync } from 'node:fs';
import { cronScheduleError } from '../cron.js';
import { AFTER_FULL } from '../drill-schedule.js';
import { defineGroup } from '../schema.js';
import type {
  RestoreTargetConfig,
  CommonConfig,
  InitializeCommandConfig,
  LsCommandConfig,
  ServerConfig,
  SnapshotCommandConfig,
  VerifyCommandConfig,
} from '../types.js';

/** Every subcommand: `--log-level` (upstream: server only; harmless elsewhere). Not a config-file key. */
export const commonGroup = defineGroup<CommonConfig>({
  title: 'logging',
  fields: {
    logLevel: {
      type: 'uint32',
      flag: 'log-level',
      fileKey: false,
      usage: 'verbosity as a logrus level: 0 panic, 1 fatal, 2 error, 3 warn, 4 info, 5 debug, 6 trace',
    },
    logFormat: {
      type: 'string',
      flag: 'log-format',
      fileKey: false,
      usage: 'log line format: json (for log collectors) or text (for people at a terminal)',
    },
  },
  defaults: () => ({ logLevel: 4, logFormat: 'json' as const }),
  validate(c, issues, flag) {
    if (c.logFormat !== 'json' && c.logFormat !== 'text')
      issues.add(`${flag('logFormat')}: unknown format ${JSON.stringify(c.logFormat)}; use json or text`);
  },
});

const DEFRAG_SCHEDULE_USAGE = 'cron schedule of etcd defragmentation';

/** Top-level server options that are neither a group nor a section in the config file. */
export const serverTopLevelGroup = defineGroup<Pick<ServerConfig, 'configFile' | 'defragmentationSchedule' | 'useEtcdWrapper'>>({
  title: 'server',
  fields: {
    configFile: {
      type: 'string',
      flag: 'config-file',
      fileKey: false,
      usage: 'YAML configuration file; flags given on the command line override its values',
    },
    defragmentationSchedule: { type: 'string', flag: 'defragmentation-schedule', usage: DEFRAG_SCHEDULE_USAGE },
    useEtcdWrapper: {
      type: 'bool',
      flag: 'use-etcd-wrapper',
      usage: 'etcd runs in etcd-wrapper (restart it through the wrapper when peer URLs change)',
    },
  },
  defaults: () => ({ configFile: '', defragmentationSchedule: '0 0 */3 * *', useEtcdWrapper: false }),
  validate(c, issues, flag) {
    const err = cronScheduleError(c.defragmentationSchedule);
    if (err !== undefined)
      issues.add(`${flag('defragmentationSchedule')}: invalid schedule ${JSON.stringify(c.defragmentationSchedule)}: ${err}`);
  },
});

export const defragScheduleGroup = defineGroup<Pick<SnapshotCommandConfig, 'defragmentationSchedule'>>({
  title: 'defragmentation',
  fields: { defragmentationSchedule: { type: 'string', flag: 'defragmentation-schedule', usage: DEFRAG_SCHEDULE_USAGE } },
  defaults: () => ({ defragmentationSchedule: '0 0 */3 * *' }),
  validate(c, issues, flag) {
    const err = cronScheduleError(c.defragmentationSchedule);
    if (err !== undefined)
      issues.add(`${flag('defragmentationSchedule')}: invalid schedule ${JSON.stringify(c.defragmentationSchedule)}: ${err}`);
  },
});

export const validationModeGroup = defineGroup<Pick<InitializeCommandConfig, 'validationMode'>>({
  title: 'validation',
  fields: { validationMode: { type: 'string', flag: 'validation-mode', usage: 'data directory validation mode: full or sanity' } },
  defaults: () => ({ validationMode: 'full' }),
  validate(c, issues, flag) {
    if (c.validationMode !== 'full' && c.validationMode !== 'sanity') {
      issues.add(`${flag('validationMode')}: unknown mode ${JSON.stringify(c.validationMode)}; use full or sanity`);
    }
  },
});

export const lsOutputGroup = defineGroup<Pick<LsCommandConfig, 'output' | 'all'>>({
  title: 'output',
  fields: {
    output: { type: 'string', flag: 'output', shorthand: 'o', usage: 'output format: text or json' },
    all: { type: 'bool', flag: 'all', usage: 'also list snapshots marked excluded (x-etcd-snapshot-exclude)' },
  },
  defaults: () => ({ output: 'text', all: false }),
  validate(c, issues, flag) {
    if (c.output !== 'text' && c.output !== 'json')
      issues.add(`${flag('output')}: unknown format ${JSON.stringify(c.output)}; use text or json`);
  },
});

/** `restore` extras (ours): `--dry-run`, `--to-revision`, `--to-time`, `--base-snapshot`, `-o`. */
export const restoreTargetGroup = defineGroup<RestoreTargetConfig>({
  title: 'restore target (not in etcd-backup-restore)',
  fields: {
    dryRun: {
      type: 'bool',
      flag: 'dry-run',
      fileKey: false,
      usage: 'print the restore plan (snapshots, revisions, sizes) and change nothing',
    },
    toRevision: { type: 'int64', flag: 'to-revision', fileKey: false, usage: 'restore up to and including this revision (0: everything)' },
    toTime: {
      type: 'string',
      flag: 'to-time',
      fileKey: false,
      usage: 'use only snapshots created at or before this RFC 3339 time, e.g. 2026-11-21T10:00:00Z',
    },
    baseSnapshot: {
      type: 'string',
      flag: 'base-snapshot',
      fileKey: false,
      usage:
        'restore from this full snapshot (its name, as etcdbrctl ls or verify print it) and the deltas after it up to the next full, instead of the newest full: to go around a broken one',
    },
    output: { type: 'string', flag: 'output', shorthand: 'o', fileKey: false, usage: 'output format of --dry-run: text or json' },
  },
  defaults: () => ({ dryRun: false, toRevision: 0, toTime: '', baseSnapshot: '', output: 'text' }),
  validate(c, issues, flag) {
    if (c.toRevision < 0) issues.add(`${flag('toRevision')}: must be >= 0, got ${c.toRevision}`);
    if (c.toTime !== '' && Number.isNaN(Date.parse(c.toTime))) {
      issues.add(`${flag('toTime')}: ${JSON.stringify(c.toTime)} is not an RFC 3339 time such as 2026-11-21T10:00:00Z`);
    }
    if (c.output !== 'text' && c.output !== 'json')
      issues.add(`${flag('output')}: unknown format ${JSON.stringify(c.output)}; use text or json`);
  },
});

/** `verify` options (ours). */
export const verifyOptionsGroup = defineGroup<Pick<VerifyCommandConfig, 'output' | 'all' | 'maxFetchers'>>({
  title: 'verification',
  fields: {
    output: { type: 'string', flag: 'output', shorthand: 'o', usage: 'output format: text or json' },
    all: { type: 'bool', flag: 'all', usage: 'check every chain in the store, not only the newest (the one a restore uses)' },
    maxFetchers: { type: 'uint', flag: 'max-fetchers', usage: 'maximum number of delta snapshots downloaded and checked in parallel' },
  },
  defaults: () => ({ output: 'text', all: false, maxFetchers: 6 }),
  validate(c, issues, flag) {
    if (c.output !== 'text' && c.output !== 'json')
      issues.add(`${flag('output')}: unknown format ${JSON.stringify(c.output)}; use text or json`);
    if (c.maxFetchers <= 0) issues.add(`${flag('maxFetchers')} must be greater than 0`);
  },
});

/** `verify --against-endpoints` (ours): the hash drill on demand. */
export const hashDrillAgainstGroup = defineGroup<
  Pick<
    VerifyCommandConfig,
    | 'againstEndpoints'
    | 'againstCaFile'
    | 'againstCertFile'
    | 'againstKeyFile'
    | 'againstInsecureSkipVerify'
    | 'againstUsername'
    | 'againstPassword'
  >
>({
  title: 'hash drill (not in etcd-backup-restore)',
  fields: {
    againstEndpoints: {
      type: 'stringSlice',
      flag: 'against-endpoints',
      usage:
        "etcd members (client URLs) to compare the newest chain with: etcd's HashKV at the newest revision both have against the one computed from the store; on a difference the first differing revisions are named (exit 1)",
    },
    againstCaFile: {
      type: 'string',
      flag: 'cacert',
      usage: "with --against-endpoints: verify the members' TLS certificates with this CA bundle",
    },
    againstCertFile: { type: 'string', flag: 'cert', usage: 'with --against-endpoints: TLS client certificate file' },
    againstKeyFile: { type: 'string', flag: 'key', usage: 'with --against-endpoints: TLS client key file' },
    againstInsecureSkipVerify: {
      type: 'bool',
      flag: 'insecure-skip-tls-verify',
      usage: "with --against-endpoints: do not verify the members' TLS certificates (self-signed test clusters)",
    },
    againstUsername: {
      type: 'string',
      flag: 'etcd-username',
      usage: 'with --against-endpoints: etcd user (HashKV needs the root role when auth is on)',
    },
    againstPassword: { type: 'string', flag: 'etcd-password', usage: "with --against-endpoints: that user's password" },
  },
  defaults: () => ({
    againstEndpoints: [],
    againstCaFile: '',
    againstCertFile: '',
    againstKeyFile: '',
    againstInsecureSkipVerify: false,
    againstUsername: '',
    againstPassword: '',
  }),
  validate(c, issues, flag) {
    const bad = c.againstEndpoints.filter((e) => !/^https?:\/\/[^/]+\/?$/.test(e));
    if (bad.length > 0) issues.add(`${flag('againstEndpoints')}: not a client URL (http(s)://host:port): ${bad.join(', ')}`);
  },
});

/** `server --hash-drill-schedule` (ours). */
export const hashDrillScheduleGroup = defineGroup<Pick<ServerConfig, 'hashDrillSchedule'>>({
  title: 'hash drill (not in etcd-backup-restore)',
  fields: {
    hashDrillSchedule: {
      type: 'string',
      flag: 'hash-drill-schedule',
      usage:
        "when the leader proves that the store gives back what etcd holds (etcd's HashKV against the one computed from the newest chain; metrics etcdbr_backup_hash_drill_*): 'after-full' (after each full snapshot, at most once an hour), a cron schedule, or empty: never",
    },
  },
  defaults: () => ({ hashDrillSchedule: AFTER_FULL }),
  validate(c, issues, flag) {
    if (c.hashDrillSchedule === '' || c.hashDrillSchedule === AFTER_FULL) return;
    const err = cronScheduleError(c.hashDrillSchedule);
    if (err !== undefined)
      issues.add(
        `${flag('hashDrillSchedule')}: invalid schedule ${JSON.stringify(c.hashDrillSchedule)}: ${err} (or use '${AFTER_FULL}', or empty for never)`,
      );
  },
});

/** `server --verify-schedule` (ours). */
export const verifyScheduleGroup = defineGroup<Pick<ServerConfig, 'verifySchedule'>>({
  title: 'backup verification (not in etcd-backup-restore)',
  fields: {
    verifySchedule: {
      type: 'string',
      flag: 'verify-schedule',
      usage:
        'cron schedule on which the leader verifies the newest backup chain (as etcdbrctl verify; metrics etcdbr_backup_*); empty: never; with --encryption-recipients-file it needs --encryption-identity-file',
    },
  },
  defaults: () => ({ verifySchedule: '' }),
  validate(c, issues, flag) {
    if (c.verifySchedule === '') return;
    const err = cronScheduleError(c.verifySchedule);
    if (err !== undefined) issues.add(`${flag('verifySchedule')}: invalid schedule ${JSON.stringify(c.verifySchedule)}: ${err}`);
  },
});

/** `server` API authentication (ours; off unless a file is given). */
export const apiAuthGroup = defineGroup<Pick<ServerConfig, 'apiClientCaFile' | 'apiTokenFile' | 'apiOpenProbes'>>({
  title: 'API authentication (not in etcd-backup-restore)',
  fields: {
    apiClientCaFile: {
      type: 'string',
      flag: 'api-client-ca-file',
      usage: 'require a client certificate signed by this CA (PEM) on every request (mutual TLS; needs --server-cert and --server-key)',
    },
    apiTokenFile: {
      type: 'string',
      flag: 'api-token-file',
      usage:
        'require "Authorization: Bearer <token>" with the token in this file (re-read when it changes); with a client CA, either is enough',
    },
    apiOpenProbes: {
      type: 'bool',
      flag: 'api-open-probes',
      usage: 'serve /healthz and /metrics without credentials (for probes and scrapers)',
    },
  },
  defaults: () => ({ apiClientCaFile: '', apiTokenFile: '', apiOpenProbes: true }),
  validate(c, issues, flag) {
    if (c.apiClientCaFile !== '' && !existsSync(c.apiClientCaFile))
      issues.add(`${flag('apiClientCaFile')}: file ${c.apiClientCaFile} does not exist`);
    if (c.apiTokenFile !== '' && !existsSync(c.apiTokenFile)) issues.add(`${flag('apiTokenFile')}: file ${c.apiTokenFile} does not exist`);
  },
});
