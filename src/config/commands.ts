/**
 * Which flag groups each subcommand uses (upstream `cmd/*.go`), and where each group's values sit
 * in the command's config object and in the server config file.
 */
import { exponentialBackoffGroup } from './groups/backoff.js';
import { compactorGroup } from './groups/compactor.js';
import { compressionGroup } from './groups/compression.js';
import { encryptionGroup } from './groups/encryption.js';
import { copierGroup } from './groups/copier.js';
import { etcdConnectionGroup } from './groups/etcd-connection.js';
import { healthGroup } from './groups/health.js';
import { httpServerGroup } from './groups/http-server.js';
import { leaderElectionGroup } from './groups/leader-election.js';
import { memberCleanupGroup } from './groups/member-cleanup.js';
import {
  commonGroup,
  defragScheduleGroup,
  lsOutputGroup,
  restoreTargetGroup,
  serverTopLevelGroup,
  validationModeGroup,
  verifyOptionsGroup,
  verifyScheduleGroup,
  hashDrillAgainstGroup,
  hashDrillScheduleGroup,
  apiAuthGroup,
} from './groups/misc.js';
import { restorationGroup } from './groups/restoration.js';
import { secondarySyncGroup, snapstoreGroup } from './groups/snapstore.js';
import { snapshotterGroup } from './groups/snapshotter.js';
import type { AnyGroupDef, GroupDef, Issues } from './schema.js';
import type { CommandConfigs, CommandName, CopyCommandConfig, ServerConfig, SnapstoreConfig } from './types.js';

/** One use of a group by a command. */
export interface GroupUse {
  group: AnyGroupDef;
  /** Where the group's object sits in the command config; [] = its fields are top-level keys. */
  path: readonly string[];
  /** Where it sits in the config file, when it differs from `path` (upstream's `StoreConfig`). */
  filePath?: readonly string[];
  /** Validate this group only when this holds (upstream checks the secondary store only when sync is on). */
  validateWhen?: (cfg: Record<string, unknown>) => boolean;
}

export interface CommandSpec<N extends CommandName = CommandName> {
  name: N;
  /** One line for the command list. */
  short: string;
  /** The paragraphs at the top of the command's help, wrapped to its width: a `\n` starts a paragraph, nothing else. */
  long: string;
  uses: readonly GroupUse[];
  /** Whether `--config-file` applies (server only). */
  configFile: boolean;
  /** Cross-group completion after flags and file were applied, before validation. */
  complete?(cfg: CommandConfigs[N], notes: Issues): void;
  /** Checks that span groups, after each group validated itself. */
  validate?(cfg: CommandConfigs[N], issues: Issues): void;
}

function use<T extends object>(
  group: GroupDef<T>,
  path: readonly string[] = [],
  filePath?: readonly string[],
  validateWhen?: GroupUse['validateWhen'],
): GroupUse {
  const u: GroupUse = { group: group as unknown as AnyGroupDef, path };
  if (filePath !== undefined) u.filePath = filePath;
  if (validateWhen !== undefined) u.validateWhen = validateWhen;
  return u;
}

const secondarySyncEnabled = (cfg: Record<string, unknown>): boolean =>
  (cfg as unknown as ServerConfig).secondarySnapstoreConfig.backupSyncEnabled;

const common = use(commonGroup);
const primaryStore = use(snapstoreGroup(''), ['snapstoreConfig']);
const encryption = use(encryptionGroup, ['encryptionConfig']);

/**
 * Upstream `SnapstoreConfig.MergeWith(destination)` for the copy source: an empty provider or temp dir
 * takes the destination's; an empty prefix takes the destination's. (Upstream stores the effective
 * `<prefix>/v2`; we keep the user's prefix and add `v2` when building the store, which is equivalent.)
 */
export function mergeSourceWithDestination(source: SnapstoreConfig, destination: SnapstoreConfig): SnapstoreConfig {
  return {
    ...source,
    provider: source.provider === '' ? destination.provider : source.provider,
    prefix: source.prefix === '' ? destination.prefix : source.prefix,
    tempDir: source.tempDir === '' ? destination.tempDir : source.tempDir,
  };
}

