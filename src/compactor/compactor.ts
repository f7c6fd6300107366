/**
 * `etcdbrctl compact` (upstream `pkg/compactor/compactor.go`): folds the latest full snapshot and the deltas
 * after it into one new full snapshot, compacted at the head revision. The offline writer builds the
 * compacted backend straight from the snapshots (offline.ts: no etcd process, compact by construction, no
 * defragmentation needed), our bbolt check checks it, and it is stored with etcd's sha256 trailer as an
 * ordinary full snapshot `Full-00000000-<rev>-<now>` (upload.ts). Because `rev` is the last delta's revision
 * and the snapshot is named in a later second (snapshot-time.ts), it sorts after that delta, also in upstream's
 * order, and becomes the base of the next restore. Nothing in
 * the store is modified or deleted (garbage collection does that).
 *
 * Only a chain the offline writer cannot write (a backend layout it does not know, or deltas it refuses as
 * a history etcd could not have written: the same chains `restore --delta-replay=auto` hands to the online
 * replay) is compacted through a local etcd as upstream does (online.ts), with a warning saying why.
 * `--delta-replay` picks the way as it does for a restore: `online` goes through etcd at once, `offline`
 * fails where the writer cannot write the chain.
 *
 * Either way the keys keep their lease and the leases they name are in the result, as a restore writes them
 * (src/restorer/restored-leases.ts; `--restored-lease-ttl` for a lease whose TTL no snapshot holds):
 * upstream's compacted snapshot has the deltas' keys without their lease.
 */
import { rm } from 'node:fs/promises';
import { createReadStream } from 'node:fs';
import {
  checkDecryptable,
  encryptsNewSnapshots,
  latestSet,
  policyForSuffix,
  SnapStoreError,
  type CompressionPolicy,
  type Logger,
  type SnapStore,
  type Snapshot,
} from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { CompactorConfig, RestorationConfig } from '../config/types.js';
import type { EtcdBinaries } from '../etcd/index.js';
import type { SnapshotLeases } from '../k8s/snapshot-leases.js';
import { compactedSnapshotClock } from './snapshot-time.js';
import { InconsistentDeltaError, OfflineReplayNotApplicable } from '../restorer/offline-replay.js';
import { planRestore, type RestorePlan } from '../restorer/plan.js';
import { restoredLeaseTtlSeconds } from '../restorer/restored-leases.js';
import { openScratch } from '../restorer/work-dirs.js';
import { writeCompactedBackend } from './offline.js';
import { saveCompactedBackend, withSha256Trailer } from './upload.js';

export interface CompactorDeps {
  store: SnapStore;
  /**
   * The etcd binaries, for the fallback through etcd only (online.ts): a getter is called only then, so the
   * offline compaction needs no etcd installed.
   */
  binaries: EtcdBinaries | (() => Promise<EtcdBinaries>);
  logger: Logger;
  clock: Clock;
  /**
   * With `--enable-snapshot-lease-renewal`: resolves the lease client. Called after planning and before the
   * compaction (upstream builds its Kubernetes client at that point), so a broken kubeconfig fails early and
   * an empty store never needs one.
   */
  leases?: () => Promise<SnapshotLeases>;
  /** Aborts the compaction and the snapshot upload (SIGTERM); cleanup still runs. */
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
  /** How the compacted backend was made: offline (the writer) or online (the fallback through etcd). */
  path: 'offline' | 'online' | undefined;
  /** Time to build the compacted backend (offline: fetch, write and check; online: restore and replay). */
  buildMs: number;
  /** Time to store the new full snapshot (online: compaction, defragmentation, the lease bucket and the upload). */
  uploadMs: number;
  totalMs: number;
  /** Size of the compacted backend. */
  backendBytes: number;
}

