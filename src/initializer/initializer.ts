import { CodedError, EtcdbrError } from '../errors.js';
import { rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { SnapStore } from '@etcdbrctl/snapstore';
import type { Logger } from '../log.js';
import { type EtcdBinaries, startLocalEtcd, connectLocalEtcd } from '../etcd/index.js';
import type { Metrics } from '../metrics.js';
import { planRestore } from '../restorer/plan.js';
import { executeRestore, type RestoreOptions } from '../restorer/restore.js';
import { readWalMetadata } from '../wal/verify.js';
import { decideBootstrap, type BootstrapDecision, type ClusterObservation, type FailCode } from './bootstrap.js';
import { DataDirStatus, dataDirStatusName, type DataDirStatusName } from './validation-status.js';
import { prepareSnapstoreTempDir } from './temp-dir.js';
import { validateDataDir, type ValidationMode, type ValidationResult } from './validator.js';

export type InitializationOutcome = 'valid' | 'restored' | 'empty-start' | 'bootstrap' | 'joined-as-learner' | 'rejoined-as-learner';

/** What initialization is doing, as it happens (the EtcdMember status reports it). */
export type InitializationProgress =
  | { step: 'validated'; valid: boolean; status: DataDirStatusName; reason?: string; clusterSize: number }
  /** Single node: the data dir is being restored from this full snapshot and these deltas. */
  | { step: 'restoring'; base: string; deltas: number }
  /** Multi-node: the bootstrap decision, before it is carried out. */
  | { step: 'decided'; decision: BootstrapDecision };

/**
 * The membership operations a multi-node initialization needs. The initializer names them here and the
 * cluster layer above provides them (cluster/members.ts's MemberControl), so that imports point down only.
 */
export interface ClusterMembership {
  /** Looks at the cluster until it is quorate (or retries are spent). */
  observe(signal?: AbortSignal): Promise<ClusterObservation>;
  /** Adds this member as a learner; `beforeAttempt` runs before every attempt (the data dir is wiped there). */
  addAsLearner(opts?: {
    beforeAttempt?: () => Promise<void>;
    signal?: AbortSignal;
  }): Promise<{ memberId?: string; alreadyMember: boolean }>;
  remove(memberId: string, signal?: AbortSignal): Promise<void>;
}

/** What a multi-node member needs besides the data dir: who it is and how to reach the cluster. */
export interface MultiNodeInit {
  /** `[member-name-prefix-]POD_NAME`. */
  memberName: string;
  /** Whether the member name has an entry in the etcd config's initial-cluster. */
  inInitialCluster: boolean;
  /** This member's peer URLs from the etcd config. */
  peerUrls: string[];
  members: ClusterMembership;
  /** The EtcdMember create-as-learner annotation; absent without Kubernetes. */
  createAsLearner?: () => Promise<boolean>;
  /** Whether the member lease has a holder; absent without Kubernetes. */
  memberLeaseHeld?: () => Promise<boolean>;
  /** Told the decision before it is carried out (the sidecar derives /config's cluster state from it). */
  onDecision?: (decision: BootstrapDecision) => void;
  signal?: AbortSignal;
}

/** A refusal to initialize, with a stable code (bootstrap FailCode) next to the message. */
export class InitializationError extends CodedError {
  constructor(
    readonly code: FailCode,
    message: string,
  ) {
    super(message);
    this.name = 'InitializationError';
  }
}

export interface InitializerOptions {
  dataDir: string;
  podNamespace?: string;
  clusterSize: number;
  /** The store; undefined when no storage provider is configured. */
  store?: () => Promise<SnapStore>;
  /**
   * `--snapstore-temp-directory`: created, and cleared of the upload parts a stopped process left there, at
   * every initialization (upstream v0.36 empties it; see temp-dir.ts).
   */
  snapstoreTempDir?: string;
  /** Besides the data dir, what the temp dir's clearing must never touch, even inside it: the etcd config, a Local store. */
  keepInTempDir?: readonly string[];
  binaries: () => Promise<EtcdBinaries>;
  restore: Omit<RestoreOptions, 'binaries' | 'dataDir' | 'logger' | 'replaceExisting' | 'keepEtcdRunning'>;
  logger: Logger;
  metrics: Metrics;
  /** Required when clusterSize > 1. */
  multiNode?: MultiNodeInit;
  /** Told each step as it happens; for status reporting only, a throwing callback is ignored. */
  onProgress?: (progress: InitializationProgress) => void;
}

/**
 * The single-node initializer (upstream `pkg/initializer/initializer.go` `Initialize`): validate the data dir; when it is not valid, restore it from
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
  report(opts, {
    step: 'validated',
    valid,
    status: name,
    ...(result.reason ? { reason: result.reason } : {}),
    clusterSize: opts.clusterSize,
  });

  switch (result.status) {
    case DataDirStatus.DataDirectoryValid:
      if (opts.clusterSize <= 1) return 'valid';
      break;
    case DataDirStatus.WrongVolumeMounted:
      throw new EtcdbrError('E_CONFLICT', `won't initialize ETCD because wrong ETCD volume is mounted: ${result.reason ?? ''}`.trim());
    case DataDirStatus.FailToOpenBoltDBError:
      throw new EtcdbrError('E_CONFLICT', 'failed to initialize since another process still holds the file lock');
    case DataDirStatus.DataDirectoryStatusUnknown:
      throw new EtcdbrError(
        'E_FAILED',
        `cannot tell whether the data directory ${opts.dataDir} is valid: ${result.reason ?? 'unknown error'}`,
      );
    default:
      break;
  }
  if (opts.clusterSize > 1) {
    if (!opts.multiNode) {
      throw new EtcdbrError(
        'E_INVALID_INPUT',
        `cluster size ${opts.clusterSize}: a multi-node member can only be initialized by the server (it needs the cluster)`,
      );
    }
    return initializeMultiNode(opts, opts.multiNode, result, latestRevision);
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

/**
 * A member of a multi-node cluster (upstream `Initialize`'s multi-node check and restoreInMultiNode;
 * docs/design-decisions.md "Multi-node members"): gather what the bootstrap
 * decision needs, decide (bootstrap.ts), then carry the decision out. Never restores from the snapstore.
 */
async function initializeMultiNode(
  opts: InitializerOptions,
  mn: MultiNodeInit,
  validation: ValidationResult,
  latestRevision: number | undefined,
): Promise<InitializationOutcome> {
  const { logger, metrics, dataDir } = opts;
  const wal = await readWalMetadata(join(dataDir, 'member', 'wal')).catch((err: unknown) => {
    logger.warn({ err }, 'cannot read member metadata from the WAL');
    return undefined;
  });
  const cluster = await mn.members.observe(mn.signal);
  const backupsExist = await backupsPresent(opts, latestRevision);
  const hint = async (what: string, fn: (() => Promise<boolean>) | undefined): Promise<boolean | undefined> => {
    if (!fn) return undefined;
    try {
      return await fn();
    } catch (err) {
      logger.warn({ err }, `cannot read ${what} from Kubernetes; deciding without it`);
      return undefined;
    }
  };
  const createAsLearner = await hint('the EtcdMember create-as-learner annotation', mn.createAsLearner);
  const memberLeaseHeld = cluster.kind === 'quorate' ? undefined : await hint('the member lease', mn.memberLeaseHeld);
  const decision = decideBootstrap({
    clusterSize: opts.clusterSize,
    memberName: mn.memberName,
    inInitialCluster: mn.inInitialCluster,
    peerUrls: mn.peerUrls,
    cluster,
    dataDir: validation.reason === undefined ? { status: validation.status } : { status: validation.status, reason: validation.reason },
    ...(wal ? { wal: { memberId: wal.nodeIdHex, clusterId: wal.clusterIdHex } } : {}),
    backupsExist,
    ...(createAsLearner === undefined ? {} : { createAsLearner }),
    ...(memberLeaseHeld === undefined ? {} : { memberLeaseHeld }),
  });
  logger.info(
    {
      action: decision.action,
      reason: decision.reason,
      member: mn.memberName,
      cluster: cluster.kind === 'quorate' ? cluster.clusterId : cluster.kind,
      dataDir: dataDirStatusName(validation.status),
      walMember: wal?.nodeIdHex,
      walCluster: wal?.clusterIdHex,
      backupsExist,
      createAsLearner,
      memberLeaseHeld,
    },
    'bootstrap decision',
  );
  mn.onDecision?.(decision);
  report(opts, { step: 'decided', decision });

  const wipe = async (): Promise<void> => {
    if (!(await pathExists(dataDir))) return;
    logger.info({ dataDir, action: decision.action }, 'removing the data directory');
    await rm(dataDir, { recursive: true, force: true });
  };
  switch (decision.action) {
    case 'start':
      return 'valid';
    case 'bootstrap':
      await wipe();
      return 'bootstrap';
    case 'join-as-learner':
      await mn.members.addAsLearner({ beforeAttempt: wipe, ...(mn.signal ? { signal: mn.signal } : {}) });
      return 'joined-as-learner';
    case 'rejoin-as-learner': {
      const start = Date.now();
      try {
        await mn.members.remove(decision.removeMemberId, mn.signal);
        await wipe();
        await mn.members.addAsLearner({ beforeAttempt: wipe, ...(mn.signal ? { signal: mn.signal } : {}) });
      } catch (err) {
        metrics.restorationDurationSeconds.labels('single_member', 'false').observe((Date.now() - start) / 1000);
        throw err;
      }
      metrics.restorationDurationSeconds.labels('single_member', 'true').observe((Date.now() - start) / 1000);
      return 'rejoined-as-learner';
    }
    case 'restore':
      // decideBootstrap restores only single-node clusters; a multi-node member never comes here.
      throw new EtcdbrError('E_INTERNAL', 'multi-node member asked to restore from the snapstore');
    case 'fail':
      throw new InitializationError(decision.code, decision.reason);
  }
}

function report(opts: InitializerOptions, progress: InitializationProgress): void {
  try {
    opts.onProgress?.(progress);
  } catch (err) {
    opts.logger.warn({ err, step: progress.step }, 'initialization progress callback failed');
  }
}

async function pathExists(p: string): Promise<boolean> {
  try {
    await stat(p);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

/** Whether the store holds a backup; false without a store, 'unknown' when it cannot be listed. */
async function backupsPresent(opts: InitializerOptions, latestRevision: number | undefined): Promise<boolean | 'unknown'> {
  if (!opts.store) return false;
  if (latestRevision !== undefined) return latestRevision > 0;
  try {
    const plan = planRestore(await (await opts.store()).list());
    return plan.base !== undefined || plan.targetRevision > 0;
  } catch (err) {
    opts.logger.warn({ err }, 'cannot list the snapstore');
    return 'unknown';
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
  report(opts, { step: 'restoring', base: plan.base.snapName, deltas: plan.deltas.length });
  await executeRestore(store, plan, {
    ...opts.restore,
    binaries: await opts.binaries(),
    dataDir: opts.dataDir,
    replaceExisting: true,
    logger,
  });
  return 'restored';
}

/**
 * Upstream's temp dir hygiene, narrowed to what this tool writes there (temp-dir.ts): the data dir is always
 * kept, with whatever the caller names (the etcd config, a Local store).
 */
async function tempDirHygiene(opts: InitializerOptions): Promise<void> {
  const dir = opts.snapstoreTempDir;
  if (!opts.store || !dir) return;
  await prepareSnapstoreTempDir(dir, { keep: [opts.dataDir, ...(opts.keepInTempDir ?? [])], logger: opts.logger });
}

/**
 * Lets etcd replay its WAL onto the backend (upstream: an embedded etcd polled every second for up to 60 s)
 * and reports whether it reached the backups' revision.
 */
async function catchUpFromWal(dataDir: string, target: number, opts: InitializerOptions): Promise<boolean> {
  const etcd = await startLocalEtcd({ binaries: await opts.binaries(), dataDir, name: opts.restore.name });
  const client = await connectLocalEtcd(etcd.clientUrl);
  try {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const rev = await client.currentRevision(5_000).catch(() => 0);
      if (rev >= target) return true;
      if (Date.now() > deadline) return false;
      await new Promise((r) => setTimeout(r, 1000));
    }
  } finally {
    client.close();
    await etcd.stop();
  }
}
