/**
 * The restore's replay step (docs/how-it-works.md "How a restore works", Replay and History): the plan's deltas on top of
 * the restored base, by one of two paths that give the same database:
 * - offline (offline-replay.ts): written straight into the `.part` backend by our bbolt writer, no etcd;
 * - online (online-replay.ts): replayed through a local etcd on `.part` (replay-etcd.ts), upstream's way.
 * `auto` is offline, and online only when offline does not apply (the base backend is untouched then).
 * Both compact the history at the same revision, decided from the chain and the quota (quota-rule.ts).
 * The online path (and through it the etcd client) is imported only when a restore takes it or keeps an
 * etcd running: a restore that goes offline never loads it.
 */
import { stat } from 'node:fs/promises';
import type { Logger, SnapStore } from '@etcdbrctl/snapstore';
import { fetchDeltasInOrder, startFetching, type FetchedDelta, type FetchOptions, type StartedFetch } from './fetch.js';
import { InconsistentDeltaError, OfflineReplayNotApplicable, replayDeltasOffline } from './offline-replay.js';
import type { OnlineLeases } from './online-leases.js';
import type { ReplayCounts } from './online-replay.js';
import type { RestorePlan } from './plan.js';
import type { QuotaRule } from './quota-rule.js';
import type { ReplayEtcd, ReplayEtcdOptions } from './replay-etcd.js';
import { logContinuedRevision, logOverlap, ReplayProgress } from './replay-progress.js';
import { backendPath, DATA_DIR_FLAG, namingWorkDir } from './work-dirs.js';

export type DeltaReplayMode = 'auto' | 'offline' | 'online';

export interface ReplayOptions extends ReplayEtcdOptions {
  deltaReplay?: DeltaReplayMode | undefined;
  compactRevision?: number | undefined;
  /** Keep the keys' leases, with this TTL where no delta recorded one (RestoreOptions.restoredLeaseTtlSeconds). */
  restoredLeaseTtlSeconds?: number | undefined;
  /** Start the replay etcd even when no delta needs it, and leave it running (see RestoreOptions). */
  keepEtcdRunning?: boolean | undefined;
  maxFetchers: number;
  callTimeoutMs: number;
  logger: Logger;
  /** The deltas' downloads, started before the replay (prefetchDeltas): the offline path takes them from here. */
  prefetched?: StartedFetch<FetchedDelta> | undefined;
}

export interface Replayed extends ReplayCounts {
  /**
   * The online replay's leases: once the replay etcd has stopped, the caller writes its `lease` bucket
   * (OnlineLeases.writeBucket) before the result is checked.
   */
  leases?: OnlineLeases;
  /** Time from the start of the replay to the last delta applied (0 when nothing was replayed). */
  replayMs: number;
  /** The replay etcd, still running on `.part`: the caller stops it (ReplayEtcd.stop) or hands it over. */
  etcd?: ReplayEtcd;
}

/**
 * Replays the plan's deltas into the backend of `partDir` (fresh from the base step). On failure nothing of
 * it runs any more (a replay etcd it started is stopped); `.part` is the caller's to remove.
 */
export async function replayDeltas(
  store: SnapStore,
  plan: RestorePlan,
  partDir: string,
  scratchDir: string,
  opts: ReplayOptions,
): Promise<Replayed> {
  const base = plan.base!;
  const { logger, signal } = opts;
  // The compaction for size is decided from the chain and the quota alone (quota-rule.ts), the same way by both paths.
  const quotaRule: QuotaRule = { quotaBytes: opts.embeddedEtcdQuotaBytes, baseBytes: (await stat(backendPath(partDir))).size };
  const mode = opts.deltaReplay ?? 'auto';
  // Without deltas only a compaction asked for rewrites the base backend.
  const rewrite = plan.deltas.length > 0 || opts.compactRevision !== undefined;
  let replayed: Replayed = { revision: base.lastRevision, deltasApplied: 0, revisionsApplied: 0, replayMs: 0 };
  let offline = false;
  if (rewrite && mode !== 'online') {
    const started = Date.now();
    const counts = await replayOffline(store, plan, partDir, scratchDir, quotaRule, opts, mode);
    if (counts) {
      replayed = { ...counts, replayMs: Date.now() - started };
      offline = true;
    }
  }
  // The online path, or an etcd the caller keeps using.
  if (!(rewrite && !offline) && opts.keepEtcdRunning !== true) return replayed;

  const [{ startReplayEtcd }, { readRevision, replayOnline }, { prepareOnlineLeases }] = await Promise.all([
    import('./replay-etcd.js'),
    import('./online-replay.js'),
    import('./online-leases.js'),
  ]);
  // Before the replay etcd opens the backend: its leases must outlast the replay (online-leases.ts).
  const leases =
    !offline && opts.restoredLeaseTtlSeconds !== undefined
      ? await prepareOnlineLeases(backendPath(partDir), opts.restoredLeaseTtlSeconds, signal)
      : undefined;
  const etcd = await startReplayEtcd(partDir, opts);
  try {
    const calls = { signal, callTimeoutMs: opts.callTimeoutMs };
    if (offline) {
      // Only kept running for the caller: the deltas are in already.
      replayed.revision = await readRevision(etcd.client, calls);
    } else {
      const started = Date.now();
      const counts = await replayOnline(etcd, store, plan, {
        ...calls,
        maxFetchers: opts.maxFetchers,
        scratchDir,
        quotaRule,
        compactRevision: opts.compactRevision,
        leases,
        logger,
      });
      replayed = { ...counts, replayMs: Date.now() - started, ...(leases ? { leases } : {}) };
    }
    return { ...replayed, etcd };
  } catch (err) {
    await etcd.abandon();
    throw err;
  }
}

