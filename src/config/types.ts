/**
 * Typed configuration of every subcommand. Field names are upstream's json tags (the keys of the server
 * config file, upstream `pkg/server/types.go`), so the same objects serve flags and `--config-file`.
 *
 * Units: every `DurationMs` is milliseconds (parsed from and printed in Go syntax such as `30s`);
 * byte sizes are bytes.
 */

export type DurationMs = number;

/** `--log-level`: logrus levels, 0 panic, 1 fatal, 2 error, 3 warn, 4 info, 5 debug, 6 trace. */
export type LogrusLevel = number;

export type GarbageCollectionPolicy = 'Exponential' | 'LimitBased';
/** `zstd` is ours; the Go implementation cannot read `.zst` snapshots. */
export type CompressionPolicy = 'gzip' | 'lzw' | 'zlib' | 'zstd';
export type AutoCompactionMode = 'periodic' | 'revision';
export type ValidationMode = 'full' | 'sanity';
export type OutputFormat = 'text' | 'json';

/** `pkg/types/etcdconnection.go`. */
export interface EtcdConnectionConfig {
  endpoints: string[];
  serviceEndpoints: string[];
  username: string;
  password: string;
  connectionTimeout: DurationMs;
  snapshotTimeout: DurationMs;
  defragTimeout: DurationMs;
  insecureTransport: boolean;
  /** Defaults to true from flags (docs/design-decisions.md, upstream quirks), false from the config file (struct default). */
  insecureSkipVerify: boolean;
  certFile: string;
  keyFile: string;
  caFile: string;
  /** Config file only (no flag upstream). */
  maxCallSendMsgSize: number;
}

/** `pkg/server/init.go`. TLS is on only when both cert and key are set. */
export interface HttpServerConfig {
  port: number;
  /** Ours: the address to listen on; '' = every interface (upstream's `:<port>`). */
  address: string;
  enableProfiling: boolean;
  /** File key `server-cert`. */
  serverCert: string;
  /** File key `server-key`. */
  serverKey: string;
}

/** `pkg/types/snapshotter.go`. */
export interface SnapshotterConfig {
  /** Standard 5-field cron expression (robfig ParseStandard). */
  schedule: string;
  /** Below 1 s disables delta snapshots. */
  deltaSnapshotPeriod: DurationMs;
  /** Bytes; 0 is reset to 10 MiB during completion. */
  deltaSnapshotMemoryLimit: number;
  /** At most 1 s means garbage collection does not run. */
  garbageCollectionPeriod: DurationMs;
  garbageCollectionPolicy: GarbageCollectionPolicy;
  maxBackups: number;
  deltaSnapshotRetentionPeriod: DurationMs;
}

/**
 * The snapstore flag group (`pkg/types/snapstore.go`), registered with prefixes "", `source-` and
 * `secondary-`. This is what the user asked for; `src/config/store.ts` turns it, with the environment,
 * into the snapstore package's resolved `StoreConfig`.
 */
export interface SnapstoreConfig {
  /** `Local`, `S3`, `ABS`, `GCS`, or '' for no store. */
  provider: string;
  /** '' falls back to `<P>STORAGE_CONTAINER` from the environment. */
  container: string;
  endpointOverride: string;
  /** The user's `--store-prefix`; the effective prefix is `<prefix>/v2`. */
  prefix: string;
  tempDir: string;
  maxParallelChunkUploads: number;
  minChunkSize: number;
}

export interface SecondarySnapstoreConfig {
  /** File key `StoreConfig` (capitalised upstream: no json tag). */
  storeConfig: SnapstoreConfig;
  backupSyncEnabled: boolean;
  syncPeriod: DurationMs;
}

/** `--encryption-*` (ours): paths as given; '' / [] fall back to the environment (src/config/store.ts). */
export interface EncryptionConfig {
  recipientsFile: string;
  identityFiles: string[];
}

export interface CompressionConfig {
  enabled: boolean;
  policy: CompressionPolicy;
}