export const COMMAND_SPECS: { readonly [N in CommandName]: CommandSpec<N> } = {
  server: {
    name: 'server',
    short: 'start the HTTP server: initialization, snapshots, garbage collection, defragmentation',
    long:
      'Runs as a sidecar next to etcd: serves the initialization and snapshot HTTP API, and while its etcd is the leader ' +
      'takes full and delta snapshots, collects garbage and defragments etcd on schedule.',
    configFile: true,
    uses: [
      common,
      use(serverTopLevelGroup),
      use(etcdConnectionGroup, ['etcdConnectionConfig']),
      use(httpServerGroup, ['serverConfig']),
      use(snapshotterGroup, ['snapshotterConfig']),
      primaryStore,
      encryption,
      use(secondarySyncGroup, ['secondarySnapstoreConfig']),
      use(
        snapstoreGroup('secondary-'),
        ['secondarySnapstoreConfig', 'storeConfig'],
        ['secondarySnapstoreConfig', 'StoreConfig'],
        secondarySyncEnabled,
      ),
      use(compressionGroup, ['compressionConfig']),
      use(restorationGroup, ['restorationConfig']),
      use(healthGroup, ['healthConfig']),
      use(leaderElectionGroup, ['leaderElectionConfig']),
      use(exponentialBackoffGroup, ['exponentialBackoffConfig']),
      use(memberCleanupGroup),
      use(verifyScheduleGroup),
      use(hashDrillScheduleGroup),
      use(apiAuthGroup),
    ],
    validate(cfg: ServerConfig, issues) {
      const tls = cfg.serverConfig.serverCert !== '' && cfg.serverConfig.serverKey !== '';
      if (cfg.apiClientCaFile !== '' && !tls) issues.add('--api-client-ca-file needs TLS: give --server-cert and --server-key');
      const secondary = cfg.secondarySnapstoreConfig;
      if (secondary.backupSyncEnabled && secondary.storeConfig.provider === '') {
        issues.add('--secondary-backup-sync-enabled needs a secondary store: give --secondary-storage-provider');
      }
    },
  },
  snapshot: {
    name: 'snapshot',
    short: 'take full and delta snapshots of etcd periodically (no HTTP server, no leader election)',
    long: 'Takes an immediate full snapshot, then full snapshots on schedule and delta snapshots in between.',
    configFile: false,
    uses: [
      common,
      use(etcdConnectionGroup, ['etcdConnectionConfig']),
      primaryStore,
      encryption,
      use(snapshotterGroup, ['snapshotterConfig']),
      use(compressionGroup, ['compressionConfig']),
      use(exponentialBackoffGroup, ['exponentialBackoffConfig']),
      use(defragScheduleGroup),
    ],
  },
  restore: {
    name: 'restore',
    short: 'restore an etcd data directory from the latest snapshots in the store',
    long: 'Restores the newest full snapshot and the delta snapshots after it into --data-dir (which must not exist or be empty).',
    configFile: false,
    uses: [common, use(restorationGroup, ['restorationConfig']), primaryStore, encryption, use(restoreTargetGroup)],
  },
  initialize: {
    name: 'initialize',
    short: 'validate the etcd data directory and restore it from the store when needed',
    long: 'Validates the data directory (--validation-mode full or sanity) and restores it from the latest snapshots if it is missing or corrupt.',
    configFile: false,
    uses: [
      common,
      use(validationModeGroup),
      use(restorationGroup, ['restorationConfig']),
      primaryStore,
      encryption,
      use(etcdConnectionGroup, ['etcdConnectionConfig']),
    ],
  },
  compact: {
    name: 'compact',
    short: 'fold the latest full and delta snapshots into one new full snapshot',
    // docs/how-it-works.md "How `compact` works": offline since the offline writer; the etcd path is the fallback
    // (or --delta-replay=online).
    long:
      'Folds the newest full snapshot and the delta snapshots after it into one new full snapshot compacted at the last ' +
      'revision, written from the snapshot files without an etcd process (scratch space in ' +
      '--restoration-temp-snapshots-dir), and stores it. Only a chain the offline writer cannot write (or any chain ' +
      'with --delta-replay=online) is compacted through a local etcd in <--data-dir>.part, which is then defragmented ' +
      '(--defragment) and stored. Keys keep their lease, as in a restore: a lease whose TTL no snapshot holds gets ' +
      '--restored-lease-ttl.',
    configFile: false,
    uses: [common, use(restorationGroup, ['restorationConfig']), primaryStore, encryption, use(compactorGroup, ['compactorConfig'])],
  },
  copy: {
    name: 'copy',
    short: 'copy backups from a source store to the destination store',
    long:
      'Copies full and delta snapshots from the source store (--source-* flags, SOURCE_* credentials) to the destination ' +
      'store (the usual store flags), skipping snapshots the destination already has.',
    configFile: false,
    uses: [common, use(copierGroup, ['copierConfig']), use(snapstoreGroup('source-'), ['sourceSnapstoreConfig']), primaryStore, encryption],
    complete(cfg: CopyCommandConfig) {
      cfg.sourceSnapstoreConfig = mergeSourceWithDestination(cfg.sourceSnapstoreConfig, cfg.snapstoreConfig);
    },
    validate(cfg: CopyCommandConfig, issues) {
      // Upstream would fall back to a Local store under $HOME; copying needs a store named explicitly.
      if (cfg.snapstoreConfig.provider === '') issues.add('--storage-provider is required: copy needs a destination store');
    },
  },
  ls: {
    name: 'ls',
    short: 'list the snapshots in a store (not in etcd-backup-restore)',
    long: 'Lists every snapshot in the store (v1 and v2 layouts): kind, revisions, creation time, size, compression, final, chunk and key.',
    configFile: false,
    uses: [common, primaryStore, encryption, use(lsOutputGroup)],
  },
  verify: {
    name: 'verify',
    short: 'check that the backups in a store restore, without restoring them (not in etcd-backup-restore)',
    long:
      'Downloads the newest chain (--all: every chain) and checks each object as a restore would use it: sizes, decompression, ' +
      "sha256 trailers, the full snapshot's bbolt structure and revision, every delta event and the revision continuity.\n" +
      'Exit code 0: the newest chain restores; 3: a backup is broken (the first broken object is named).\n' +
      "With --against-endpoints it drills instead: etcd's HashKV of each member at the newest revision both have is compared with " +
      'the one computed from the newest chain. Exit code 0: equal; 1: they differ (the first differing revisions and the objects ' +
      'holding them are named), or they could not be compared (the reason is named).',
    configFile: false,
    uses: [common, primaryStore, encryption, use(verifyOptionsGroup), use(hashDrillAgainstGroup)],
  },
};

export const COMMAND_NAMES = Object.keys(COMMAND_SPECS) as CommandName[];

export function isCommandName(name: string): name is CommandName {
  return Object.hasOwn(COMMAND_SPECS, name);
}
