/**
 * A restore, in the steps of docs/how-it-works.md "How a restore works": the plan (plan.ts, made by the caller) is carried
 * out as base (base.ts) → replay (replay.ts: offline-replay.ts or online-replay.ts, with the history's
 * compaction) → check (check.ts) → swap (swap.ts), all in `<data-dir>.part` until the swap. Any failure
 * removes `.part`, stops the replay etcd, and leaves the data dir and the store as they were.
 */
import { checkDecryptable, type Logger, type SnapStore } from '@etcdbrctl/snapstore';
import { rm } from 'node:fs/promises';
import type { RestorationConfig } from '../config/types.js';
import type { EtcdBinaries, LocalEtcd } from '../etcd/index.js';
import { REPLAY_CALL_TIMEOUT_MS } from './replay-deadline.js';
import { fetchBase, restoreBase } from './base.js';
import { checkRestored } from './check.js';
import type { FetchedDelta, StartedFetch } from './fetch.js';
import type { RestorePlan } from './plan.js';
import type { OnlineLeases } from './online-leases.js';
import { prefetchDeltas, replayDeltas, type DeltaReplayMode } from './replay.js';
import { restoredLeaseTtlSeconds } from './restored-leases.js';
import type { ReplayEtcd } from './replay-etcd.js';
import { recoverInterruptedSwap, swapInto } from './swap.js';
import { backendPath, openScratch, partDirOf, refuseNonEmptyDataDir } from './work-dirs.js';

export { BaseSnapshotError } from './base.js';
export type { DeltaReplayMode } from './replay.js';
export { backendPath } from './work-dirs.js';

export interface RestoreOptions {
  binaries: EtcdBinaries;
  /** The data dir to produce. It is built in `<dataDir>.part` and renamed at the very end. */
  dataDir: string;
  /** `--restoration-temp-snapshots-dir`: scratch space for the base snapshot file and fetched deltas. */
  tempDir: string;
  name: string;
  initialCluster: string;
  initialClusterToken: string;
  initialAdvertisePeerUrls: string[];
  skipHashCheck: boolean;
  maxFetchers: number;
  embeddedEtcdQuotaBytes: number;
  maxRequestBytes: number;
  maxTxnOps: number;
  /** Sync writes of the replay etcd; off by default (upstream runs it with UnsafeNoFsync on 3.5+). */
  fsync?: boolean;
  /**
   * How the deltas are applied: `offline` writes them straight into the restored backend (no etcd), `online`
   * replays them through a local etcd, `auto` (default) is offline unless that does not apply (an unknown
   * backend layout, deltas etcd could not have written, a result above 80 % of the quota), then online.
   */
  deltaReplay?: DeltaReplayMode;
  /**
   * Keep each restored key's lease, and create the leases the restored revision's keys name, with the TTL a
   * delta recorded, else this one (restored-leases.ts; `--restored-lease-ttl`). Absent: keys are written
   * without their lease, as upstream's restore writes them (every command of ours passes it).
   */
  restoredLeaseTtlSeconds?: number;
  /**
   * Compact the result at this revision (the result's revision when above it), as etcd's compaction does:
   * the offline replay writes it so; the online replay compacts through its etcd once the deltas are in.
   */
  compactRevision?: number;
  /** Keep the replay etcd running and hand it to the caller (compact uses it); the caller stops it. */
  keepEtcdRunning?: boolean;
  /** Replace an existing data dir at the end instead of failing (the initializer's case). */
  replaceExisting?: boolean;
  logger: Logger;
  /**
   * Aborts the restore at the next step or pending call (base restore tool, fetch, replay transaction, etcd
   * start): `.part` is removed, the data dir left as it was, and the restore rejects with the signal's reason.
   */
  signal?: AbortSignal;
  /** Deadline of each call to the replay etcd (default REPLAY_CALL_TIMEOUT_MS): a stalled etcd fails the restore. */
  callTimeoutMs?: number;
}

/** The restore options the restoration flags (`--name` … `--max-txn-ops`) set, other than the directories. */
export type RestoreSettings = Pick<
  RestoreOptions,
  | 'name'
  | 'initialCluster'
  | 'initialClusterToken'
  | 'initialAdvertisePeerUrls'
  | 'skipHashCheck'
  | 'maxFetchers'
  | 'embeddedEtcdQuotaBytes'
  | 'maxRequestBytes'
  | 'maxTxnOps'
  | 'deltaReplay'
  | 'restoredLeaseTtlSeconds'
>;

export function restoreSettings(rc: RestorationConfig): RestoreSettings {
  return {
    name: rc.name,
    initialCluster: rc.initialCluster,
    initialClusterToken: rc.initialClusterToken,
    initialAdvertisePeerUrls: rc.initialAdvertisePeerURLs,
    skipHashCheck: rc.skipHashCheck,
    maxFetchers: rc.maxFetchers,
    embeddedEtcdQuotaBytes: rc.embeddedEtcdQuotaBytes,
    maxRequestBytes: rc.maxRequestBytes,
    maxTxnOps: rc.maxTxnOps,
    deltaReplay: rc.deltaReplay,
    restoredLeaseTtlSeconds: restoredLeaseTtlSeconds(rc),
  };
}