/** `pkg/types/restorer.go`. */
export interface RestorationConfig {
  initialCluster: string;
  initialClusterToken: string;
  /** `path.Clean`ed. */
  dataDir: string;
  /** `--restoration-temp-snapshots-dir`, `path.Clean`ed. */
  tempDir: string;
  name: string;
  autoCompactionRetention: string;
  autoCompactionMode: AutoCompactionMode;
  initialAdvertisePeerURLs: string[];
  /** File key `MaxTxnOps`. */
  maxTxnOps: number;
  /** File key `MaxRequestBytes`. */
  maxRequestBytes: number;
  maxCallSendMsgSize: number;
  embeddedEtcdQuotaBytes: number;
  maxFetchers: number;
  skipHashCheck: boolean;
  /** `--delta-replay` (ours): auto, offline or online. */
  deltaReplay: 'auto' | 'offline' | 'online';
  /** `--restored-lease-ttl` (ours): the TTL a restore or compact gives a lease whose TTL no snapshot holds. */
  restoredLeaseTtl: DurationMs;
}

/** `pkg/types/health.go`. */
export interface HealthConfig {
  fullSnapshotLeaseName: string;
  deltaSnapshotLeaseName: string;
  heartbeatDuration: DurationMs;
  snapshotLeaseRenewalEnabled: boolean;
  memberLeaseRenewalEnabled: boolean;
}

/** `pkg/types/leaderelection.go`. */
export interface LeaderElectionConfig {
  reelectionPeriod: DurationMs;
  etcdConnectionTimeout: DurationMs;
}

/** `pkg/types/exponentialbackoff.go`: the snapshotter's restart backoff. */
export interface ExponentialBackoffConfig {
  multiplier: number;
  attemptLimit: number;
  thresholdTime: DurationMs;
}

/** `pkg/types/compactor.go` (only `compact`). */
export interface CompactorConfig {
  defragment: boolean;
  snapshotTimeout: DurationMs;
  defragTimeout: DurationMs;
  fullSnapshotLeaseName: string;
  deltaSnapshotLeaseName: string;
  snapshotLeaseRenewalEnabled: boolean;
  metricsScrapeWaitDuration: DurationMs;
}

/** `cmd/options.go` copierOptions (only `copy`). */
export interface CopierConfig {
  /** -1 = all. */
  maxBackupsToCopy: number;
  /** Days; -1 = no filter. */
  maxBackupAge: number;
  maxParallelCopyOperations: number;
  waitForFinalSnapshot: boolean;
  /** 0 = no timeout. */
  waitForFinalSnapshotTimeout: DurationMs;
}

/** Fields every subcommand has. */
export interface CommonConfig {
  logLevel: LogrusLevel;
  /** `--log-format` (ours): json (default, as upstream's logrus JSON) or text for people. */
  logFormat: 'json' | 'text';
}

/** `etcdbrctl server`; the layout of the server config file. */
export interface ServerConfig extends CommonConfig {
  /** `--config-file`; '' when none. */
  configFile: string;
  etcdConnectionConfig: EtcdConnectionConfig;
  serverConfig: HttpServerConfig;
  snapshotterConfig: SnapshotterConfig;
  snapstoreConfig: SnapstoreConfig;
  encryptionConfig: EncryptionConfig;
  secondarySnapstoreConfig: SecondarySnapstoreConfig;
  compressionConfig: CompressionConfig;
  restorationConfig: RestorationConfig;
  healthConfig: HealthConfig;
  leaderElectionConfig: LeaderElectionConfig;
  exponentialBackoffConfig: ExponentialBackoffConfig;
  defragmentationSchedule: string;
  useEtcdWrapper: boolean;
  /** `--enable-member-cleanup` (ours): superfluous member removal on the leader. */
  enableMemberCleanup: boolean;
  /** `--verify-schedule` (ours): cron schedule of the leader's backup verification; '' = off. */
  verifySchedule: string;
  /**
   * `--hash-drill-schedule` (ours): when the leader proves with etcd's HashKV that the store gives back what etcd
   * holds: `after-full` (after each full snapshot, at most hourly), a cron spec, or '' (never).
   */
  hashDrillSchedule: string;
  /** `--api-client-ca-file` (ours): require client certificates signed by this CA (needs server TLS). */
  apiClientCaFile: string;
  /** `--api-token-file` (ours): require this bearer token. */
  apiTokenFile: string;
  /** `--api-open-probes` (ours): `/healthz` and `/metrics` without credentials. */
  apiOpenProbes: boolean;
}

