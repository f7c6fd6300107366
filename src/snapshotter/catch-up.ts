import type { Clock } from '../clock.js';
import type { DeltaEvent } from '../backup/delta-format.js';
import type { EtcdClient } from '../etcd/index.js';
import { asError } from '../errors.js';
import { PausableWatch } from './pausable-watch.js';

export interface CatchUpWatch {
  client: EtcdClient;
  clock: Clock;
  fromRevision: number;
  /** etcd's revision when the catch-up started: the watch runs until it delivered that far. */
  target: number;
  /** How long the watch may take to get there (the snapshot timeout). */
  timeoutMs: number;
  signal: AbortSignal;
  /** A response's header; returns the error to end the catch-up with (etcd left the backed-up history). */
  onHeader(revision: number, clusterId: string | undefined): Error | undefined;
  /** Buffers a response's events; a delta cut at the memory limit hands its save to `onCut`. Returns the newest revision buffered. */
  onEvents(events: DeltaEvent[], watch: PausableWatch, onCut: (save: Promise<unknown>) => void): number;
  /** The error when the watch did not get to `target` in time. */
  tooSlow(): Error;
  /** Closes the watch once it got there, failed, or the catch-up was aborted. */
  close(watch: PausableWatch): Promise<void>;
}

/**
 * The start-up catch-up's watch (upstream CollectEventsSincePrevSnapshot): follows etcd from `fromRevision`
 * until it delivered `target`, the signal aborts, or it fails. Resolves, once every delta cut on the way
 * settled, with the error that ended it; undefined when it got there or was aborted.
 */
export async function followUntilTarget(o: CatchUpWatch): Promise<Error | undefined> {
  let watchError: Error | undefined;
  let reached!: () => void;
  const done = new Promise<void>((resolve) => {
    reached = resolve;
  });
  const pending: Promise<unknown>[] = [];
  const onCut = (save: Promise<unknown>): void => {
    pending.push(
      save.catch((err: unknown) => {
        watchError ??= asError(err);
        reached();
      }),
    );
  };
  const watch = await PausableWatch.open(o.client, o.fromRevision, {
    onHeader: (revision, clusterId) => {
      const err = o.onHeader(revision, clusterId);
      if (err) {
        watchError = err;
        reached();
      }
    },
    onEvents: (events, headerRevision, w) => {
      const buffered = o.onEvents(events, w, onCut);
      if (headerRevision >= o.target || buffered >= o.target) reached();
    },
    onError: (err) => {
      watchError = err;
      reached();
    },
  });
  const abort = () => reached();
  o.signal.addEventListener('abort', abort, { once: true });
  // A watch that never reaches the target (a silent client-side failure) must not block start-up forever.
  let timedOut = false;
  const guard = o.clock.setTimeout(() => {
    timedOut = true;
    reached();
  }, o.timeoutMs);
  try {
    await done;
  } finally {
    o.clock.clearTimeout(guard);
    o.signal.removeEventListener('abort', abort);
    await o.close(watch);
  }
  if (timedOut && !watchError) watchError = o.tooSlow();
  await Promise.all(pending);
  return watchError;
}
