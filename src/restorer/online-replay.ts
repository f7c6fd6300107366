/**
 * The online replay path (docs/how-it-works.md "How a restore works", Replay): the deltas go through the replay etcd
 * (replay-etcd.ts), one transaction per source revision, strictly in order, as upstream replays them
 * (apply.ts sends them, replay-txns.ts commits them). Every call to that etcd takes the restore's signal and
 * the per-call deadline, so a replay etcd that stalls fails the restore instead of hanging it.
 */
import { stat, rm } from 'node:fs/promises';
import type { Logger, SnapStore } from '@etcdbrctl/snapstore';
import { asError } from '../errors.js';
import type { EtcdClient } from '../etcd/index.js';
import { bounded, openReplayTxns } from './replay-txns.js';
import { applyDeltaFile, commitOpenRevision, RevisionMismatchError, type OpenRevision, type ReplayLeases } from './apply.js';
import type { OnlineLeases } from './online-leases.js';
import { fetchDeltasInOrder } from './fetch.js';
import type { RestorePlan } from './plan.js';
import { passesQuota, type QuotaRule } from './quota-rule.js';
import type { ReplayEtcd } from './replay-etcd.js';
import { logContinuedRevision, logOverlap, ReplayProgress } from './replay-progress.js';

/** How the replay etcd is reached: the restore's signal and the deadline of each call. */
export interface ReplayCalls {
  signal: AbortSignal | undefined;
  callTimeoutMs: number;
}

export interface OnlineReplayOptions extends ReplayCalls {
  maxFetchers: number;
  /** Where the fetched deltas wait, each removed once applied. */
  scratchDir: string;
  quotaRule: QuotaRule;
  /** Compact at this revision (the result's when above it) once the deltas are in; see RestoreOptions. */
  compactRevision?: number | undefined;
  /** Keep the keys' leases (online-leases.ts; prepared before the replay etcd started). */
  leases?: OnlineLeases | undefined;
  logger: Logger;
}

export interface ReplayCounts {
  revision: number;
  deltasApplied: number;
  revisionsApplied: number;
}

/**
 * Replays the plan's deltas into the running replay etcd and compacts it where the history step says
 * (quota-rule.ts, or `compactRevision`). On failure the transactions' connection is closed; stopping the
 * etcd is the caller's.
 */
export async function replayOnline(
  replay: ReplayEtcd,
  store: SnapStore,
  plan: RestorePlan,
  opts: OnlineReplayOptions,
): Promise<ReplayCounts> {
  const { logger, signal } = opts;
  const client = replay.client;
  let revision = await readRevision(client, opts);
  const txns = await openReplayTxns(client, logger, { signal, callTimeoutMs: opts.callTimeoutMs });
  const leases: ReplayLeases | undefined = opts.leases && {
    tracker: opts.leases,
    grant: (id, ttl) => replayCall(client.leaseGrant(id, ttl, { timeoutMs: 2 * opts.callTimeoutMs }), `granting lease ${id}`, opts),
  };
  try {
    const progress = new ReplayProgress(plan, revision, logger);
    let revisionsApplied = 0;
    let deltasApplied = 0;
    let open: OpenRevision | undefined;
    /** Delta payload bytes so far (the quota rule's count) and the revision the replay etcd is compacted at. */
    let deltaBytes = 0;
    let compactedAt = 0;
    for await (const { snap, file, skipEvents } of fetchDeltasInOrder(store, plan.deltas, {
      maxFetchers: opts.maxFetchers,
      tempDir: opts.scratchDir,
      onOverlap: (d, prev, n) => logOverlap(logger, d, prev, n),
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
          ...(skipEvents ? { skipEvents } : {}),
          leases,
        });
        revision = r.lastRevision;
        revisionsApplied += r.revisions;
        open = r.open;
      } finally {
        await rm(file, { force: true });
      }
      const expected = Math.min(snap.lastRevision, plan.targetRevision);
      // A held-back last revision is written with the next delta (or after the last one).
      const now = open ? open.revision : await readRevision(client, opts);
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
      if (passesQuota(opts.quotaRule, deltaBytes) && revision > compactedAt) {
        await lean(client, revision, opts);
        compactedAt = revision;
      }
    }
    if (open) {
      revision = (await commitOpenRevision(txns, open, `revision ${open.revision}`, leases)).lastRevision;
      revisionsApplied++;
    }
    // The same compaction the offline replay writes: at the newest revision when the chain passes the
    // quota rule, else at the revision asked for (the result's when above it).
    const compactAt =
      plan.deltas.length > 0 && passesQuota(opts.quotaRule, deltaBytes)
        ? revision
        : opts.compactRevision !== undefined
          ? Math.min(opts.compactRevision, revision)
          : undefined;
    if (compactAt !== undefined && compactAt > compactedAt) await lean(client, compactAt, opts);
    await txns.close();
    signal?.throwIfAborted();
    return { revision, deltasApplied, revisionsApplied };
  } catch (err) {
    await txns.close().catch(() => undefined);
    throw err;
  }
}

/** The replay etcd's current revision, within the call deadline. */
export async function readRevision(client: EtcdClient, calls: ReplayCalls): Promise<number> {
  return bounded(client.currentRevision(2 * calls.callTimeoutMs), 'reading the revision', calls.signal, calls.callTimeoutMs);
}

/**
 * Compacts the replay etcd at `revision` and defragments it (upstream `pkg/snapshot/restorer/restorer.go`
 * does both to stay inside the quota). A failure fails the restore: the result must not depend on it. Each
 * call has the replay's per-call deadline and its signal, like every other call to the replay etcd.
 */
async function lean(client: EtcdClient, revision: number, opts: OnlineReplayOptions): Promise<void> {
  opts.logger.info({ revision, quota: opts.quotaRule.quotaBytes }, 'compacting the replay etcd and defragmenting');
  const call = { timeoutMs: 2 * opts.callTimeoutMs, ...(opts.signal ? { signal: opts.signal } : {}) };
  await replayCall(client.compact(revision, { ...call, physical: true }), `compacting at revision ${revision}`, opts);
  await replayCall(client.defragment(call), 'defragmenting', opts);
}

/**
 * A call that takes the signal itself, bounded as the transactions are (see `bounded`): whichever ends it
 * first, a stop reports as the stop (the signal's reason), not as the call's cancellation.
 */
async function replayCall<T>(work: Promise<T>, what: string, calls: ReplayCalls): Promise<T> {
  try {
    return await bounded(work, what, calls.signal, calls.callTimeoutMs);
  } catch (err) {
    if (calls.signal?.aborted) throw asError(calls.signal.reason);
    throw err;
  }
}