export interface RestoreResult {
  restored: boolean;
  revision: number;
  deltasApplied: number;
  revisionsApplied: number;
  durationMs: number;
  /** Time from the replay etcd answering to the last delta applied (0 without deltas). */
  replayMs: number;
  /** Only with `keepEtcdRunning`: the local etcd serving the restored data dir (at `dataDir`). */
  etcd?: LocalEtcd;
  /**
   * The base snapshot had etcd auth enabled and the replay etcd ran with it switched off. It is back on in
   * the result, except with `keepEtcdRunning`: there the caller stops etcd, then calls `reenableAuth` (replay-etcd.ts).
   * (Without deltas no etcd runs and auth is left as the base has it; this stays false.)
   */
  authDisabledForReplay: boolean;
  /**
   * Only with `keepEtcdRunning`, after an online replay that keeps leases: the replay etcd holds them with a
   * replay-long TTL (online-leases.ts), so the caller stops etcd and then writes the `lease` bucket
   * (`OnlineLeases.writeBucket`), as this restore does itself otherwise.
   */
  leases?: OnlineLeases;
}

/**
 * Executes a restore plan: base snapshot through etcd's own restore into `<dataDir>.part`, the deltas
 * replayed onto it, the result checked, then a rename. Any failure removes `.part`, stops the replay etcd
 * (also a stalled one) and leaves the data dir and the store as they were.
 */
export async function executeRestore(store: SnapStore, plan: RestorePlan, opts: RestoreOptions): Promise<RestoreResult> {
  const started = Date.now();
  const { logger, signal } = opts;
  const base = plan.base;
  if (!base) {
    return {
      restored: false,
      revision: 0,
      deltasApplied: 0,
      revisionsApplied: 0,
      durationMs: 0,
      replayMs: 0,
      authDisabledForReplay: false,
    };
  }
  const partDir = partDirOf(opts.dataDir);
  // A missing or wrong age identity fails here, on the headers alone, before anything on disk changes.
  await checkDecryptable(store, [base, ...plan.deltas]);
  await recoverInterruptedSwap(opts.dataDir);
  if (!opts.replaceExisting) await refuseNonEmptyDataDir(opts.dataDir);
  const scratch = await openScratch(opts.tempDir);
  await rm(partDir, { recursive: true, force: true });
  let etcd: ReplayEtcd | undefined;
  let prefetched: StartedFetch<FetchedDelta> | undefined;
  try {
    signal?.throwIfAborted();
    logger.info({ snapshot: base.snapName, deltas: plan.deltas.length, targetRevision: plan.targetRevision }, 'restoring');
    // The deltas download while etcd's restore tool writes the base: neither needs the other's result. While
    // the full itself downloads, only one delta does: the base is on the critical path, and six downloads
    // beside it (decompressed and hashed on the same two cores) made a small full's fetch take 2-3.5x as long.
    const baseFile = fetchBase(store, base, scratch.dir, signal);
    baseFile.catch(() => undefined); // awaited below; until then its failure is not unhandled
    prefetched = prefetchDeltas(store, plan, scratch.dir, { ...opts, oneAtATimeUntil: baseFile });
    const member = {
      binaries: opts.binaries,
      dataDir: partDir,
      name: opts.name,
      initialCluster: opts.initialCluster,
      initialClusterToken: opts.initialClusterToken,
      initialAdvertisePeerUrls: opts.initialAdvertisePeerUrls,
      skipHashCheck: opts.skipHashCheck,
    };
    await restoreBase(base, member, await baseFile, scratch.dir, signal);
    logger.info({ snapshot: base.snapName, ms: Date.now() - started }, 'base snapshot restored');

    const replayed = await replayDeltas(store, plan, partDir, scratch.dir, {
      ...opts,
      callTimeoutMs: opts.callTimeoutMs ?? REPLAY_CALL_TIMEOUT_MS,
      prefetched,
    });
    etcd = replayed.etcd;
    const result: RestoreResult = {
      restored: true,
      revision: replayed.revision,
      deltasApplied: replayed.deltasApplied,
      revisionsApplied: replayed.revisionsApplied,
      durationMs: 0,
      replayMs: replayed.replayMs,
      authDisabledForReplay: etcd?.authWasEnabled ?? false,
    };
    if (opts.keepEtcdRunning && etcd) {
      // The caller keeps using this etcd; it serves `.part` until the caller stops it and renames.
      result.etcd = etcd.handOver();
      if (replayed.leases) result.leases = replayed.leases;
      etcd = undefined;
    } else {
      await etcd?.stop();
      etcd = undefined;
      if (replayed.leases) {
        const leases = await replayed.leases.writeBucket(backendPath(partDir), signal);
        logger.info({ leases }, 'leases of the online replay written');
      }
      await checkRestored(partDir);
      await swapInto(partDir, opts.dataDir, opts.replaceExisting === true);
    }
    result.durationMs = Date.now() - started;
    const { revision, deltasApplied, revisionsApplied, replayMs } = result;
    logger.info({ revision, deltasApplied, revisionsApplied, replayMs, ms: result.durationMs }, 'restore finished');
    return result;
  } catch (err) {
    await etcd?.abandon();
    await rm(partDir, { recursive: true, force: true });
    throw err;
  } finally {
    // Before the scratch dir goes: a download still running would write into it.
    await prefetched?.close();
    await scratch.remove();
  }
}
