/**
 * `etcdbrctl compact` (upstream `pkg/compactor/compactor.go`): folds the latest full snapshot and the deltas after it
 * into one new full snapshot. The chain is restored into a throw-away data dir with a local etcd kept
 * running, compacted at its head revision (physical), optionally defragmented, and streamed back into the
 * store as an ordinary full snapshot `Full-00000000-<rev>-<now>`. Because `rev` is the last delta's revision
 * and the snapshot is newer, it sorts after that delta and becomes the base of the next restore. Nothing in
 * the store is modified or deleted (garbage collection does that).
 */
import { EtcdbrError } from '../errors.js';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { access, rm } from 'node:fs/promises';
import path from 'node:path';
import {
  encryptsNewSnapshots,
  latestSet,
  newSnapshot,
  policyForSuffix,
  SnapStoreError,
  suffixForPolicy,
  type Logger,
  type SnapStore,
  type Snapshot,
} from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { CompactorConfig, RestorationConfig } from '../config/types.js';
import type { EtcdBinaries } from '../etcd/binaries.js';
import type { LocalEtcd } from '../etcd/local-etcd.js';
import type { SnapshotLeases } from '../k8s/snapshot-leases.js';
import { planRestore } from '../restorer/plan.js';
import { backendPath, executeRestore, reenableAuth, restoreSettings } from '../restorer/restore.js';
import { saveVerifiedFullSnapshot, takeFullSnapshot } from '../snapshotter/full-snapshot.js';
import { connectLocalEtcd } from '../etcd/client.js';
import type { EtcdClient } from '../etcd/etcd-client.js';

/** Upstream `etcdDialTimeout`: bounds the revision read on the local etcd. */
const REVISION_READ_TIMEOUT_MS = 30_000;

export interface CompactorDeps {
  store: SnapStore;
  /** A getter is called only when there is something to compact, so an empty store needs no etcd. */
  binaries: EtcdBinaries | (() => Promise<EtcdBinaries>);
  logger: Logger;
  clock: Clock;
  /**
   * With `--enable-snapshot-lease-renewal`: resolves the lease client. Called after planning and before the
   * restore (upstream builds its Kubernetes client at that point), so a broken kubeconfig fails early and
   * an empty store never needs one.
   */
  leases?: () => Promise<SnapshotLeases>;
  /** Aborts the restore and the snapshot upload (SIGTERM); cleanup still runs. */
  signal?: AbortSignal;
}

export interface CompactConfig {
  restoration: RestorationConfig;
  compactor: CompactorConfig;
}

export interface CompactResult {
  /** The new full snapshot; undefined when the store had no full snapshot (nothing done). */
  snapshot: Snapshot | undefined;
  base: Snapshot | undefined;
  deltas: number;
  /** Revision of the compacted snapshot. */
  revision: number;
  restoreMs: number;
  snapshotMs: number;
  totalMs: number;
  /** Backend size of the local etcd before and after compaction + defragmentation (0 when unknown). */
  dbSizeBefore: number;
  dbSizeAfter: number;
}

/**
 * Runs one compaction. Throws on any failure before the new snapshot is committed (a gap or a tampered
 * delta fails while planning or restoring, so nothing is uploaded); the throw-away data dir, its scratch
 * directory and the local etcd are gone afterwards either way.
 */
