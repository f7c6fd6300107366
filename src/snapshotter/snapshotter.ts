import { asError, EtcdbrError } from '../errors.js';
import { latestSet, type Snapshot } from '@etcdbrctl/snapstore';
import { failureLabel } from '../metrics.js';
import type { CronSchedule } from '../config/schedule.js';
import { CaptureMachine } from './capture-machine.js';
import { asks, initialCaptureState, type CaptureEffect } from './capture-step.js';
import { followUntilTarget } from './catch-up.js';
import { updateLatestMetrics } from './chain-metrics.js';
import { ChainWriter } from './chain-writer.js';
import { releaseDeltaPayload, type DeltaPayload } from './delta-buffer.js';
import { DeltaIntake, type TakenDelta } from './delta-intake.js';
import { IdlePeriodReporter } from './idle-period.js';
import { SnapshotTimers } from './snapshot-timers.js';
import { advanceTimeline, continuesTimeline, type TimelinePoint } from './timeline.js';
import { CatchUpTooSlowError, LeadershipLost, SnapshotterStoppedError, TimelineChangedError } from './snapshotter-errors.js';
import type { ChainState, SnapshotterConfig, SnapshotterDeps } from './snapshotter-types.js';

export { CatchUpTooSlowError, LeadershipLost, SnapshotterStoppedError, TimelineChangedError } from './snapshotter-errors.js';
export type { ChainState, SnapshotterConfig, SnapshotterDeps, StoredSnapshotInfo } from './snapshotter-types.js';

/**
 * How long a stop or an on-demand delta waits for the watch to deliver the writes etcd acknowledged before
 * it (at most).
 */
