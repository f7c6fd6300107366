import type { EtcdClient } from '../etcd/index.js';

/**
 * The revision up to which the snapshotter's watch delivered etcd's events, and who waits for more: the stop
 * waits here (bounded) until the watch delivered every write etcd had acknowledged, so writes made right
 * before SIGTERM are in the last delta. Cancelling the watch at once would drop events etcd had not sent yet.
 */
export class WatchProgress {
  private watchedRevision = 0;
  private waiters: Array<{ revision: number; resolve: () => void }> = [];

  /** A watch opens after `revision`. */
  reset(revision: number): void {
    this.watchedRevision = revision;
  }

  /**
   * The watch handed over everything up to `revision`. The last revision taken, not a header's: a watch
   * catching up gets the store's current revision in every header while older events are still on their way
   * (and a pause leaves some for later).
   */
  reached(revision: number): void {
    if (revision <= this.watchedRevision) return;
    this.watchedRevision = revision;
    const still: typeof this.waiters = [];
    for (const w of this.waiters) {
      if (revision >= w.revision) w.resolve();
      else still.push(w);
    }
    this.waiters = still;
  }

  /**
   * Waits until the watch reached etcd's current revision, at most `boundMs`. Gives up when etcd does not
   * answer or the watch is slow; the result says how far it got, for the caller's log.
   */
  async catchUp(client: EtcdClient, boundMs: number): Promise<CatchUpResult> {
    let timer: NodeJS.Timeout | undefined;
    let target: number | undefined;
    let settled = false;
    let mine: { revision: number; resolve: () => void } | undefined;
    const bound = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), boundMs);
      timer.unref();
    });
    const caughtUp = (async () => {
      target = await client.currentRevision(boundMs).catch(() => undefined);
      if (target === undefined || settled) return false;
      if (target <= this.watchedRevision) return true;
      const wanted = target;
      await new Promise<void>((resolve) => {
        mine = { revision: wanted, resolve };
        this.waiters.push(mine);
      });
      return true;
    })();
    const reached = await Promise.race([caughtUp, bound]);
    settled = true;
    clearTimeout(timer);
    // Only this call's waiter: on-demand deltas and a stop may be waiting at the same time.
    this.waiters = this.waiters.filter((w) => w !== mine);
    return { reached, target, watched: this.watchedRevision };
  }
}

/** How far a catch-up got: `target` is etcd's revision at the call, undefined when etcd did not answer. */
export interface CatchUpResult {
  reached: boolean;
  target: number | undefined;
  watched: number;
}