export async function compactSnapshots(deps: CompactorDeps, config: CompactConfig): Promise<CompactResult> {
  const { store, logger, clock, signal } = deps;
  const started = Date.now();
  const listing = await store.list();
  const plan = planRestore(listing);
  if (!plan.base) {
    logger.info({}, 'No base snapshot found. Will do nothing.');
    return {
      snapshot: undefined,
      base: undefined,
      deltas: 0,
      revision: 0,
      restoreMs: 0,
      snapshotMs: 0,
      totalMs: 0,
      dbSizeBefore: 0,
      dbSizeAfter: 0,
    };
  }
  const base = plan.base;
  // Upstream takes the codec of the last delta of the latest set (the base's when there is none); that
  // set is what upstream restores, so look at it rather than at the plan, which may drop covered deltas.
  const latest = latestSet(listing);
  const suffixSource = latest.deltas.at(-1) ?? base;
  const compression = policyForSuffix(suffixSource.compressionSuffix);
  // A compacted snapshot holds everything its inputs hold: storing encrypted inputs as a plain object
  // would quietly undo their encryption.
  const encryptedInput = [base, ...plan.deltas].find((s) => s.isEncrypted === true);
  if (encryptedInput !== undefined && !encryptsNewSnapshots(store)) {
    throw new SnapStoreError(
      'E_CONFIG',
      `${encryptedInput.snapName} is encrypted: give --encryption-recipients-file so that the compacted snapshot is encrypted too`,
    );
  }
  const leases = deps.leases ? await deps.leases() : undefined;
  const binaries = typeof deps.binaries === 'function' ? await deps.binaries() : deps.binaries;

  const rc = config.restoration;
  const cc = config.compactor;
  const dataDir = path.resolve(rc.dataDir);
  const partDir = `${dataDir}.part`;
  const tempDir = path.resolve(rc.tempDir);
  // Remove the scratch parent afterwards only if this run created it (it may be a shared directory).
  const tempDirExisted = await exists(tempDir);
  logger.info({ base: base.snapName, deltas: plan.deltas.length, targetRevision: plan.targetRevision, dataDir }, 'Start compacting');

  let etcd: LocalEtcd | undefined;
  let client: EtcdClient | undefined;
  try {
    const restored = await executeRestore(store, plan, {
      ...restoreSettings(rc),
      binaries,
      dataDir,
      tempDir,
      keepEtcdRunning: true,
      logger,
      ...(signal ? { signal } : {}),
    });
    etcd = restored.etcd;
    if (!etcd) throw new EtcdbrError('E_INTERNAL', 'restore for compaction did not hand over its local etcd');
    const restoreMs = Date.now() - started;
    logger.info(
      { revision: restored.revision, deltasApplied: restored.deltasApplied, ms: restoreMs },
      'Restoration for compaction is over',
    );

    client = await connectLocalEtcd(etcd.clientUrl);
    const revision = await client.currentRevision(REVISION_READ_TIMEOUT_MS);
    const dbSizeBefore = await dbSize(client);
    await compactAt(client, revision, cc.snapshotTimeout, logger);
    if (cc.defragment) await defragment(client, cc.defragTimeout, logger);
    const dbSizeAfter = await dbSize(client);
    logger.info({ revision, dbSizeBefore, dbSizeAfter }, 'Compacted the restored etcd');

    signal?.throwIfAborted();
    const snapStarted = Date.now();
    let snapshot: Snapshot;
    if (restored.authDisabledForReplay) {
      // The restore switched etcd auth off for the replay. A snapshot of the running etcd would carry auth
      // off into every later restore (upstream does that: it re-enables auth only when its embedded etcd
      // closes, after the snapshot). Instead: stop etcd, switch auth back on in its backend, and store that
      // backend file, which is what etcd's snapshot stream contains, with its sha256 trailer.
      client.close();
      client = undefined;
      await etcd.stop();
      await reenableAuth(partDir);
      logger.info({}, 'base snapshot has etcd auth enabled: storing the compacted backend with auth switched back on');
      snapshot = newSnapshot({
        kind: 'Full',
        startRevision: 0,
        lastRevision: revision,
        createdOn: clock.now(),
        compressionSuffix: suffixForPolicy(compression),
        isFinal: base.isFinal,
        encrypted: encryptsNewSnapshots(store),
      });
      const timeout = AbortSignal.timeout(cc.snapshotTimeout);
      await saveVerifiedFullSnapshot(
        store,
        snapshot,
        withSha256Trailer(backendPath(partDir)),
        compression,
        signal ? AbortSignal.any([signal, timeout]) : timeout,
      );
      logger.info({ snapshot: snapshot.snapName, revision }, 'Full snapshot saved');
    } else {
      snapshot = await takeFullSnapshot(
        { client, store, compression, now: () => clock.now(), logger },
        {
          isFinal: base.isFinal,
          snapshotTimeoutMs: cc.snapshotTimeout,
          connectionTimeoutMs: REVISION_READ_TIMEOUT_MS,
          ...(signal ? { signal } : {}),
        },
      );
    }
    const snapshotMs = Date.now() - snapStarted;

    if (leases) {
      try {
        await leases.updateFull(snapshot, signal);
      } catch (err) {
        // As upstream: the snapshot is stored; a lease that lags behind is only a warning.
        logger.warn({ err, snapshot: snapshot.snapName }, 'Snapshot lease update failed');
      }
    }
    return {
      snapshot,
      base,
      deltas: plan.deltas.length,
      revision: snapshot.lastRevision,
      restoreMs,
      snapshotMs,
      totalMs: Date.now() - started,
      dbSizeBefore,
      dbSizeAfter,
    };
  } finally {
    client?.close();
    await etcd?.stop();
    await rm(partDir, { recursive: true, force: true });
    if (!tempDirExisted) await rm(tempDir, { recursive: true, force: true });
  }
}

/**
 * Physical compaction at the head revision. A restore whose backend passed 80 % of its quota has compacted
 * its history already, so the head may be compacted; etcd then answers "required revision has been compacted", which
 * here means the work is done (upstream stops the job without a snapshot in that case).
 */
async function compactAt(client: EtcdClient, revision: number, timeoutMs: number, logger: Logger): Promise<void> {
  try {
    await client.compact(revision, { physical: true, timeoutMs });
  } catch (err) {
    if (/required revision has been compacted/.test(String((err as Error)?.message ?? err))) {
      logger.info({ revision }, 'The restored etcd is already compacted at its head revision');
      return;
    }
    throw new EtcdbrError('E_FAILED', `failed to compact: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }
}

/** Defragmentation only saves space in the snapshot; as upstream, a failure is logged and ignored. */
async function defragment(client: EtcdClient, timeoutMs: number, logger: Logger): Promise<void> {
  const t0 = Date.now();
  try {
    await client.defragment({ timeoutMs });
    logger.info({ ms: Date.now() - t0 }, 'Defragmented the restored etcd');
  } catch (err) {
    logger.error({ err }, 'failed to defragment');
  }
}

/** A stopped etcd's backend file followed by its sha256: the payload of a full snapshot. */
async function* withSha256Trailer(file: string): AsyncGenerator<Buffer> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 })) {
    hash.update(chunk as Buffer);
    yield chunk as Buffer;
  }
  yield hash.digest();
}

async function dbSize(client: EtcdClient): Promise<number> {
  try {
    return (await client.status()).dbSize;
  } catch {
    return 0;
  }
}

async function exists(p: string): Promise<boolean> {
  try {
    await access(p);
    return true;
  } catch {
    return false;
  }
}