const CATCH_UP_MS = 3_000;

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
 *
 * What to do when is decided by the pure step of capture-step.ts (cut, pause, resume, drop a stale payload,
 * halt, whether a full continues the chain, the stop's flush, the idle period); this class tells it what
 * happened and carries out its effects.
 */
export class Snapshotter {
  readonly chain: ChainState;
  private readonly machine: CaptureMachine;
  private readonly intake: DeltaIntake;
  private queue: Promise<unknown> = Promise.resolve();
  private fatal: ((err: Error) => void) | undefined;
  private readonly timers: SnapshotTimers;
  private readonly idle: IdlePeriodReporter;
  private readonly writer: ChainWriter;
  /** The newest revision and the cluster ID etcd reported under the current watch. */
  private timeline: TimelinePoint | undefined;

  private constructor(
    private readonly config: SnapshotterConfig,
    private readonly deps: SnapshotterDeps,
    chain: ChainState,
  ) {
    this.chain = chain;
    this.writer = new ChainWriter(config, deps, chain);
    this.machine = new CaptureMachine(
      initialCaptureState({
        memoryLimit: config.deltaSnapshotMemoryLimit,
        deltasEnabled: this.deltasEnabled,
        chainEnd: chain.prevSnapshot?.lastRevision ?? 0,
      }),
    );
    this.intake = new DeltaIntake(this.machine, deps, (taken) => this.saveCut(taken));
    this.timers = new SnapshotTimers(deps.clock, config.schedule, config.deltaSnapshotPeriodMs);
    this.idle = new IdlePeriodReporter(deps.onIdleDeltaPeriod, deps.logger);
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
    updateLatestMetrics(deps.metrics, s.chain);
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
    return this.machine.state.running;
  }

  /** The newest revision in the delta buffer, 0 when it is empty (tests and diagnostics). */
  get bufferedRevision(): number {
    return this.intake.buffer.isEmpty ? 0 : this.intake.buffer.lastRevision;
  }

  /**
   * The most delta JSON the snapshotter held at once since it was created: the buffer plus the deltas taken
   * from it and not stored yet. Back-pressure keeps it within the memory limit plus one revision's events.
   */
  get deltaMemoryPeakBytes(): number {
    return this.intake.peakBytes;
  }

  /** etcd's current store revision. */
  etcdRevision(): Promise<number> {
    return this.deps.client.currentRevision(this.config.connectionTimeoutMs);
  }

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
    if (!this.active) return Promise.reject(new SnapshotterStoppedError('snapshotter is not active'));
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

  /**
   * Writes the buffered events as a delta now; undefined when there were none. First waits (bounded) until
   * the watch delivered every write etcd acknowledged before the call, so the delta holds them: upstream
   * writes only what its watch happened to deliver, and a write acknowledged a moment before the request can
   * be missing from the delta it returns.
   */
  async triggerDeltaSnapshot(): Promise<Snapshot | undefined> {
    if (!this.active) return Promise.reject(new SnapshotterStoppedError('snapshotter is not active'));
    if (!this.deltasEnabled) {
      return Promise.reject(
        new EtcdbrError(
          'E_INVALID_INPUT',
          `found delta snapshot interval ${this.config.deltaSnapshotPeriodMs / 1000}s less than 1 second. Delta snapshotting is disabled.`,
        ),
      );
    }
    if (this.intake.watching) await this.catchUpWatch('on-demand delta', Math.min(CATCH_UP_MS, this.config.connectionTimeoutMs));
    return this.serial(async () => {
      try {
        const snap = await this.saveBufferedDelta();
        this.armDeltaTimer();
        // Upstream renews the delta lease after an on-demand delta too, whether one was stored or not.
        this.perform(this.machine.tell({ type: 'DeltaPeriodEnded', stored: snap !== undefined }));
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
  async run(signal: AbortSignal, startWithFullSnapshot: boolean, opts: { chainCaughtUp?: boolean } = {}): Promise<void> {
    if (this.active) throw new EtcdbrError('E_CONFLICT', 'snapshotter is already running');
    this.machine.tell({ type: 'RunStarted' });
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
          // After a catch-up the chain goes on: the watch opens first, so the revisions written between the
          // catch-up and the full's own revision land in the next delta too (a soak found 2122-2123 in no delta:
          // a start-up full after a catch-up started a new chain at its revision).
          if (opts.chainCaughtUp === true && this.deltasEnabled && !this.intake.watching) await this.serial(() => this.openWatch());
          await this.serial(() => this.fullSnapshot(false));
        } else if (this.deltasEnabled && !this.intake.watching) {
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
      if (signal.aborted) await this.flushOnStop(signal.reason instanceof LeadershipLost);
    } finally {
      this.machine.tell({ type: 'RunEnded' });
      this.fatal = undefined;
      this.timers.clear();
      await this.intake.close();
      this.intake.buffer.clear();
      await this.idle.end();
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
    const [start] = this.machine.tell({ type: 'CatchUpStarting', target });
    if (start?.type !== 'CatchUp') {
      this.idle.report(signal);
      return true;
    }
    this.intake.takeAfter(start.fromRevision - 1);
    const watchError = await followUntilTarget({
      client: this.deps.client,
      clock: this.deps.clock,
      fromRevision: start.fromRevision,
      target,
      timeoutMs: this.config.snapshotTimeoutMs,
      signal,
      onHeader: (revision, clusterId) => {
        this.observeEtcd(revision, clusterId);
        return this.machine.state.timelineChanged
          ? new TimelineChangedError('etcd left the backed-up history while catching up with deltas')
          : undefined;
      },
      onEvents: (events, w, onCut) => {
        this.intake.append(events, w, onCut);
        return this.intake.buffer.lastRevision;
      },
      tooSlow: () =>
        new CatchUpTooSlowError(`watch from revision ${this.machine.state.chainEnd + 1} did not reach revision ${target} in time`),
      close: (w) => this.intake.closeWatchOf(w, false),
    });
    if (watchError) {
      this.intake.buffer.clear();
      throw watchError;
    }
    if (signal.aborted) return false;
    const saved = await this.serial(() => this.saveBufferedDelta());
    if (asks(this.machine.tell({ type: 'DeltaPeriodEnded', stored: saved !== undefined }), 'ReportIdlePeriod')) this.idle.report(signal);
    return true;
  }

  /** Stores a taken payload unless its events no longer belong to the chain; frees its bytes either way. */
  private async saveTaken(taken: TakenDelta): Promise<Snapshot | undefined> {
    try {
      const [verdict] = this.machine.tell({ type: 'DeltaSaving', epoch: taken.epoch });
      if (verdict?.type === 'DropStalePayload') {
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
      taken.payload.leaseTtls = await this.intake.leaseTtls.of(taken.payload.leases);
      return await this.saveDelta(taken.payload);
    } catch (err) {
      this.perform(this.machine.tell({ type: 'DeltaFailed' }));
      throw err;
    } finally {
      this.perform(
        this.machine.tell({ type: 'DeltaSettled', payloadBytes: taken.payload.byteLength, bufferedBytes: this.intake.buffer.size }),
      );
    }
  }

  private async openWatch(): Promise<void> {
    await this.intake.close();
    await this.intake.open({
      onHeader: (revision, clusterId) => this.observeEtcd(revision, clusterId),
      onError: (err) => this.fail(err),
    });
  }

  /**
   * Follows what etcd reports under the watch (a response's header; timeline.ts decides whether etcd left the
   * chain's history, the capture step what then).
   */
  private observeEtcd(revision: number, clusterId: string | undefined): void {
    if (this.machine.state.timelineChanged) return;
    const point = { revision, clusterId };
    const verdict = continuesTimeline(this.timeline, point);
    if (verdict.continues) this.timeline = advanceTimeline(this.timeline, point);
    else this.perform(this.machine.tell({ type: 'TimelineLeft', reason: verdict.reason }));
  }

  /** Queues the save of a delta cut at the memory limit (DeltaIntake). */
  private saveCut(taken: TakenDelta): Promise<unknown> {
    const save = this.serial(() => this.saveTaken(taken));
    save.then(
      () => this.armDeltaTimer(),
      (err: unknown) => this.fail(err),
    );
    return save;
  }

  private async fullSnapshot(isFinal: boolean): Promise<Snapshot> {
    if (isFinal) {
      const reuse = await this.writer.finalFullToReuse();
      if (reuse) return reuse;
    }
    if (asks(this.machine.tell({ type: 'FullStarting', bufferedBytes: this.intake.buffer.size }), 'SaveBufferedDelta')) {
      try {
        await this.saveBufferedDelta();
      } catch (err) {
        if (err instanceof LeadershipLost) throw err;
        this.deps.logger.warn({ err }, 'could not store the buffered events as a delta before the full snapshot; only the full holds them');
      }
    }
    for (const effect of this.machine.tell({ type: 'FullTaking' })) {
      if (effect.type === 'CloseWatch') await this.intake.close();
      else this.perform([effect]);
    }
    const snap = await this.writer.writeFull(isFinal, (stored) =>
      this.machine.tell({ type: 'FullStored', lastRevision: stored.lastRevision }),
    );
    if (asks(this.machine.tell({ type: 'FullDone' }), 'OpenWatch')) await this.openWatch();
    return snap;
  }

  private async saveBufferedDelta(): Promise<Snapshot | undefined> {
    const taken = this.intake.take();
    if (!taken) {
      // Every idle delta period would log this at info (upstream does): an idle cluster's log stays quiet.
      this.deps.logger.debug({}, 'No events received to save snapshot. Skipping delta snapshot.');
      return undefined;
    }
    return this.saveTaken(taken);
  }

  private saveDelta(payload: DeltaPayload): Promise<Snapshot> {
    return this.writer.writeDelta(payload, this.machine.state.chainEnd + 1, (stored) => {
      this.machine.tell({ type: 'DeltaStored', lastRevision: stored.lastRevision });
      if (this.intake.buffer.isEmpty) this.deps.metrics.snapshotRequired.labels('Incr').set(0);
    });
  }

  private armFullTimer(): void {
    if (!this.active) return;
    try {
      this.timers.armFull(() => {
        void this.serial(() => this.fullSnapshot(false)).then(
          () => this.armFullTimer(),
          (err: unknown) => this.fail(err),
        );
      });
    } catch (err) {
      this.fail(err);
    }
  }

  private armDeltaTimer(): void {
    if (!this.active || !this.deltasEnabled) return;
    this.timers.armDelta(() => {
      void this.serial(() => this.saveBufferedDelta()).then(
        (snap) => {
          this.armDeltaTimer();
          this.perform(this.machine.tell({ type: 'DeltaPeriodEnded', stored: snap !== undefined }));
        },
        (err: unknown) => this.fail(err),
      );
    });
  }

  /** Carries out the effects that need no waiting (the others are awaited where they are stepped). */
  private perform(effects: readonly CaptureEffect[]): void {
    for (const effect of effects) {
      switch (effect.type) {
        case 'DropBuffer':
          if (effect.because === 'leadership-lost')
            this.deps.logger.info({}, 'Leadership lost: leaving the buffered events to the next leader, which catches up from the store');
          this.intake.buffer.clear();
          break;
        case 'WarnTimelineLeft':
          this.deps.logger.warn(
            {
              reason: effect.reason,
              ...(this.intake.buffer.isEmpty
                ? {}
                : { droppedRevisions: `${this.intake.buffer.firstRevision}-${this.intake.buffer.lastRevision}` }),
              previousSnapshot: this.chain.prevSnapshot?.snapName,
            },
            'etcd left the backed-up history: not continuing the delta chain; taking a full snapshot to start a new one',
          );
          break;
        case 'TakeFullSnapshot':
          void this.serial(() => this.fullSnapshot(false)).then(
            () => this.armFullTimer(),
            (err: unknown) => this.fail(err),
          );
          break;
        case 'ForgetTimeline':
          this.timeline = undefined;
          break;
        case 'ResumeWatch':
          this.intake.resume();
          break;
        case 'ReportIdlePeriod':
          this.idle.report();
          break;
        default:
          throw new EtcdbrError('E_INTERNAL', `capture effect ${effect.type} is not carried out here`);
      }
    }
  }

  private fail(err: unknown): void {
    const e = asError(err);
    // Not a failure: leadership moved between two checks of the leadership watcher.
    if (!(e instanceof LeadershipLost)) this.deps.metrics.snapshotterFailure.labels(failureLabel(e)).inc();
    this.fatal?.(e);
  }

  /**
   * SIGTERM: write what is buffered as one last delta, bounded in time (a difference from upstream).
   * With `leadershipLost` only the writes already under way finish.
   */
  private async flushOnStop(leadershipLost: boolean): Promise<void> {
    this.timers.clear();
    for (const effect of this.machine.tell({ type: 'Stopping', leadershipLost })) {
      if (effect.type === 'CatchUpBeforeStop')
        await this.catchUpWatch('last delta before stopping', Math.min(CATCH_UP_MS, this.config.finalDeltaTimeoutMs));
      else if (effect.type === 'CloseWatch') await this.intake.close();
    }
    for (const effect of this.machine.tell({ type: 'StopWatchClosed', leadershipLost, bufferedBytes: this.intake.buffer.size })) {
      if (effect.type === 'AwaitWrites') await this.queue;
      else if (effect.type === 'WriteLastDelta') await this.writeLastDelta();
      else this.perform([effect]);
    }
  }

  /** Waits (bounded) for the watch to deliver etcd's current revision; says so when it did not. */
  private async catchUpWatch(forWhat: string, boundMs: number): Promise<void> {
    const r = await this.intake.progress.catchUp(this.deps.client, boundMs);
    if (!r.reached)
      this.deps.logger.warn(
        { for: forWhat, etcdRevision: r.target, watchedRevision: r.watched, waitedMs: boundMs },
        r.target === undefined
          ? 'etcd did not say its revision: the delta holds what the watch delivered so far'
          : "the watch did not deliver etcd's revision in time: the delta holds what it delivered so far, the rest goes into a later delta",
      );
  }

  /** The stop's last delta, bounded by `finalDeltaTimeoutMs`; a failure is logged, the stop goes on. */
  private async writeLastDelta(): Promise<void> {
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
