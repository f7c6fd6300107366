import type { Logger } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import { failureLabel, type Metrics } from '../metrics.js';
import { errorCode } from '../errors.js';
import type { ExponentialBackoff } from './backoff.js';
import type { GarbageCollector } from './garbage-collector.js';
import { fullSnapshotMaxTimeWindowHours } from '../config/schedule.js';
import { LeadershipLost, type Snapshotter } from './snapshotter.js';
import { decideFullSnapshotAtStartup } from './startup.js';

export interface SupervisorDeps {
  /** Builds a fresh snapshotter from the store's current chain (upstream re-creates it per leadership). */
  createSnapshotter: () => Promise<Snapshotter>;
  createGarbageCollector: (snapshotter: Snapshotter) => GarbageCollector;
  /** Health probe of the local etcd (upstream: Status(endpoints[0]) with a 5 s timeout). */
  probeEtcd: () => Promise<void>;
  setHealthy: (healthy: boolean) => void;
  /** Called whenever the active snapshotter changes (undefined = none), for the HTTP handlers. */
  onActiveSnapshotter: (s: Snapshotter | undefined) => void;
  backoff: ExponentialBackoff;
  schedule: string;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
}

/**
 * Upstream's leader-side probe loop (`pkg/server/backuprestoreserver.go` `runEtcdProbeLoopWithSnapshotter`): while this sidecar leads, keep a snapshotter running.
 * Probe etcd, wait out the backoff after a failure, go healthy, decide between an initial delta and a
 * full snapshot, then run the event loop and GC until leadership ends or the loop fails (then again).
 */
/** Catch-up failures after which the chain cannot be continued with deltas: a full snapshot starts a new one. */
const CHAIN_ENDING_ERRORS = new Set(['E_ETCD_COMPACTED', 'E_TIMELINE_CHANGED', 'E_CATCH_UP_TOO_SLOW']);

export async function superviseSnapshotter(deps: SupervisorDeps, signal: AbortSignal): Promise<void> {
  const { clock, logger } = deps;
  const timeWindowHours = fullSnapshotMaxTimeWindowHours(deps.schedule);
  while (!signal.aborted) {
    try {
      await deps.probeEtcd();
    } catch (err) {
      deps.setHealthy(false);
      logger.warn({ err }, 'etcd probe failed; retrying');
      await clock.sleep(1000, signal).catch(() => undefined);
      continue;
    }
    if (deps.backoff.active) {
      const wait = deps.backoff.next();
      logger.info({ waitMs: wait }, 'snapshotter failed before; backing off');
      await clock.sleep(wait, signal).catch(() => undefined);
      if (signal.aborted) break;
    }
    deps.setHealthy(true);

    let snapshotter: Snapshotter;
    try {
      snapshotter = await deps.createSnapshotter();
    } catch (err) {
      logger.error({ err }, 'cannot create the snapshotter');
      deps.metrics.snapshotterFailure.labels(failureLabel(err)).inc();
      deps.backoff.start();
      continue;
    }

    let etcdRevision: number;
    try {
      etcdRevision = await snapshotter.etcdRevision();
    } catch (err) {
      deps.setHealthy(false);
      logger.warn({ err }, 'cannot read etcd revision; retrying');
      await clock.sleep(1000, signal).catch(() => undefined);
      continue;
    }
    const decision = decideFullSnapshotAtStartup({
      prevFull: snapshotter.chain.prevFull,
      prevFullSucceeded: snapshotter.chain.prevFullSucceeded,
      now: clock.now(),
      schedule: snapshotter.schedule,
      timeWindowHours,
      revisions: { etcd: etcdRevision, store: snapshotter.chain.prevSnapshot?.lastRevision ?? 0 },
    });
    let startWithFull = decision.required;
    /** The deltas reach etcd's revision of the catch-up: a full snapshot at start goes on with the same chain. */
    let chainCaughtUp = false;
    if (decision.required) logger.info({ reason: decision.reason, etcdRevision }, 'full snapshot required at start-up');
    // The chain goes on from the store's newest revision first, also when a full snapshot follows (upstream
    // takes the full at once: the revisions since the last delta would be in no delta, and no point in time
    // between them restorable). Not when etcd is behind the store: its history is another one.
    const continueChain = snapshotter.chain.prevFull !== undefined && decision.reason !== 'etcd-behind-store';
    if (continueChain) {
      try {
        if (await snapshotter.catchUpWithDeltas(signal)) {
          chainCaughtUp = true;
          if (!decision.required) deps.backoff.reset();
        } else startWithFull = true;
      } catch (err) {
        if (err instanceof LeadershipLost) {
          // Leadership moved on while catching up: the new leader continues the chain; a full snapshot taken
          // here would end it at this revision and leave the catch-up's revisions in no delta.
          logger.info({ reason: err.message }, 'snapshotter not started: another member leads now');
          await clock.sleep(1000, signal).catch(() => undefined);
          continue;
        }
        // A store or etcd hiccup: try again after the backoff, the chain still continuable; a full snapshot now
        // would end it above revisions no delta holds (and would need the same store anyway). Only a history
        // that is gone (compacted, or another one) or too long to catch up with leaves a gap.
        if (!CHAIN_ENDING_ERRORS.has(errorCode(err) ?? '')) {
          logger.warn({ err }, 'cannot back up the revisions since the last snapshot as deltas yet; retrying after the backoff');
          deps.backoff.start();
          continue;
        }
        deps.metrics.snapshotChainGaps.inc();
        logger.warn(
          { err, chainEnd: snapshotter.chain.prevSnapshot?.lastRevision, etcdRevision },
          'cannot back up the revisions since the last snapshot as deltas (history compacted, replaced, or too long to catch up with); taking a full snapshot: no point in time between them can be restored',
        );
        startWithFull = true;
      }
    }
    if (signal.aborted) break;

    const runAbort = new AbortController();
    // The reason tells the snapshotter whether to write its buffered events (shutdown) or not (leadership lost).
    const stopRun = () => runAbort.abort(signal.reason);
    signal.addEventListener('abort', stopRun, { once: true });
    const gc = deps.createGarbageCollector(snapshotter);
    const gcDone = gc.run(runAbort.signal);
    deps.onActiveSnapshotter(snapshotter);
    try {
      await snapshotter.run(runAbort.signal, startWithFull, { chainCaughtUp });
      deps.backoff.reset();
    } catch (err) {
      if (err instanceof LeadershipLost) {
        // The leadership watcher ends the term shortly; should this member lead again, a new snapshotter
        // continues from what the store holds then.
        logger.info({ reason: err.message }, 'snapshotter stopped: another member leads now');
        await clock.sleep(1000, signal).catch(() => undefined);
      } else {
        logger.error({ err }, 'snapshotter failed; restarting with backoff');
        deps.backoff.start();
      }
    } finally {
      deps.onActiveSnapshotter(undefined);
      signal.removeEventListener('abort', stopRun);
      runAbort.abort();
      await gcDone;
    }
  }
  deps.setHealthy(false);
}