/**
 * Runs one compaction. Throws on any failure before the new snapshot is committed (a gap, a corrupt full or
 * delta, a backend failing the bbolt check: nothing is uploaded); the scratch directory is gone afterwards
 * either way.
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
      path: undefined,
      buildMs: 0,
      uploadMs: 0,
      totalMs: 0,
      backendBytes: 0,
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
  // A missing or wrong age identity fails here, on the headers alone, before anything is fetched.
  await checkDecryptable(store, [base, ...plan.deltas]);
  const leases = deps.leases ? await deps.leases() : undefined;
  // Named so that upstream's ordering puts it after the last delta it folds in (snapshot-time.ts).
  const namingClock = compactedSnapshotClock(clock, listing, plan.targetRevision);

  const rc = config.restoration;
  logger.info({ base: base.snapName, deltas: plan.deltas.length, targetRevision: plan.targetRevision }, 'Start compacting');

  const job: Job = { deps, config, plan, namingClock, compression, isFinal: base.isFinal };
  let result: BuiltAndStored | undefined;
  // Fails naming --restoration-temp-snapshots-dir when the directory cannot be made (work-dirs.ts).
  const scratchDir = await openScratch(rc.tempDir, 'compact-');
  try {
    const mode = rc.deltaReplay;
    if (mode === 'online') {
      logger.info({}, '--delta-replay=online: compacting through a local etcd (restore, compact, defragment, store)');
    } else {
      try {
        result = await compactOffline(job, scratchDir.dir, started);
      } catch (err) {
        // `offline` fails with the writer's reason, as a restore with that mode does.
        if (signal?.aborted || mode === 'offline' || !(err instanceof OfflineReplayNotApplicable || err instanceof InconsistentDeltaError))
          throw err;
        logger.warn(
          { reason: err.message },
          'the offline compaction cannot write this chain: compacting through a local etcd instead (restore, compact, defragment, store)',
        );
        await rm(scratchDir.dir, { recursive: true, force: true });
      }
    }
    result ??= await compactOnline(job);
  } finally {
    await scratchDir.remove();
  }

  if (leases && result.snapshot) {
    try {
      await leases.updateFull(result.snapshot, signal);
    } catch (err) {
      // As upstream: the snapshot is stored; a lease that lags behind is only a warning.
      logger.warn({ err, snapshot: result.snapshot.snapName }, 'Snapshot lease update failed');
    }
  }
  return { ...result, base, deltas: plan.deltas.length, totalMs: Date.now() - started };
}

/** What either way needs to build and store the compacted full. */
interface Job {
  deps: CompactorDeps;
  config: CompactConfig;
  plan: RestorePlan;
  /** Names the new full after the last delta it folds in (snapshot-time.ts). */
  namingClock: Clock;
  compression: CompressionPolicy | undefined;
  isFinal: boolean;
}

/** What one of the two ways made and stored. */
type BuiltAndStored = Omit<CompactResult, 'totalMs' | 'base' | 'deltas'>;

/** The offline writer (offline.ts) in `scratch`, then the upload of its file. */
async function compactOffline(job: Job, scratch: string, started: number): Promise<BuiltAndStored> {
  const { deps, config, plan, namingClock, compression, isFinal } = job;
  const { store, logger, signal } = deps;
  const rc = config.restoration;
  const built = await writeCompactedBackend(store, plan, {
    scratch,
    maxFetchers: rc.maxFetchers,
    skipHashCheck: rc.skipHashCheck,
    restoredLeaseTtlSeconds: restoredLeaseTtlSeconds(rc),
    logger,
    ...(signal ? { signal } : {}),
  });
  const buildMs = Date.now() - started;
  logger.info(
    {
      revision: built.revision,
      compactRevision: built.compactRevision,
      deltasApplied: built.deltasApplied,
      bytes: built.bytes,
      leases: built.leases,
      ms: buildMs,
    },
    'Compacted backend written offline',
  );
  const uploadStarted = Date.now();
  const snapshot = await saveCompactedBackend(
    { store, clock: namingClock, logger, ...(signal ? { signal } : {}) },
    withSha256Trailer(createReadStream(built.dbPath, { highWaterMark: 1 << 20 })),
    { revision: built.revision, compression, isFinal, timeoutMs: config.compactor.snapshotTimeout },
  );
  return { snapshot, revision: built.revision, path: 'offline', buildMs, uploadMs: Date.now() - uploadStarted, backendBytes: built.bytes };
}

/** The way through a local etcd (online.ts, loaded only here: it brings the etcd client). */
async function compactOnline(job: Job): Promise<BuiltAndStored> {
  const { deps, config, plan, namingClock, compression, isFinal } = job;
  const { store, logger, signal } = deps;
  const { compactThroughEtcd } = await import('./online.js');
  const binaries = typeof deps.binaries === 'function' ? await deps.binaries() : deps.binaries;
  const online = await compactThroughEtcd(
    { store, binaries, logger, clock: namingClock, ...(signal ? { signal } : {}) },
    config,
    plan,
    compression,
    isFinal,
  );
  return {
    snapshot: online.snapshot,
    revision: online.revision,
    path: 'online',
    buildMs: online.restoreMs,
    uploadMs: online.uploadMs,
    backendBytes: online.bytes,
  };
}