export interface SnapshotCommandConfig extends CommonConfig {
  etcdConnectionConfig: EtcdConnectionConfig;
  snapstoreConfig: SnapstoreConfig;
  encryptionConfig: EncryptionConfig;
  snapshotterConfig: SnapshotterConfig;
  compressionConfig: CompressionConfig;
  exponentialBackoffConfig: ExponentialBackoffConfig;
  defragmentationSchedule: string;
}

/** Ours (not upstream): point-in-time restore and a plan-only run. */
export interface RestoreTargetConfig {
  /** Print the restore plan and touch nothing. */
  dryRun: boolean;
  /** Restore up to this revision (0 = everything). */
  toRevision: number;
  /** Use only snapshots created at or before this RFC 3339 time ('' = no limit). */
  toTime: string;
  /** Restore from this full snapshot (its name) and the deltas after it, not from the newest ('' = the newest). */
  baseSnapshot: string;
  output: OutputFormat;
}

export interface RestoreCommandConfig extends CommonConfig, RestoreTargetConfig {
  restorationConfig: RestorationConfig;
  snapstoreConfig: SnapstoreConfig;
  encryptionConfig: EncryptionConfig;
}

export interface InitializeCommandConfig extends CommonConfig {
  validationMode: ValidationMode;
  restorationConfig: RestorationConfig;
  snapstoreConfig: SnapstoreConfig;
  encryptionConfig: EncryptionConfig;
  etcdConnectionConfig: EtcdConnectionConfig;
}

export interface CompactCommandConfig extends CommonConfig {
  restorationConfig: RestorationConfig;
  snapstoreConfig: SnapstoreConfig;
  encryptionConfig: EncryptionConfig;
  compactorConfig: CompactorConfig;
}

export interface CopyCommandConfig extends CommonConfig {
  copierConfig: CopierConfig;
  /**
   * The copy source after upstream's `MergeWith(destination)`: provider, prefix and temp dir default to
   * the destination's when empty.
   */
  sourceSnapstoreConfig: SnapstoreConfig;
  /** The destination. */
  snapstoreConfig: SnapstoreConfig;
  /** Identities read the source, recipients encrypt what is written to the destination. */
  encryptionConfig: EncryptionConfig;
}

/** `etcdbrctl ls` (ours). */
export interface LsCommandConfig extends CommonConfig {
  snapstoreConfig: SnapstoreConfig;
  encryptionConfig: EncryptionConfig;
  output: OutputFormat;
  /** Include snapshots marked excluded (`x-etcd-snapshot-exclude`). */
  all: boolean;
}

/** `etcdbrctl verify` (ours): scrub the backups without restoring them. */
export interface VerifyCommandConfig extends CommonConfig {
  snapstoreConfig: SnapstoreConfig;
  encryptionConfig: EncryptionConfig;
  output: OutputFormat;
  /** Every chain in the store, not only the newest. */
  all: boolean;
  maxFetchers: number;
  /** `--against-endpoints`: compare the newest chain's HashKV with these etcd members' (the hash drill). */
  againstEndpoints: string[];
  /** TLS and credentials for `--against-endpoints` (as the etcd-connection flags of `server`). */
  againstCaFile: string;
  againstCertFile: string;
  againstKeyFile: string;
  /** `--insecure-skip-tls-verify`: accept the members' certificates unchecked (a test cluster's self-signed ones). */
  againstInsecureSkipVerify: boolean;
  againstUsername: string;
  againstPassword: string;
}

export interface CommandConfigs {
  server: ServerConfig;
  snapshot: SnapshotCommandConfig;
  restore: RestoreCommandConfig;
  initialize: InitializeCommandConfig;
  compact: CompactCommandConfig;
  copy: CopyCommandConfig;
  ls: LsCommandConfig;
  verify: VerifyCommandConfig;
}

export type CommandName = keyof CommandConfigs;

/** Which of a command's stores: the primary (`--store-*`), the copy source (`--source-*`), the secondary. */
export type StoreRole = 'primary' | 'source' | 'secondary';
