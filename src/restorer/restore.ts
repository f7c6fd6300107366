import { asError, CodedError, EtcdbrError, errorCode } from '../errors.js';
import { ReadStream, createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, rmdir, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { checkDecryptable, createDecompressStream, type Logger, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { setAuthEnabled } from '../bbolt/patch.js';
import type { RestorationConfig } from '../config/types.js';
import { restoreBaseSnapshot } from '../etcd/base-restore.js';
import type { EtcdBinaries } from '../etcd/binaries.js';
import { startLocalEtcd, type LocalEtcd } from '../etcd/local-etcd.js';
import { connectLocalEtcd } from '../etcd/client.js';
import type { EtcdClient, LocalEtcdClient, ReplayTxns } from '../etcd/etcd-client.js';
import { bounded, REPLAY_CALL_TIMEOUT_MS } from '../etcd/replay-txns.js';
import { applyDeltaFile, commitOpenRevision, RevisionMismatchError, type OpenRevision } from './apply.js';
import { fetchDeltasInOrder } from './fetch.js';
import type { RestorePlan } from './plan.js';
import { InconsistentDeltaError, OfflineReplayNotApplicable, replayDeltasOffline } from './offline-replay.js';
import { syncPath, syncTree } from './durable.js';
import { verifyRestoredBackend } from './verify-backend.js';
import { passesQuota, type QuotaRule } from './quota-rule.js';

export type DeltaReplayMode = 'auto' | 'offline' | 'online';

/**
 * The base full snapshot could not be restored: its object is corrupt (E_CORRUPT), or etcd's restore refused
 * it (E_FAILED: e.g. its sha256 trailer). Says which, so the caller can point to a chain without it.
 */
export class BaseSnapshotError extends CodedError {
  override readonly name = 'BaseSnapshotError';
  constructor(
    readonly code: 'E_CORRUPT' | 'E_FAILED',
    readonly snapshot: Snapshot,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

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
   * the result, except with `keepEtcdRunning`: there the caller stops etcd, then calls `reenableAuth`.
   * (Without deltas no etcd runs and auth is left as the base has it; this stays false.)
   */
  authDisabledForReplay: boolean;
}

/** The backend file of a data dir. */
export function backendPath(dataDir: string): string {
  return join(dataDir, 'member', 'snap', 'db');
}

/**
 * Switches etcd auth back on in a stopped data dir whose replay ran with it off (see executeRestore).
 * Only for callers of `keepEtcdRunning` whose result says `authDisabledForReplay`.
 */
export async function reenableAuth(dataDir: string): Promise<void> {
  await setAuthEnabled(backendPath(dataDir), true);
}

/**
 * Executes a restore plan: base snapshot through etcd's own restore into `<dataDir>.part`, then the deltas
 * replayed into a local etcd on that dir, then a rename. Any failure removes `.part` and leaves the data
 * dir and the store as they were.
 */
export async function executeRestore(store: SnapStore, plan: RestorePlan, opts: RestoreOptions): Promise<RestoreResult> {
  const started = Date.now();
  const { logger } = opts;
  if (!plan.base) {
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
  const partDir = `${opts.dataDir}.part`;
  // A missing or wrong age identity fails here, on the headers alone, before anything on disk changes.
  await checkDecryptable(store, [plan.base, ...plan.deltas]);
  await recoverInterruptedSwap(opts.dataDir);
  if (!opts.replaceExisting && (await nonEmptyDir(opts.dataDir))) {
    throw new EtcdbrError('E_CONFLICT', `data-dir ${opts.dataDir} is not empty: refusing to restore over it`);
  }
  // The scratch space is ours for this restore only: what we create for it goes again at the end, so a
  // restore leaves no empty `default.restoration.tmp/` behind in the working directory.
  const createdTempRoot = await mkdir(opts.tempDir, { recursive: true, mode: 0o700 });
  const scratch = await mkdtemp(join(opts.tempDir, 'restore-'));
  await rm(partDir, { recursive: true, force: true });
  let etcd: LocalEtcd | undefined;
  let client: LocalEtcdClient | undefined;
  let txns: ReplayTxns | undefined;
  let handedOver = false;
  const signal = opts.signal;
  const callTimeoutMs = opts.callTimeoutMs ?? REPLAY_CALL_TIMEOUT_MS;
  try {
    signal?.throwIfAborted();
    const base = plan.base;
    logger.info({ snapshot: base.snapName, deltas: plan.deltas.length, targetRevision: plan.targetRevision }, 'restoring');
    const dbFile = join(scratch, 'snapshot.db');
    let snapshotFile: string;
    try {
      snapshotFile = await fetchFull(store, base, dbFile, opts.signal);
    } catch (err) {
      // Only a corrupt object is the full's fault; an unreachable store or a stop keeps its own error.
      if (errorCode(err) !== 'E_CORRUPT') throw err;
      throw new BaseSnapshotError('E_CORRUPT', base, `full snapshot ${base.snapName} is corrupt: ${(err as Error).message}`, {
        cause: err,
      });
    }
    try {
      // etcd's restore checks the sha256 trailer itself (unless skipped), as upstream relies on it too:
      // hashing here as well would cost a second pass over the whole database.
      await restoreBaseSnapshot({
        binaries: opts.binaries,
        snapshotFile,
        dataDir: partDir,
        name: opts.name,
        initialCluster: opts.initialCluster,
        initialClusterToken: opts.initialClusterToken,
        initialAdvertisePeerUrls: opts.initialAdvertisePeerUrls,
        skipHashCheck: opts.skipHashCheck,
        signal,
      });
    } catch (err) {
      if (signal?.aborted) throw asError(signal.reason);
      throw new BaseSnapshotError('E_FAILED', base, `restoring full snapshot ${base.snapName} failed: ${(err as Error).message}`, {
        cause: err,
      });
    }
    await rm(dbFile, { force: true });
    logger.info({ snapshot: base.snapName, ms: Date.now() - started }, 'base snapshot restored');
    // The compaction for size is decided from the chain and the quota alone (quota-rule.ts), the same way by both paths.
    const quotaRule: QuotaRule = { quotaBytes: opts.embeddedEtcdQuotaBytes, baseBytes: (await stat(backendPath(partDir))).size };

    let revision = base.lastRevision;
    let deltasApplied = 0;
    let revisionsApplied = 0;
    let authEnabled = false;
    let replayMs = 0;
    const mode = opts.deltaReplay ?? 'auto';
    let replayed = false;
    // Without deltas only a compaction asked for rewrites the base backend.
    const rewrite = plan.deltas.length > 0 || opts.compactRevision !== undefined;
    if (rewrite && mode !== 'online') {
      const replayStarted = Date.now();
      const progress = new Progress(plan, base.lastRevision, logger);
      try {
        const r = await replayDeltasOffline({
          dbPath: backendPath(partDir),
          deltas: untilAborted(
            fetchDeltasInOrder(store, plan.deltas, {
              maxFetchers: opts.maxFetchers,
              tempDir: scratch,
              ...(signal ? { signal } : {}),
            }),
            signal,
          ),
          targetRevision: plan.targetRevision,
          ...(opts.compactRevision !== undefined ? { compactRevision: opts.compactRevision } : {}),
          quotaRule,
          logger,
          ...(signal ? { signal } : {}),
          onDelta: (snap, rev) => progress.delta(snap, rev),
          onContinued: (snap, rev) => logContinuedRevision(logger, snap.snapName, rev),
        });
        revision = r.revision;
        deltasApplied = r.deltasApplied;
        revisionsApplied = r.revisionsApplied;
        replayMs = Date.now() - replayStarted;
        replayed = true;
      } catch (err) {
        if (signal?.aborted || mode === 'offline' || !(err instanceof OfflineReplayNotApplicable || err instanceof InconsistentDeltaError))
          throw err;
        // The base backend is untouched: replay the same deltas through etcd instead.
        logger.warn({ reason: (err as Error).message }, 'offline delta replay does not apply here; replaying through etcd (online)');
      }
    }
    if ((rewrite && !replayed) || opts.keepEtcdRunning) {
      // Upstream calls AuthDisable in its embedded etcd. Ours is a child process and we hold no root
      // password, so the flag is switched off in the stopped backend instead (etcd reads it only at start)
      // and switched back on after the replay etcd stopped. `.part` is fresh from snapshot restore and the
      // replay makes no auth requests, so its WAL holds no auth entry that etcd could re-apply over the flag.
      authEnabled = (await setAuthEnabled(backendPath(partDir), false)).previous;
      if (authEnabled) logger.info({}, 'base snapshot has etcd auth enabled: replaying with auth off, switching it back on afterwards');
      etcd = await startLocalEtcd({
        binaries: opts.binaries,
        dataDir: partDir,
        name: opts.name,
        quotaBackendBytes: opts.embeddedEtcdQuotaBytes,
        maxRequestBytes: opts.maxRequestBytes,
        maxTxnOps: opts.maxTxnOps,
        unsafeNoFsync: !opts.fsync,
        // A single member that nobody else talks to: with etcd's defaults (100 ms heartbeat, 1 s election
        // timeout) it waits ~0.8 s to elect itself before the first transaction; 10/100 ms takes ~0.06 s.
        extraArgs: ['--heartbeat-interval=10', '--election-timeout=100'],
        signal,
      });
      logger.info({ pid: etcd.pid, clientUrl: etcd.clientUrl }, 'replay etcd started');
      client = await connectLocalEtcd(etcd.clientUrl);
      const replayStarted = Date.now();
      const c = client;
      revision = await bounded(c.currentRevision(2 * callTimeoutMs), 'reading the revision', signal, callTimeoutMs);
      txns = await client.openReplayTxns(logger, { signal, callTimeoutMs });
      const progress = new Progress(plan, revision, logger);
      let open: OpenRevision | undefined;
      /** Delta payload bytes so far (the quota rule's count) and the revision the replay etcd is compacted at. */
      let deltaBytes = 0;
      let compactedAt = 0;
      for await (const { snap, file } of replayed
        ? []
        : fetchDeltasInOrder(store, plan.deltas, {
            maxFetchers: opts.maxFetchers,
            tempDir: scratch,
            ...(signal ? { signal } : {}),
          })) {
        signal?.throwIfAborted();
        const what = `delta snapshot ${snap.snapName}`;
        try {
          deltaBytes += (await stat(file)).size;
          const r = await applyDeltaFile(txns, file, what, {
            currentRevision: revision,
            stopAtRevision: plan.targetRevision,
            carry: open,
            // The last delta's last revision has nothing after it to continue it.
            holdLast: snap.snapName !== plan.deltas.at(-1)?.snapName,
            onContinued: (rev) => logContinuedRevision(logger, snap.snapName, rev),
          });
          revision = r.lastRevision;
          revisionsApplied += r.revisions;
          open = r.open;
        } finally {
          await rm(file, { force: true });
        }
        const expected = Math.min(snap.lastRevision, plan.targetRevision);
        // A held-back last revision is written with the next delta (or after the last one).
        const now = open
          ? open.revision
          : await bounded(c.currentRevision(2 * callTimeoutMs), 'reading the revision', signal, callTimeoutMs);
        if (now !== expected && now < expected) {
          throw new RevisionMismatchError(
            `mismatched event revision while applying delta snapshot ${snap.snapName}, expected ${expected} but applied ${now}`,
          );
        }
        deltasApplied++;
        progress.delta(snap, revision);
        // The chain's history is kept, as the source etcd had it, unless the chain passes the quota rule
        // (quota-rule.ts): then the history goes, at the newest revision in the end, and on the way after each
        // delta so that the replay etcd stays inside its quota. Upstream compacts every 10th delta, which loses
        // the history a restored member could serve.
        if (passesQuota(quotaRule, deltaBytes) && revision > compactedAt) {
          await lean(client, revision, opts.embeddedEtcdQuotaBytes, logger);
          compactedAt = revision;
        }
      }
      if (open) {
        revision = (await commitOpenRevision(txns, open, `revision ${open.revision}`)).lastRevision;
        revisionsApplied++;
        open = undefined;
      }
      // The same compaction the offline replay writes: at the newest revision when the chain passes the
      // quota rule, else at the revision asked for (the result's when above it).
      const compactAt =
        plan.deltas.length > 0 && passesQuota(quotaRule, deltaBytes)
          ? revision
          : opts.compactRevision !== undefined
            ? Math.min(opts.compactRevision, revision)
            : undefined;
      if (!replayed && compactAt !== undefined && compactAt > compactedAt) {
        await lean(client, compactAt, opts.embeddedEtcdQuotaBytes, logger);
        compactedAt = compactAt;
      }
      await txns.close();
      txns = undefined;
      signal?.throwIfAborted();
      if (!replayed) replayMs = Date.now() - replayStarted;
    }
    const result: RestoreResult = {
      restored: true,
      revision,
      deltasApplied,
      revisionsApplied,
      durationMs: 0,
      replayMs,
      authDisabledForReplay: authEnabled,
    };
    if (opts.keepEtcdRunning && etcd) {
      // The caller keeps using this etcd; it serves `.part` until the caller stops it and renames.
      result.etcd = etcd;
      handedOver = true;
      client?.close();
      client = undefined;
    } else {
      client?.close();
      client = undefined;
      await etcd?.stop();
      etcd = undefined;
      if (authEnabled) await setAuthEnabled(backendPath(partDir), true);
      await syncTree(partDir);
      await verifyRestoredBackend(backendPath(partDir));
      await swapInto(partDir, opts.dataDir, opts.replaceExisting === true);
    }
    result.durationMs = Date.now() - started;
    logger.info({ revision, deltasApplied, revisionsApplied, replayMs, ms: result.durationMs }, 'restore finished');
    return result;
  } catch (err) {
    await txns?.close().catch(() => undefined);
    client?.close();
    await etcd?.stop();
    await rm(partDir, { recursive: true, force: true });
    throw err;
  } finally {
    if (!handedOver) client?.close();
    await rm(scratch, { recursive: true, force: true });
    if (createdTempRoot !== undefined) await removeEmptyDirsUpTo(opts.tempDir, createdTempRoot);
  }
}

/** Removes `dir` and its parents up to and including `top` while they are empty (never anything else). */
async function removeEmptyDirsUpTo(dir: string, top: string): Promise<void> {
  for (let d = resolve(dir); ; d = dirname(d)) {
    try {
      await rmdir(d);
    } catch {
      return; // not empty (someone else's files), or gone: stop there
    }
    if (d === resolve(top) || dirname(d) === d) return;
  }
}

/** Where the data dir being replaced waits while the restored one is renamed into place. */
function asideDir(dataDir: string): string {
  return `${dataDir}.replaced`;
}

/**
 * Puts the restored `.part` in place. An existing data dir is renamed aside first and removed only once the
 * new one is in place, so there is no moment at which neither exists on disk: a kill in between leaves the
 * old one beside, and the next restore puts it back before doing anything (see recoverInterruptedSwap).
 */
async function swapInto(partDir: string, dataDir: string, replaceExisting: boolean): Promise<void> {
  if (!replaceExisting) {
    await rename(partDir, dataDir);
    await syncPath(dirname(dataDir));
    return;
  }
  const aside = asideDir(dataDir);
  await rm(aside, { recursive: true, force: true });
  let hadOld = true;
  try {
    await rename(dataDir, aside);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    hadOld = false;
  }
  await rename(partDir, dataDir);
  // The new data dir's name must be on disk before the old one is gone.
  await syncPath(dirname(dataDir));
  if (hadOld) await rm(aside, { recursive: true, force: true });
}

/** After a kill during `swapInto`: the old data dir goes back if the new one never arrived, else it goes. */
async function recoverInterruptedSwap(dataDir: string): Promise<void> {
  const aside = asideDir(dataDir);
  try {
    await stat(aside);
  } catch {
    return;
  }
  try {
    await stat(dataDir);
    await rm(aside, { recursive: true, force: true });
  } catch {
    await rename(aside, dataDir);
  }
}

async function nonEmptyDir(dir: string): Promise<boolean> {
  try {
    const s = await stat(dir);
    if (!s.isDirectory()) return true;
    const { readdir } = await import('node:fs/promises');
    return (await readdir(dir)).length > 0;
  } catch {
    return false;
  }
}

/**
 * The full snapshot as a local file for etcd's restore. An uncompressed object that the store serves
 * straight from a local file (Local provider) is used in place, with no copy; anything else is
 * downloaded and decompressed into `file`.
 */
async function fetchFull(store: SnapStore, snap: Snapshot, file: string, signal?: AbortSignal): Promise<string> {
  const raw = await store.fetch(snap, undefined, signal ? { signal } : {});
  if (snap.compressionSuffix === '' && raw instanceof ReadStream && typeof raw.path === 'string') {
    const inPlace = raw.path;
    raw.destroy();
    return inPlace;
  }
  const decompress = createDecompressStream(snap.compressionSuffix, snap.snapName);
  const out = createWriteStream(file, { mode: 0o600, highWaterMark: 1 << 20 });
  await pipeline(raw, decompress, out, signal ? { signal } : {});
  return file;
}

/** `items` until `signal` aborts: then the next step rejects with its reason (and `items` is closed). */
async function* untilAborted<T>(items: AsyncIterable<T>, signal: AbortSignal | undefined): AsyncGenerator<T> {
  for await (const item of items) {
    signal?.throwIfAborted();
    yield item;
  }
}

/** Said once per delta that continues the previous one's last revision (both replay paths join them). */
export function logContinuedRevision(logger: Logger, snapName: string, revision: number): void {
  logger.warn(
    { snapshot: snapName, revision },
    "delta snapshot continues the previous delta's last revision (its snapshotter cut the deltas inside a transaction); applying both parts as that one revision",
  );
}

/**
 * Compacts the replay etcd at `revision` and defragments it (upstream `pkg/snapshot/restorer/restorer.go`
 * does both to stay inside the quota). A failure fails the restore: the result must not depend on it.
 */
async function lean(client: EtcdClient, revision: number, quota: number, logger: Logger): Promise<void> {
  logger.info({ revision, quota }, 'compacting the replay etcd and defragmenting');
  await client.compact(revision, { physical: true, timeoutMs: 120_000 });
  await client.defragment({ timeoutMs: 300_000 });
}

/** Logs deltas and revisions applied, the rate, and an estimate of the time left, every few seconds. */
class Progress {
  private readonly started = Date.now();
  private lastLog = 0;
  private readonly startRevision: number;

  constructor(
    private readonly plan: RestorePlan,
    startRevision: number,
    private readonly logger: Logger,
  ) {
    this.startRevision = startRevision;
  }

  delta(snap: Snapshot, revision: number): void {
    const now = Date.now();
    const last = snap === this.plan.deltas.at(-1);
    if (!last && now - this.lastLog < 5000) return;
    this.lastLog = now;
    const done = revision - this.startRevision;
    const total = this.plan.targetRevision - this.startRevision;
    const secs = (now - this.started) / 1000;
    const rate = secs > 0 ? done / secs : 0;
    const etaSeconds = rate > 0 ? Math.max(0, (total - done) / rate) : undefined;
    this.logger.info(
      {
        delta: snap.snapName,
        deltasApplied: this.plan.deltas.indexOf(snap) + 1,
        deltas: this.plan.deltas.length,
        revision,
        targetRevision: this.plan.targetRevision,
        revisionsPerSecond: Math.round(rate),
        ...(etaSeconds !== undefined ? { etaSeconds: Math.round(etaSeconds) } : {}),
      },
      'applying delta snapshots',
    );
  }
}
