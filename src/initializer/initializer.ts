import { mkdir, rm } from 'node:fs/promises';
import { Etcd3 } from 'etcd3';
import type { SnapStore } from '@etcdbrctl/snapstore';
import type { Logger } from '../log.js';
import type { EtcdBinaries } from '../etcd/binaries.js';
import { startLocalEtcd } from '../etcd/local-etcd.js';
import type { Metrics } from '../metrics.js';
import { planRestore } from '../restorer/plan.js';
import { executeRestore, type RestoreOptions } from '../restorer/restore.js';
import { currentRevision } from '../snapshotter/full-snapshot.js';
import { DataDirStatus, dataDirStatusName } from './validation-status.js';
import { validateDataDir, type ValidationMode } from './validator.js';

export type InitializationOutcome = 'valid' | 'restored' | 'empty-start';

export interface InitializerOptions {
  dataDir: string;
  podNamespace?: string;
  clusterSize: number;
  /** The store; undefined when no storage provider is configured. */
  store?: () => Promise<SnapStore>;
  /** `--snapstore-temp-directory`: emptied at every initialization (upstream v0.36). */
  snapstoreTempDir?: string;
  binaries: () => Promise<EtcdBinaries>;
  restore: Omit<RestoreOptions, 'binaries' | 'dataDir' | 'logger' | 'replaceExisting' | 'keepEtcdRunning'>;
  logger: Logger;
  metrics: Metrics;
}

/**
 * The single-node initializer (upstream §8.1): validate the data dir; when it is not valid, restore it from
 * the newest backups through `<data-dir>.part`, or, with no backups, remove it so etcd starts empty ("the
 * snapstore is the source of truth"). Throws with a clear message when it must not go on.
 */
export async function initializeDataDir(mode: ValidationMode, opts: InitializerOptions): Promise<InitializationOutcome> {
  const { logger, metrics } = opts;
  metrics.clusterSize.set(opts.clusterSize);
  await tempDirHygiene(opts);

  const validationStart = Date.now();
  let latestRevision: number | undefined;
  const result = await validateDataDir({
    dataDir: opts.dataDir,
    mode,
    ...(opts.podNamespace ? { podNamespace: opts.podNamespace } : {}),
    clusterSize: opts.clusterSize,
    ...(opts.store
      ? {
          latestSnapshotRevision: async () => {
            const plan = planRestore(await (await opts.store!()).list());
            latestRevision = plan.targetRevision;
            return plan.targetRevision;
          },
        }
      : {}),
    catchUp: (dataDir, target) => catchUpFromWal(dataDir, target, opts),
    logger,
  });
  const valid = result.status === DataDirStatus.DataDirectoryValid;
  metrics.validationDurationSeconds.labels(String(valid)).observe((Date.now() - validationStart) / 1000);
  const name = dataDirStatusName(result.status);
  logger.info({ status: name, reason: result.reason, dbRevision: result.dbRevision, latestRevision }, 'data directory validated');

  switch (result.status) {
    case DataDirStatus.DataDirectoryValid:
      return 'valid';
    case DataDirStatus.WrongVolumeMounted:
      throw new Error(`won't initialize ETCD because wrong ETCD volume is mounted: ${result.reason ?? ''}`.trim());
    case DataDirStatus.FailToOpenBoltDBError:
      throw new Error('failed to initialize since another process still holds the file lock');
    case DataDirStatus.DataDirectoryStatusUnknown:
      throw new Error(`cannot tell whether the data directory ${opts.dataDir} is valid: ${result.reason ?? 'unknown error'}`);
    case DataDirStatus.DataDirStatusInvalidInMultiNode:
      throw new Error(
        `the data directory of this member of a multi-node cluster is invalid (${result.reason ?? name}); ` +
          'restoring a multi-node member (remove and re-add as learner) is not implemented yet in this version',
      );
    default:
      break;
  }
  if (opts.clusterSize > 1) {
    throw new Error(
      `data directory invalid (${name}) in a multi-node cluster: re-joining as a learner is not implemented yet in this version`,
    );
  }
  logger.info({ status: name, reason: result.reason }, 'data directory is not valid: restoring it from the snapstore');
  const restoreStart = Date.now();
  try {
    const outcome = await restoreSingleNode(opts);
    metrics.restorationDurationSeconds.labels('single_node', 'true').observe((Date.now() - restoreStart) / 1000);
    return outcome;
  } catch (err) {
    metrics.restorationDurationSeconds.labels('single_node', 'false').observe((Date.now() - restoreStart) / 1000);
    throw err;
  }
}

async function restoreSingleNode(opts: InitializerOptions): Promise<InitializationOutcome> {
  const { logger } = opts;
  if (!opts.store) {
    logger.info({ dataDir: opts.dataDir }, 'no snapstore configured: removing the data directory so etcd starts empty');
    await rm(opts.dataDir, { recursive: true, force: true });
    return 'empty-start';
  }
  const store = await opts.store();
  const plan = planRestore(await store.list());
  if (!plan.base) {
    logger.info({ dataDir: opts.dataDir }, 'no full snapshot in the snapstore: removing the data directory so etcd starts empty');
    await rm(opts.dataDir, { recursive: true, force: true });
    return 'empty-start';
  }
  await executeRestore(store, plan, {
    ...opts.restore,
    binaries: await opts.binaries(),
    dataDir: opts.dataDir,
    replaceExisting: true,
    logger,
  });
  return 'restored';
}

/** Empties the snapstore temp dir left by a previous run, unless it is the shared /tmp (upstream #869). */
async function tempDirHygiene(opts: InitializerOptions): Promise<void> {
  const dir = opts.snapstoreTempDir;
  if (!opts.store || !dir) return;
  if (dir !== '' && dir !== '/tmp') await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true, mode: 0o700 });
}

/**
 * Lets etcd replay its WAL onto the backend (upstream: an embedded etcd polled every second for up to 60 s)
 * and reports whether it reached the backups' revision.
 */
async function catchUpFromWal(dataDir: string, target: number, opts: InitializerOptions): Promise<boolean> {
  const etcd = await startLocalEtcd({ binaries: await opts.binaries(), dataDir, name: opts.restore.name });
  const client = new Etcd3({ hosts: etcd.clientUrl });
  try {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const rev = await currentRevision(client, 5_000).catch(() => 0);
      if (rev >= target) return true;
      if (Date.now() > deadline) return false;
      await new Promise((r) => setTimeout(r, 1000));
    }
  } finally {
    client.close();
    await etcd.stop();
  }
}
