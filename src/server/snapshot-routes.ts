/**
 * The snapshot routes (upstream `pkg/server/httpAPI.go`): full and delta snapshots on demand, the latest snapshot
 * set, and (ours) `/snapshot/verify`. A follower forwards the snapshot requests to the leading sidecar.
 */
import { latestSet, snapshotToJSON, type Snapshot } from '@etcdbrctl/snapstore';
import type { Exchange, Routes } from './http-router.js';
import { delegateToLeader, type DelegationOptions } from './proxy.js';
import { errorMessage, parseGoBool, sendError, sendJson } from './respond.js';
import type { HttpServerDeps, SnapshotterControl } from './types.js';

export function registerSnapshotRoutes(
  routes: Routes,
  deps: Pick<HttpServerDeps, 'snapshots' | 'store' | 'scrubber' | 'logger' | 'metrics'>,
  delegation: DelegationOptions,
): void {
  const { logger, metrics } = deps;
  /**
   * Upstream's gate for every snapshot route: this sidecar's snapshotter if it runs; otherwise forward to
   * the leader when a store is configured (a follower; 503 when it cannot, proxy.ts), else 405 (no store).
   */
  const withSnapshotter = async (x: Exchange, what: string, run: (ssr: SnapshotterControl) => Promise<void>): Promise<void> => {
    const ssr = deps.snapshots();
    if (ssr !== undefined) return run(ssr);
    if (deps.store() !== undefined) return delegateToLeader(x, delegation);
    const message = `cannot serve ${what}: no snapshotter runs and no storage provider is configured`;
    logger.warn(message);
    sendError(x.res, 405, message);
  };

  routes.all('/snapshot/full', async (x) => {
    const raw = x.query('final');
    // Go treats an empty value as absent.
    const isFinal = raw === '' ? false : parseGoBool(raw);
    if (isFinal === undefined) {
      sendError(
        x.res,
        400,
        `invalid value ${JSON.stringify(raw)} for query parameter "final": want a boolean (1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)`,
      );
      return;
    }
    return withSnapshotter(x, 'an out-of-schedule full snapshot', async (ssr) => {
      let snap: Snapshot;
      try {
        snap = await ssr.triggerFullSnapshot(isFinal);
      } catch (err) {
        logger.warn({ err }, 'skipped triggering an out-of-schedule full snapshot');
        sendError(x.res, 500, `out-of-schedule full snapshot failed: ${errorMessage(err)}`);
        return;
      }
      sendJson(x.res, 200, snapshotToJSON(snap));
    });
  });

  routes.all('/snapshot/delta', async (x) =>
    withSnapshotter(x, 'an out-of-schedule delta snapshot', async (ssr) => {
      let snap: Snapshot | undefined;
      try {
        snap = await ssr.triggerDeltaSnapshot();
      } catch (err) {
        logger.warn({ err }, 'skipped triggering an out-of-schedule delta snapshot');
        sendError(x.res, 500, `out-of-schedule delta snapshot failed: ${errorMessage(err)}`);
        return;
      }
      // No events: no object was written, and Go marshals the nil snapshot as `null`.
      sendJson(x.res, 200, snap === undefined ? null : snapshotToJSON(snap));
    }),
  );

  // Ours: scrubs the newest chain as `etcdbrctl verify` does and answers with its report (200 whether or not
  // the backups restore: `restorable` says; 500 when the store cannot be read). Any member with a store can
  // verify; a request during a scrub gets that scrub's report.
  routes.all('/snapshot/verify', async (x) => {
    const scrubber = deps.scrubber;
    if (scrubber === undefined) return sendError(x.res, 405, 'cannot verify backups: no storage provider is configured');
    let report;
    try {
      report = await scrubber.scrubNow();
    } catch (err) {
      logger.warn({ err }, 'backup verification could not read the store');
      sendError(x.res, 500, `backup verification failed: ${errorMessage(err)}`);
      return;
    }
    sendJson(x.res, 200, report);
  });

  routes.all('/snapshot/latest', async (x) =>
    withSnapshotter(x, 'the latest snapshot metadata', async () => {
      const store = deps.store();
      if (store === undefined) return sendError(x.res, 500, 'cannot list snapshots: no storage provider is configured');
      let list: Snapshot[];
      try {
        list = await store.list();
      } catch (err) {
        logger.warn({ err }, 'unable to fetch the latest snapshots from the store');
        sendError(x.res, 500, `listing snapshots failed: ${errorMessage(err)}`);
        return;
      }
      const { full, deltas } = latestSet(list);
      // Upstream's GetLatestFullSnapshotAndDeltaSnapList updates these two gauges as a side effect.
      metrics.snapstoreLatestDeltasTotal.set(deltas.length);
      const first = deltas[0];
      const last = deltas[deltas.length - 1];
      metrics.snapstoreLatestDeltasRevisionsTotal.set(
        first !== undefined && last !== undefined ? last.lastRevision - first.startRevision : 0,
      );
      sendJson(x.res, 200, {
        fullSnapshot: full === undefined ? null : snapshotToJSON(full),
        // Go marshals an empty (nil) slice as null.
        deltaSnapshots: deltas.length === 0 ? null : deltas.map(snapshotToJSON),
      });
    }),
  );
}