/**
 * The offline path. Resolves with undefined when it does not apply here and `auto` may replay online instead
 * (the base backend is untouched then); `offline` fails with the reason.
 */
async function replayOffline(
  store: SnapStore,
  plan: RestorePlan,
  partDir: string,
  scratchDir: string,
  quotaRule: QuotaRule,
  opts: ReplayOptions,
  mode: DeltaReplayMode,
): Promise<ReplayCounts | undefined> {
  const { logger, signal } = opts;
  const progress = new ReplayProgress(plan, plan.base!.lastRevision, logger);
  try {
    const r = await replayDeltasOffline({
      dbPath: backendPath(partDir),
      deltas: untilAborted(opts.prefetched ?? fetchForReplay(store, plan, scratchDir, opts), signal),
      targetRevision: plan.targetRevision,
      ...(opts.compactRevision !== undefined ? { compactRevision: opts.compactRevision } : {}),
      quotaRule,
      logger,
      ...(signal ? { signal } : {}),
      ...(opts.restoredLeaseTtlSeconds !== undefined ? { leases: { defaultTtlSeconds: opts.restoredLeaseTtlSeconds } } : {}),
      // Unless an etcd is to run on it at once, the restore fsyncs the data dir beside its check (check.ts).
      syncResult: opts.keepEtcdRunning === true,
      onDelta: (snap, rev) => progress.delta(snap, rev),
      onContinued: (snap, rev) => logContinuedRevision(logger, snap.snapName, rev),
    });
    return { revision: r.revision, deltasApplied: r.deltasApplied, revisionsApplied: r.revisionsApplied };
  } catch (err) {
    if (signal?.aborted) throw err;
    // The fetched deltas' own write failures name their file already; one left here is the new backend's.
    if (mode === 'offline' || !(err instanceof OfflineReplayNotApplicable || err instanceof InconsistentDeltaError))
      throw namingWorkDir(err, 'the restored backend', backendPath(partDir), DATA_DIR_FLAG);
    logger.warn({ reason: (err as Error).message }, 'offline delta replay does not apply here; replaying through etcd (online)');
    return undefined;
  } finally {
    // Consumed, or (a replay that stopped before reading the deltas) its downloads ended before going online.
    await opts.prefetched?.close();
  }
}

type FetchSettings = Pick<ReplayOptions, 'maxFetchers' | 'logger' | 'signal'>;

/** The plan's deltas, fetched for the offline replay (overlaps logged). */
function fetchForReplay(
  store: SnapStore,
  plan: RestorePlan,
  scratchDir: string,
  opts: FetchSettings & Pick<FetchOptions, 'oneAtATimeUntil'>,
): AsyncGenerator<FetchedDelta> {
  const { logger, signal } = opts;
  return fetchDeltasInOrder(store, plan.deltas, {
    maxFetchers: opts.maxFetchers,
    tempDir: scratchDir,
    onOverlap: (d, prev, n) => logOverlap(logger, d, prev, n),
    ...(signal ? { signal } : {}),
    ...(opts.oneAtATimeUntil ? { oneAtATimeUntil: opts.oneAtATimeUntil } : {}),
  });
}

/**
 * Starts the downloads of the plan's deltas for the offline replay before the base restore, so that they run
 * while etcd's restore tool writes the base (before, they waited for it); undefined when the replay will not
 * start offline (no deltas, or `online`). The caller hands it to replayDeltas as `prefetched` and closes it
 * when the restore ends whatever happened (a failed base leaves its downloads and files to that close). The
 * temp dir then holds the base snapshot's file and up to `maxFetchers` deltas at once.
 */
export function prefetchDeltas(
  store: SnapStore,
  plan: RestorePlan,
  scratchDir: string,
  opts: FetchSettings & Pick<ReplayOptions, 'deltaReplay'> & Pick<FetchOptions, 'oneAtATimeUntil'>,
): StartedFetch<FetchedDelta> | undefined {
  if (plan.deltas.length === 0 || opts.deltaReplay === 'online') return undefined;
  return startFetching(fetchForReplay(store, plan, scratchDir, opts));
}

/** `items` until `signal` aborts: then the next step rejects with its reason (and `items` is closed). */
async function* untilAborted<T>(items: AsyncIterable<T>, signal: AbortSignal | undefined): AsyncGenerator<T> {
  for await (const item of items) {
    signal?.throwIfAborted();
    yield item;
  }
}
