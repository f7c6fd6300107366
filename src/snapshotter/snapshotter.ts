import { asError, CodedError, EtcdbrError } from '../errors.js';
import { creationTimeAfter, latestSet, type CompressionPolicy, type Logger, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { DeltaEvent } from '../backup/delta-format.js';
import type { EtcdClient } from '../etcd/etcd-client.js';
import { failureLabel, type Metrics } from '../metrics.js';
import { DeltaBuffer, releaseDeltaPayload, type DeltaPayload } from './delta-buffer.js';
import { saveSizedDeltaSnapshot } from './delta-snapshot.js';
import { PausableWatch } from './pausable-watch.js';
import { takeSizedFullSnapshot, type SavedSizes } from './full-snapshot.js';
import { fullSnapshotToReuse } from './full-skip.js';
import { isZeroTime, type CronSchedule } from '../config/schedule.js';
import { advanceTimeline, continuesTimeline, type TimelinePoint } from './timeline.js';

export interface SnapshotterConfig {
  schedule: CronSchedule;
  /** < 1000 ms disables delta snapshots (upstream). */
  deltaSnapshotPeriodMs: number;
  deltaSnapshotMemoryLimit: number;
  snapshotTimeoutMs: number;
  connectionTimeoutMs: number;
  compression: CompressionPolicy | undefined;
  /** How long SIGTERM may wait for the last delta (ours; upstream drops buffered events). */
  finalDeltaTimeoutMs: number;
}

export interface SnapshotterDeps {
  client: EtcdClient;
  /** The store, re-created by the caller when credentials rotate. */
  store: () => Promise<SnapStore>;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  /** Called after every stored snapshot (leases, status). Errors are logged, never fatal. */
  onSnapshot?: (snap: Snapshot, info: StoredSnapshotInfo) => Promise<void> | void;
  /**
   * Asked right before a delta is written (a multi-member cluster): false when another member leads now. The
   * delta is then not written and the run ends with LeadershipLost: the new leader stores those events from
   * the store's newest revision, and a write of ours landing after it read the store would only overlap it.
   * Undefined (no answer) counts as leading: the events are written, as upstream would.
   */
  stillLeads?: () => Promise<boolean | undefined>;
  /**
   * Called when a delta period ends without a stored delta: a delta timer tick or an on-demand delta with
   * nothing buffered, and the start-up catch-up with nothing to catch up. Upstream renews the delta snapshot
   * lease on every delta tick, events or not (DeltaSnapshotCaseLeaseUpdate), and etcd-druid's BackupReady
   * condition wants that lease renewed within two delta periods: an idle etcd must still renew it. A stored
   * delta goes to `onSnapshot` instead. Runs beside the snapshot queue (an idle period does not hold it while
   * a slow API server answers); `signal` aborts when the run ends. At most one call runs at a time: a period
   * that ends while the previous call still runs is skipped. Errors are logged, never fatal.
   */
  onIdleDeltaPeriod?: (signal: AbortSignal) => Promise<void> | void;
}

/** What the snapshotter knows about a snapshot it just stored, besides its name. */
export interface StoredSnapshotInfo {
  /** Size of the uncompressed snapshot file (full: database ‖ sha256; delta: JSON ‖ sha256). */
  uncompressedBytes: number;
  /** The full snapshot the chain builds on after this one (the snapshot itself for a full). */
  baseFull: Snapshot | undefined;
}

/** The chain state that survives loop restarts: what the store holds, newest first. */
export interface ChainState {
  /** Last stored snapshot (delta or full); a dummy full at revision 0 when the store is empty. */
  prevSnapshot: Snapshot | undefined;
  prevFull: Snapshot | undefined;
  prevDeltas: Snapshot[];
  prevFullSucceeded: boolean;
}

/** A delta taken from the buffer, with the epoch it was taken in (see Snapshotter.epoch). */
interface TakenDelta {
  payload: DeltaPayload;
  epoch: number;
}

/** How long a stop waits for the watch to deliver the writes etcd acknowledged before it (at most). */
const STOP_CATCH_UP_MS = 3_000;

export class SnapshotterStoppedError extends CodedError {
  readonly code = 'E_SNAPSHOTTER_STOPPED';
  override readonly name = 'SnapshotterStoppedError';
}

/**
 * Abort reason for `run` when this sidecar stops leading while the process goes on. The next leader's
 * sidecar (often another process) catches up from the store's last snapshot; writing the buffered events
 * now could land after it read the store, and two deltas would start at the same revision. So the run only
 * waits for writes already under way and leaves the buffered events to the next leader (as upstream does).
 */
export class LeadershipLost extends CodedError {
  readonly code = 'E_LEADERSHIP_LOST';
  override readonly name = 'LeadershipLost';
}

/** etcd under the watch is no longer the history the chain records (restored to an older revision, replaced). */
export class TimelineChangedError extends CodedError {
  override readonly name = 'TimelineChangedError';
  readonly code = 'E_TIMELINE_CHANGED';
}

/** The catch-up's watch did not reach etcd's revision within the snapshot timeout (too much history to replay). */
export class CatchUpTooSlowError extends CodedError {
  override readonly name = 'CatchUpTooSlowError';
  readonly code = 'E_CATCH_UP_TOO_SLOW';
}

/**
 * Full snapshots on a cron schedule and on demand, delta snapshots from a watch of every key: every
 * `--delta-snapshot-period` and whenever the buffered events reach `--delta-snapshot-memory-limit`.
 * All store writes run one at a time through `serial`, in the order they were asked for, so the chain
 * stays gapless: each delta starts at the previous snapshot's last revision + 1.
 *
 * Back-pressure: the events buffered plus the deltas taken from the buffer and not stored yet count against
 * the memory limit together. When they reach it while a delta is still being saved, the watch is paused
 * (cancelled) at a revision boundary and opened again from the next revision once the save is done, so etcd
 * holds the history meanwhile and the sidecar holds at most the limit plus one revision's events (upstream
 * gets the same from saving the delta inside its watch loop).
 */
export class Snapshotter {
  readonly chain: ChainState;
  private readonly buffer = new DeltaBuffer();
  private watch: PausableWatch | undefined;
  /** Bytes of delta payloads taken from the buffer and not stored yet (queued or being saved). */
  private savingBytes = 0;
  /** The most the buffer and the deltas being saved held together (JSON bytes), for tests and diagnostics. */
  private deltaBytesPeak = 0;
  /** The last revision the current watch handed over: buffered, saved, or already in the chain. */
  private takenRevision = 0;
  /** The watch paused because the delta memory is full; resumed when a save frees room. */
  private pausedForMemory: PausableWatch | undefined;
  /**
   * Incremented when taken events stop belonging to the chain: a full snapshot covers them, or a delta
   * before them failed (saving them would leave a gap). Payloads of an older epoch are not saved.
   */
  private epoch = 0;
  /** Set when a delta save failed: events are ignored until a watch is opened again from the store's chain. */
  private deltaSaveFailed = false;
  private queue: Promise<unknown> = Promise.resolve();
  private fatal: ((err: Error) => void) | undefined;
  private fullTimer: ReturnType<Clock['setTimeout']> | undefined;
  private deltaTimer: ReturnType<Clock['setTimeout']> | undefined;
  private running = false;
  /** The newest revision and the cluster ID etcd reported under the current watch. */
  private timeline: TimelinePoint | undefined;
  /** Set when etcd left the chain's history; events are ignored until a full snapshot starts a new chain. */
  private timelineChanged = false;
  /** The `onIdleDeltaPeriod` call in flight, if any, and how to abort it. */
  private idleCall: { abort: AbortController; done: Promise<void> } | undefined;

  private constructor(
    private readonly config: SnapshotterConfig,
    private readonly deps: SnapshotterDeps,
    chain: ChainState,
  ) {
    this.chain = chain;
    this.chainEnd = chain.prevSnapshot?.lastRevision ?? 0;
  }

  /** Reads the latest chain from the store (upstream NewSnapshotter). */
  static async create(config: SnapshotterConfig, deps: SnapshotterDeps): Promise<Snapshotter> {
    const store = await deps.store();
    const { full, deltas } = latestSet(await store.list());
    const last = deltas.at(-1) ?? full;
    const s = new Snapshotter(config, deps, {
      prevSnapshot: last,
      prevFull: full,
      prevDeltas: deltas,
      prevFullSucceeded: true,
    });
    s.updateLatestMetrics();
    // After a restart the size gauge starts from what the store lists (stored bytes; encrypted ones are
    // left out, as their listed size includes age's overhead that the snapshots taken from now on do not count).
    for (const snap of [full, deltas.at(-1)]) {
      if (snap?.sizeBytes !== undefined && snap.isEncrypted !== true) deps.metrics.snapshotSizeBytes.labels(snap.kind).set(snap.sizeBytes);
    }
    return s;
  }

  get schedule(): CronSchedule {
    return this.config.schedule;
  }

  get deltasEnabled(): boolean {
    return this.config.deltaSnapshotPeriodMs >= 1000;
  }

  get active(): boolean {
    return this.running;
  }

  /** The newest revision in the delta buffer, 0 when it is empty (tests and diagnostics). */
  get bufferedRevision(): number {
    return this.buffer.isEmpty ? 0 : this.buffer.lastRevision;
  }

  /**
   * The most delta JSON the snapshotter held at once since it was created: the buffer plus the deltas taken
   * from it and not stored yet. Back-pressure keeps it within the memory limit plus one revision's events.
   */
  get deltaMemoryPeakBytes(): number {
    return this.deltaBytesPeak;
  }

  /** etcd's current store revision. */
  etcdRevision(): Promise<number> {
    return this.deps.client.currentRevision(this.config.connectionTimeoutMs);
  }

  /**
   * The last revision the delta chain covers: the next delta starts after it, and the watch hands over the
   * events after it. Set from the store's newest snapshot when the snapshotter is created and after a full
   * snapshot that starts a new chain; a delta moves it on. A full snapshot taken while the watch runs does not:
   * the deltas go on across it (the first one after it may start at or below its revision), so every revision
   * written while the full was being taken is in a delta too, and every point in time stays restorable.
   */
  private chainEnd: number;

  /** Runs `op` after every write queued before it; the result is the op's. */
  private serial<T>(op: () => Promise<T>): Promise<T> {
    const run = this.queue.then(op, op);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * Takes a full snapshot now. With `isFinal` and a final full already at the current revision, returns
   * that one instead of writing another (fullSnapshotToReuse: the one skip rule).
   */
  triggerFullSnapshot(isFinal: boolean): Promise<Snapshot> {
    if (!this.running) return Promise.reject(new SnapshotterStoppedError('snapshotter is not active'));
    return this.serial(async () => {
      try {
        const snap = await this.fullSnapshot(isFinal);
        this.armFullTimer();
        return snap;
      } catch (err) {
        this.fail(err);
        throw err;
      }
    });
  }

  /** Writes the buffered events as a delta now; undefined when there were none. */
  triggerDeltaSnapshot(): Promise<Snapshot | undefined> {
    if (!this.running) return Promise.reject(new SnapshotterStoppedError('snapshotter is not active'));
    if (!this.deltasEnabled) {
      return Promise.reject(
        new EtcdbrError(
          'E_INVALID_INPUT',
          `found delta snapshot interval ${this.config.deltaSnapshotPeriodMs / 1000}s less than 1 second. Delta snapshotting is disabled.`,
        ),
      );
    }
    return this.serial(async () => {
      try {
        const snap = await this.saveBufferedDelta();
        this.armDeltaTimer();
        // Upstream renews the delta lease after an on-demand delta too, whether one was stored or not.
        if (!snap) this.idleDeltaPeriod();
        return snap;
      } catch (err) {
        this.fail(err);
        throw err;
      }
    });
  }

  /**
   * Runs until `signal` aborts (resolves) or a snapshot fails (rejects; the caller restarts it with
   * backoff, as upstream). `startWithFullSnapshot`: take a full snapshot first; otherwise catch up
   * from the previous snapshot with deltas.
   */
  async run(signal: AbortSignal, startWithFullSnapshot: boolean): Promise<void> {
    if (this.running) throw new EtcdbrError('E_CONFLICT', 'snapshotter is already running');
    this.running = true;
    const failed = new Promise<never>((_, reject) => {
      this.fatal = (err) => reject(err);
    });
    failed.catch(() => undefined);
    const stopped = new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      signal.addEventListener('abort', () => resolve(), { once: true });
    });
    try {
      try {
        if (startWithFullSnapshot) {
          await this.serial(() => this.fullSnapshot(false));
        } else if (this.deltasEnabled && !this.watch) {
          await this.serial(() => this.openWatch());
        }
      } catch (err) {
        // A failed start is a failed run like any later one: it counts in etcdbr_snapshotter_failure.
        this.fail(err);
        throw err;
      }
      this.armFullTimer();
      this.armDeltaTimer();
      await Promise.race([stopped, failed]);
      if (signal.aborted) await this.flushOnStop(!(signal.reason instanceof LeadershipLost));
    } finally {
      this.running = false;
      this.fatal = undefined;
      this.clearTimers();
      await this.closeWatch();
      this.buffer.clear();
      await this.endIdleCall();
    }
  }

  /**
   * Writes every event since the previous snapshot as deltas, up to the current revision, without
   * starting the loop (upstream CollectEventsSincePrevSnapshot + TakeDeltaSnapshot at start-up).
   * Returns false when nothing could be collected (then the caller takes a full snapshot).
   */
  async catchUpWithDeltas(signal: AbortSignal): Promise<boolean> {
    if (!this.deltasEnabled) return false;
    const target = await this.deps.client.currentRevision(this.config.connectionTimeoutMs);
    if (target <= this.chainEnd) {
      // Nothing to catch up: upstream renews the delta lease after its start-up delta, taken or not.
      this.idleDeltaPeriod(signal);
      return true;
    }
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
    this.takenRevision = this.chainEnd;
    this.deltaSaveFailed = false;
    const watch = await PausableWatch.open(this.deps.client, this.chainEnd + 1, {
      onHeader: (revision, clusterId) => {
        this.observeEtcd({ revision, clusterId });
        if (this.timelineChanged) {
          watchError = new TimelineChangedError('etcd left the backed-up history while catching up with deltas');
          reached();
        }
      },
      onEvents: (events, headerRevision, w) => {
        this.appendEvents(events, w, onCut);
        if (headerRevision >= target || this.buffer.lastRevision >= target) reached();
      },
      onError: (err) => {
        watchError = err;
        reached();
      },
    });
    const abort = () => reached();
    signal.addEventListener('abort', abort, { once: true });
    // A watch that never reaches the target (a silent client-side failure) must not block start-up forever.
    let timedOut = false;
    const guard = this.deps.clock.setTimeout(() => {
      timedOut = true;
      reached();
    }, this.config.snapshotTimeoutMs);
    try {
      await done;
    } finally {
      this.deps.clock.clearTimeout(guard);
      signal.removeEventListener('abort', abort);
      if (this.pausedForMemory === watch) this.pausedForMemory = undefined;
      await watch.close();
    }
    if (timedOut && !watchError) {
      watchError = new CatchUpTooSlowError(`watch from revision ${this.chainEnd + 1} did not reach revision ${target} in time`);
    }
    await Promise.all(pending);
    if (watchError) {
      this.buffer.clear();
      throw watchError;
    }
    if (signal.aborted) return false;
    const saved = await this.serial(() => this.saveBufferedDelta());
    if (!saved) this.idleDeltaPeriod(signal);
    return true;
  }

  /**
   * Buffers one watch response's events. The buffer is cut at the memory limit only between revisions: a
   * transaction's events share one revision, and a delta that ended inside one would lose the rest of it
   * (replay skips events at or below the revision it has applied). etcd never splits a revision across watch
   * responses, so the end of a response is a revision boundary too. At a boundary the watch is also paused
   * when the delta memory is full (holdBack); the events after it come again when the watch resumes.
   */
  private appendEvents(events: readonly DeltaEvent[], watch: PausableWatch, onCut?: (save: Promise<unknown>) => void): void {
    let appended = false;
    for (const ev of events) {
      if (this.timelineChanged || this.deltaSaveFailed) return this.noteAppended(appended);
      if (ev.modRevision > this.takenRevision) {
        this.cutAtLimit(onCut);
        if (this.holdBack(watch)) return this.noteAppended(appended);
        this.takenRevision = ev.modRevision;
      }
      if (ev.modRevision <= this.chainEnd) continue;
      this.buffer.append(ev);
      this.deltaBytesPeak = Math.max(this.deltaBytesPeak, this.buffer.size + this.savingBytes);
      appended = true;
    }
    this.noteAppended(appended);
    this.cutAtLimit(onCut);
    this.holdBack(watch);
  }

  /** Once per watch response, not per event: a labelled gauge's set costs a label lookup each time. */
  private noteAppended(appended: boolean): void {
    if (appended) this.deps.metrics.snapshotRequired.labels('Incr').set(1);
  }

  /** The buffered events and the deltas being saved reach the memory limit: taking more would exceed it. */
  private get deltaMemoryFull(): boolean {
    return this.savingBytes > 0 && this.buffer.size + this.savingBytes >= this.config.deltaSnapshotMemoryLimit;
  }

  /** Pauses `watch` after the last revision taken when the delta memory is full; true when it did. */
  private holdBack(watch: PausableWatch): boolean {
    if (this.timelineChanged || this.deltaSaveFailed || !this.deltaMemoryFull) return false;
    if (!watch.paused) {
      this.deps.logger.debug(
        { bufferedBytes: this.buffer.size, savingBytes: this.savingBytes, nextRevision: this.takenRevision + 1 },
        'Delta memory limit reached while a delta is being saved; pausing the watch until it is stored',
      );
      watch.pause(this.takenRevision + 1);
      this.pausedForMemory = watch;
    }
    return true;
  }

  /** Called whenever a taken delta is stored or dropped: the paused watch goes on when there is room again. */
  private resumeIfRoom(): void {
    const w = this.pausedForMemory;
    if (!w || this.deltaMemoryFull) return;
    this.pausedForMemory = undefined;
    void w.resume();
  }

  /** Saves the buffer as a delta when it holds the memory limit or more; call only at a revision boundary. */
  private cutAtLimit(onCut?: (save: Promise<unknown>) => void): void {
    if (this.timelineChanged || this.deltaSaveFailed || this.buffer.size < this.config.deltaSnapshotMemoryLimit) return;
    const taken = this.takeBuffer()!;
    this.deps.logger.info(
      { bytes: taken.payload.byteLength - 32, limit: this.config.deltaSnapshotMemoryLimit },
      'Delta events memory crossed the memory limit; taking a delta snapshot',
    );
    const save = this.serial(() => this.saveTaken(taken));
    save.then(
      () => this.armDeltaTimer(),
      (err: unknown) => this.fail(err),
    );
    onCut?.(save);
  }

  /** Empties the buffer into a payload that counts against the memory limit until it is stored. */
  private takeBuffer(): TakenDelta | undefined {
    const payload = this.buffer.take();
    if (!payload) return undefined;
    this.savingBytes += payload.byteLength;
    return { payload, epoch: this.epoch };
  }

  /** Stores a taken payload unless its events no longer belong to the chain; frees its bytes either way. */
  private async saveTaken(taken: TakenDelta): Promise<Snapshot | undefined> {
    try {
      if (taken.epoch !== this.epoch) {
        this.deps.logger.info(
          { revisions: `${taken.payload.firstRevision}-${taken.payload.lastRevision}` },
          'Not saving delta events that a full snapshot or a failed delta before them superseded',
        );
        releaseDeltaPayload(taken.payload);
        return undefined;
      }
      if ((await this.deps.stillLeads?.()) === false) {
        throw new LeadershipLost(
          `another member leads now: not writing the delta of revisions ${taken.payload.firstRevision}-${taken.payload.lastRevision} (the new leader stores them)`,
        );
      }
      return await this.saveDelta(taken.payload);
    } catch (err) {
      // The chain now ends before these events: nothing taken after them may be stored (it would leave a gap).
      // The run fails, and the next one catches up from the store.
      this.epoch += 1;
      this.deltaSaveFailed = true;
      this.buffer.clear();
      throw err;
    } finally {
      this.savingBytes -= taken.payload.byteLength;
      this.resumeIfRoom();
    }
  }

  private async openWatch(): Promise<void> {
    await this.closeWatch();
    this.watchedRevision = this.chainEnd;
    this.takenRevision = this.chainEnd;
    this.deltaSaveFailed = false;
    this.watch = await PausableWatch.open(this.deps.client, this.chainEnd + 1, {
      onHeader: (revision, clusterId) => this.observeEtcd({ revision, clusterId }),
      onEvents: (events, _header, watch) => {
        this.appendEvents(events, watch);
        // The last revision taken, not the header's: a watch catching up gets the store's current revision
        // in every header while older events are still on their way (and a pause leaves some for later).
        this.watchReached(this.takenRevision);
      },
      onError: (err) => this.fail(err),
    });
  }

  /**
   * Follows what etcd reports under the watch. When it leaves the chain's history (its revision goes
   * backwards, its cluster ID changes), the chain is not continued: the buffered events belong to a history
   * etcd no longer has, so they are dropped, and a full snapshot starts a new chain from what etcd holds now.
   */
  /** The revision up to which the current watch delivered etcd's events, and who waits for more. */
  private watchedRevision = 0;
  private watchWaiters: Array<{ revision: number; resolve: () => void }> = [];

  private watchReached(revision: number): void {
    if (revision <= this.watchedRevision) return;
    this.watchedRevision = revision;
    const still: typeof this.watchWaiters = [];
    for (const w of this.watchWaiters) {
      if (revision >= w.revision) w.resolve();
      else still.push(w);
    }
    this.watchWaiters = still;
  }

  /**
   * On shutdown, before the watch closes: waits (bounded) until it has delivered every write etcd had
   * acknowledged, so writes made right before SIGTERM are in the last delta. Cancelling the watch at once
   * would drop events etcd had not sent yet. Gives up quietly when etcd does not answer or is slow.
   */
  private async catchUpBeforeStop(boundMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, boundMs);
      timer.unref();
    });
    const caughtUp = (async () => {
      const target = await this.deps.client.currentRevision(boundMs).catch(() => 0);
      if (target <= this.watchedRevision) return;
      await new Promise<void>((resolve) => this.watchWaiters.push({ revision: target, resolve }));
    })();
    await Promise.race([caughtUp, bound]);
    clearTimeout(timer);
    this.watchWaiters = [];
  }

  private observeEtcd(point: TimelinePoint): void {
    if (this.timelineChanged) return;
    const verdict = continuesTimeline(this.timeline, point);
    if (verdict.continues) {
      this.timeline = advanceTimeline(this.timeline, point);
      return;
    }
    this.timelineChanged = true;
    this.deps.logger.warn(
      {
        reason: verdict.reason,
        ...(this.buffer.isEmpty ? {} : { droppedRevisions: `${this.buffer.firstRevision}-${this.buffer.lastRevision}` }),
        previousSnapshot: this.chain.prevSnapshot?.snapName,
      },
      'etcd left the backed-up history: not continuing the delta chain; taking a full snapshot to start a new one',
    );
    this.buffer.clear();
    this.epoch += 1;
    if (!this.running) return;
    void this.serial(() => this.fullSnapshot(false)).then(
      () => this.armFullTimer(),
      (err: unknown) => this.fail(err),
    );
  }

  private async closeWatch(): Promise<void> {
    const w = this.watch;
    this.watch = undefined;
    if (w && this.pausedForMemory === w) this.pausedForMemory = undefined;
    if (w) await w.close();
  }

  private async fullSnapshot(isFinal: boolean): Promise<Snapshot> {
    if (isFinal) {
      // Only a final full can be a duplicate (fullSnapshotToReuse): read the revision only then.
      const rev = await this.deps.client.currentRevision(this.config.connectionTimeoutMs);
      const reuse = fullSnapshotToReuse(this.chain.prevSnapshot, isFinal, rev);
      if (reuse) {
        this.deps.logger.info(
          { snapshot: reuse.snapName, revision: rev },
          'There are no new updates since previous final full snapshot, skipping new final full snapshot.',
        );
        return reuse;
      }
    }
    // The buffered events go into a delta first, so the deltas reach as far as the watch had delivered: a point
    // in time between the last delta and the full stays restorable (dropped, they were only in the full's end
    // state). A save that fails leaves them to the full; one refused because another member leads ends the run.
    if (this.watch && !this.buffer.isEmpty && !this.timelineChanged && !this.deltaSaveFailed) {
      try {
        await this.saveBufferedDelta();
      } catch (err) {
        if (err instanceof LeadershipLost) throw err;
        this.deps.logger.warn({ err }, 'could not store the buffered events as a delta before the full snapshot; only the full holds them');
      }
    }
    // A healthy watch goes on while the full is taken, and the deltas go on across it: the revisions written
    // between the last delta and the full's own revision land in the next delta (a restore from this full skips
    // what it already holds, as upstream's applyFirstDeltaSnapshot does), so a point in time between them stays
    // restorable from the older full. Until issue 38 the watch was closed here and opened again after the full,
    // and those revisions were in no delta (a soak found 8775-8776 unreachable). Without a healthy watch (the
    // first full of a run, etcd left the history, a delta failed) the full starts a new chain after itself.
    const continuesChain = this.watch !== undefined && !this.timelineChanged && !this.deltaSaveFailed;
    if (!continuesChain) {
      await this.closeWatch();
      this.buffer.clear();
      // Deltas taken before this full and still queued hold events of a history the new chain does not continue.
      this.epoch += 1;
      this.timeline = undefined;
      this.timelineChanged = false;
    }
    const store = await this.deps.store();
    const prev = this.chain.prevSnapshot;
    const started = this.deps.clock.now().getTime();
    let snap: Snapshot;
    let sizes: SavedSizes;
    try {
      ({ snapshot: snap, ...sizes } = await takeSizedFullSnapshot(
        {
          client: this.deps.client,
          store,
          compression: this.config.compression,
          // After the previous snapshot when it ends at the same revision (a full right after a delta, as a final
          // full after the last delta), also in upstream's order, which compares only the creation second.
          now: (revision) => creationTimeAfter(this.deps.clock.now(), prev ? [prev] : [], revision),
          logger: this.deps.logger,
        },
        { isFinal, snapshotTimeoutMs: this.config.snapshotTimeoutMs, connectionTimeoutMs: this.config.connectionTimeoutMs },
      ));
    } catch (err) {
      this.chain.prevFullSucceeded = false;
      this.deps.metrics.snapshotDurationSeconds.labels('Full', 'false').observe((this.deps.clock.now().getTime() - started) / 1000);
      throw err;
    }
    this.deps.metrics.snapshotDurationSeconds.labels('Full', 'true').observe((this.deps.clock.now().getTime() - started) / 1000);
    this.chain.prevSnapshot = snap;
    this.chain.prevFull = snap;
    this.chain.prevDeltas = [];
    this.chain.prevFullSucceeded = true;
    if (!continuesChain) this.chainEnd = snap.lastRevision;
    this.deps.metrics.snapshotRequired.labels('Full').set(0);
    this.deps.metrics.snapshotSizeBytes.labels('Full').set(sizes.storedBytes);
    this.updateLatestMetrics();
    await this.notify(snap, sizes.payloadBytes);
    if (this.deltasEnabled && this.running && !this.watch) await this.openWatch();
    return snap;
  }

  private async saveBufferedDelta(): Promise<Snapshot | undefined> {
    const taken = this.takeBuffer();
    if (!taken) {
      // Every idle delta period would log this at info (upstream does): an idle cluster's log stays quiet.
      this.deps.logger.debug({}, 'No events received to save snapshot. Skipping delta snapshot.');
      return undefined;
    }
    return this.saveTaken(taken);
  }

  private async saveDelta(payload: DeltaPayload): Promise<Snapshot> {
    const store = await this.deps.store();
    const started = this.deps.clock.now().getTime();
    const start = this.chainEnd + 1;
    let snap: Snapshot;
    let storedBytes: number;
    try {
      ({ snapshot: snap, storedBytes } = await saveSizedDeltaSnapshot(
        store,
        payload,
        start,
        this.config.compression,
        // After a full snapshot at the same revision (a delta that ends where the full does): sorted after it in
        // every reader, it is the full's first delta, whose events the full already holds.
        creationTimeAfter(this.deps.clock.now(), this.chain.prevSnapshot ? [this.chain.prevSnapshot] : [], payload.lastRevision),
      ));
    } catch (err) {
      this.deps.metrics.snapshotDurationSeconds.labels('Incr', 'false').observe((this.deps.clock.now().getTime() - started) / 1000);
      // A failed save may leave a write in flight that still reads the slabs: they are the collector's to free.
      throw err;
    }
    // Stored: nothing reads the slabs any more.
    releaseDeltaPayload(payload);
    this.deps.metrics.snapshotDurationSeconds.labels('Incr', 'true').observe((this.deps.clock.now().getTime() - started) / 1000);
    this.deps.logger.info({ snapshot: snap.snapName, events: payload.events }, 'Delta snapshot saved');
    this.chain.prevSnapshot = snap;
    this.chain.prevDeltas.push(snap);
    this.chainEnd = snap.lastRevision;
    if (this.buffer.isEmpty) this.deps.metrics.snapshotRequired.labels('Incr').set(0);
    this.deps.metrics.snapshotSizeBytes.labels('Incr').set(storedBytes);
    this.updateLatestMetrics();
    await this.notify(snap, payload.byteLength);
    return snap;
  }

  private async notify(snap: Snapshot, uncompressedBytes: number): Promise<void> {
    if (!this.deps.onSnapshot) return;
    try {
      await this.deps.onSnapshot(snap, { uncompressedBytes, baseFull: this.chain.prevFull });
    } catch (err) {
      this.deps.logger.warn({ err, snapshot: snap.snapName }, 'post-snapshot hook failed');
    }
  }

  private updateLatestMetrics(): void {
    const m = this.deps.metrics;
    const { prevFull, prevDeltas } = this.chain;
    if (prevFull) {
      m.snapshotLatestRevision.labels('Full').set(prevFull.lastRevision);
      m.snapshotLatestTimestamp.labels('Full').set(Math.floor(prevFull.createdOn.getTime() / 1000));
    }
    const lastDelta = prevDeltas.at(-1);
    if (lastDelta) {
      m.snapshotLatestRevision.labels('Incr').set(lastDelta.lastRevision);
      m.snapshotLatestTimestamp.labels('Incr').set(Math.floor(lastDelta.createdOn.getTime() / 1000));
    }
    m.snapstoreLatestDeltasTotal.set(prevDeltas.length);
    const first = prevDeltas[0];
    m.snapstoreLatestDeltasRevisionsTotal.set(first && lastDelta ? lastDelta.lastRevision - first.startRevision : 0);
  }

  private armFullTimer(): void {
    if (!this.running) return;
    if (this.fullTimer) this.deps.clock.clearTimeout(this.fullTimer);
    const now = this.deps.clock.now();
    const next = this.config.schedule.next(now);
    if (isZeroTime(next)) {
      // A schedule that never fires (e.g. 30 February): fail the run as upstream does, instead of looping.
      this.fail(new EtcdbrError('E_INVALID_INPUT', 'error in full snapshot schedule: it never fires'));
      return;
    }
    this.fullTimer = this.deps.clock.setTimeout(
      () => {
        this.fullTimer = undefined;
        void this.serial(() => this.fullSnapshot(false)).then(
          () => this.armFullTimer(),
          (err: unknown) => this.fail(err),
        );
      },
      Math.max(0, next.getTime() - now.getTime()),
    );
  }

  private armDeltaTimer(): void {
    if (!this.running || !this.deltasEnabled) return;
    if (this.deltaTimer) this.deps.clock.clearTimeout(this.deltaTimer);
    this.deltaTimer = this.deps.clock.setTimeout(() => {
      this.deltaTimer = undefined;
      void this.serial(() => this.saveBufferedDelta()).then(
        (snap) => {
          this.armDeltaTimer();
          if (!snap) this.idleDeltaPeriod();
        },
        (err: unknown) => this.fail(err),
      );
    }, this.config.deltaSnapshotPeriodMs);
  }

  /**
   * A delta period stored nothing: tells `onIdleDeltaPeriod` (the delta lease renewal), beside the snapshot
   * queue. `until` also ends the call (the supervisor's term, for the start-up catch-up before `run`).
   */
  private idleDeltaPeriod(until?: AbortSignal): void {
    const hook = this.deps.onIdleDeltaPeriod;
    if (!hook) return;
    if (this.idleCall) {
      this.deps.logger.debug({}, 'Delta period ended while the previous one is still being reported; skipping this one');
      return;
    }
    const abort = new AbortController();
    const onUntil = (): void => abort.abort(until?.reason);
    if (until?.aborted) return;
    until?.addEventListener('abort', onUntil, { once: true });
    const call = { abort, done: Promise.resolve() };
    call.done = (async () => {
      try {
        await hook(abort.signal);
      } catch (err) {
        this.deps.logger.warn({ err }, 'post-delta-period hook failed');
      } finally {
        until?.removeEventListener('abort', onUntil);
        if (this.idleCall === call) this.idleCall = undefined;
      }
    })();
    this.idleCall = call;
  }

  /** Aborts the `onIdleDeltaPeriod` call in flight and waits for it to end. */
  private async endIdleCall(): Promise<void> {
    const call = this.idleCall;
    if (!call) return;
    call.abort.abort(new SnapshotterStoppedError('snapshotter stopped'));
    await call.done;
  }

  private clearTimers(): void {
    if (this.fullTimer) this.deps.clock.clearTimeout(this.fullTimer);
    if (this.deltaTimer) this.deps.clock.clearTimeout(this.deltaTimer);
    this.fullTimer = undefined;
    this.deltaTimer = undefined;
  }

  private fail(err: unknown): void {
    const e = asError(err);
    // Not a failure: leadership moved between two checks of the leadership watcher.
    if (!(e instanceof LeadershipLost)) this.deps.metrics.snapshotterFailure.labels(failureLabel(e)).inc();
    this.fatal?.(e);
  }

  /**
   * SIGTERM: write what is buffered as one last delta, bounded in time (a difference from upstream).
   * Without `writeBuffered` (leadership lost) only the writes already under way finish.
   */
  private async flushOnStop(writeBuffered: boolean): Promise<void> {
    this.clearTimers();
    if (writeBuffered && this.watch && !this.timelineChanged)
      await this.catchUpBeforeStop(Math.min(STOP_CATCH_UP_MS, this.config.finalDeltaTimeoutMs));
    await this.closeWatch();
    if (!writeBuffered && !this.buffer.isEmpty) {
      this.deps.logger.info({}, 'Leadership lost: leaving the buffered events to the next leader, which catches up from the store');
      this.buffer.clear();
    }
    if (this.buffer.isEmpty) {
      await this.queue;
      return;
    }
    const flush = this.serial(() => this.saveBufferedDelta());
    const timeout = new Promise<'timeout'>((resolve) => {
      const t = setTimeout(() => resolve('timeout'), this.config.finalDeltaTimeoutMs);
      t.unref();
    });
    try {
      const r = await Promise.race([flush, timeout]);
      if (r === 'timeout') this.deps.logger.warn({}, 'Could not save the last delta snapshot before stopping (timeout)');
    } catch (err) {
      this.deps.logger.warn({ err }, 'Could not save the last delta snapshot before stopping');
    }
  }
}
