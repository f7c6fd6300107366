import { asError } from '../errors.js';
import type { DeltaEvent } from '../backup/delta-format.js';
import type { AllKeysWatch, EtcdClient, WatchHandlers } from '../etcd/index.js';

/** WatchHandlers, with the watch handed to onEvents so that a handler can pause it while it takes events. */
export interface PausableWatchHandlers {
  onEvents(events: DeltaEvent[], headerRevision: number, watch: PausableWatch): void;
  onError(err: Error): void;
  onHeader?(revision: number, clusterId: string | undefined): void;
}

/**
 * A watch of every key that can stop taking events and go on later from a given revision: the snapshotter's
 * back-pressure. etcd keeps the history until it compacts it, so instead of buffering what the watch
 * delivers while a delta is being saved, the watch is cancelled and opened again after the last revision
 * taken. Built on EtcdClient.watchAllKeys alone (cancel, then watch again from a revision), so any client
 * behind that interface can be paused.
 *
 * Each underlying watch gets handlers of its own generation: once paused or closed, nothing an older watch
 * still delivers (etcd sends events until it confirms the cancel) reaches the caller's handlers. A failure to
 * open the watch again (etcd compacted the revision, etcd unreachable) goes to `onError`, as any other failure
 * of the watch.
 */
export class PausableWatch {
  private inner: AllKeysWatch | undefined;
  private state: 'open' | 'paused' | 'closed' = 'open';
  /** Incremented by every pause, resume and close: handlers of an older generation deliver nothing. */
  private generation = 0;
  /** The cancels of earlier watches; a new one opens only after they finished. */
  private closing: Promise<void> = Promise.resolve();
  private resumeFrom = 0;

  private constructor(
    private readonly client: EtcdClient,
    private readonly handlers: PausableWatchHandlers,
  ) {}

  /** Opens the watch from `startRevision`; rejects as watchAllKeys does (CompactedRevisionError among others). */
  static async open(client: EtcdClient, startRevision: number, handlers: PausableWatchHandlers): Promise<PausableWatch> {
    const w = new PausableWatch(client, handlers);
    w.inner = await client.watchAllKeys(startRevision, w.handlersOf(w.generation));
    return w;
  }

  get paused(): boolean {
    return this.state === 'paused';
  }

  /**
   * Stops delivering at once (also the rest of a response being delivered now); the stream is cancelled in
   * the background. `nextRevision` is the first revision the caller has not taken: resume() starts there.
   */
  pause(nextRevision: number): void {
    if (this.state !== 'open') return;
    this.state = 'paused';
    this.resumeFrom = nextRevision;
    this.generation += 1;
    this.cancelInner();
  }

  /** Watches again from the revision given to pause(); a no-op unless paused. */
  async resume(): Promise<void> {
    if (this.state !== 'paused') return;
    this.state = 'open';
    const generation = ++this.generation;
    await this.closing;
    if (generation !== this.generation) return;
    let watch: AllKeysWatch;
    try {
      watch = await this.client.watchAllKeys(this.resumeFrom, this.handlersOf(generation));
    } catch (err) {
      if (generation === this.generation) this.handlers.onError(asError(err));
      return;
    }
    if (generation === this.generation) {
      this.inner = watch;
    } else {
      // Paused or closed while it was opening.
      this.closing = this.closing.then(() => watch.close()).catch(() => undefined);
    }
  }

  /** Ends the watch; nothing is delivered after it returns. */
  async close(): Promise<void> {
    this.state = 'closed';
    this.generation += 1;
    this.cancelInner();
    await this.closing;
  }

  private cancelInner(): void {
    const w = this.inner;
    this.inner = undefined;
    if (w) this.closing = this.closing.then(() => w.close()).catch(() => undefined);
  }

  private handlersOf(generation: number): WatchHandlers {
    const live = (): boolean => generation === this.generation && this.state === 'open';
    return {
      onEvents: (events, headerRevision) => {
        if (live()) this.handlers.onEvents(events, headerRevision, this);
      },
      onError: (err) => {
        if (live()) this.handlers.onError(err);
      },
      onHeader: (revision, clusterId) => {
        if (live()) this.handlers.onHeader?.(revision, clusterId);
      },
    };
  }
}
