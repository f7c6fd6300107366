import type { Logger } from '@etcdbrctl/snapstore';
import type { DeltaEvent } from '../backup/delta-format.js';
import type { EtcdClient } from '../etcd/index.js';
import type { Metrics } from '../metrics.js';
import type { CaptureMachine } from './capture-machine.js';
import { boundaryActs, capturing, inChain } from './capture-step.js';
import { DeltaBuffer, type DeltaPayload } from './delta-buffer.js';
import { LEASE_LOOKUP_TIMEOUT_MS, LeaseTtls } from './lease-ttls.js';
import { PausableWatch } from './pausable-watch.js';
import { WatchProgress } from './watch-progress.js';

/** A delta taken from the buffer, with the epoch it was taken in (see CaptureState.epoch). */
export interface TakenDelta {
  payload: DeltaPayload;
  epoch: number;
}

/** Hears of the save of each delta the catch-up cut at the memory limit. */
export type OnCut = (save: Promise<unknown>) => void;

/**
 * The watch and the delta buffer: takes a watch's events into the buffer, cuts a delta at the memory limit and
 * pauses the watch while the delta memory is full, as the capture step decides; saving a cut delta is the
 * snapshotter's (`saveCut`, through its write queue).
 */
export class DeltaIntake {
  readonly buffer = new DeltaBuffer();
  /** The granted TTLs of the leases the events name, for the delta JSON (lease-ttls.ts). */
  readonly leaseTtls: LeaseTtls;
  /** How far the snapshotter's watch delivered: the stop waits here for the writes etcd acknowledged. */
  readonly progress = new WatchProgress();
  /** The snapshotter's watch (the catch-up's is the catch-up's own). */
  private watch: PausableWatch | undefined;
  /** The watch (the snapshotter's or the catch-up's) paused because the delta memory is full. */
  private pausedWatch: PausableWatch | undefined;
  /**
   * The last revision the current watch handed over: buffered, saved, or already in the chain. A counter of
   * the intake's, not the capture state's: it moves with every response (see capture-step.ts).
   */
  private taken = 0;
  /** The most the buffer and the deltas being saved held together (JSON bytes), for tests and diagnostics. */
  private peak = 0;

  constructor(
    private readonly machine: CaptureMachine,
    private readonly deps: { client: EtcdClient; logger: Logger; metrics: Metrics },
    /** Queues the save of a delta cut at the memory limit; returns the save. */
    private readonly saveCut: (taken: TakenDelta) => Promise<unknown>,
  ) {
    this.leaseTtls = new LeaseTtls(
      (lease) => deps.client.leaseTimeToLive(lease, { timeoutMs: LEASE_LOOKUP_TIMEOUT_MS }).then((l) => (l.ttl < 0 ? 0 : l.grantedTtl)),
      deps.logger,
    );
  }

  get watching(): boolean {
    return this.watch !== undefined;
  }

  get takenRevision(): number {
    return this.taken;
  }

  get peakBytes(): number {
    return this.peak;
  }

  /** The next watch hands over the events after `revision` (the catch-up's). */
  takeAfter(revision: number): void {
    this.taken = revision;
  }

  /** Opens the snapshotter's watch from after the chain's end; the previous one must be closed. */
  async open(handlers: { onHeader(revision: number, clusterId: string | undefined): void; onError(err: Error): void }): Promise<void> {
    this.machine.tell({ type: 'WatchOpening' });
    const from = this.machine.state.chainEnd + 1;
    this.progress.reset(from - 1);
    this.taken = from - 1;
    this.watch = await PausableWatch.open(this.deps.client, from, {
      onHeader: handlers.onHeader,
      onEvents: (events, _header, watch) => {
        this.append(events, watch);
        this.progress.reached(this.taken);
      },
      onError: handlers.onError,
    });
    this.machine.tell({ type: 'WatchOpened' });
  }

  /** Closes the snapshotter's watch, if open. */
  close(): Promise<void> {
    const w = this.watch;
    this.watch = undefined;
    return w ? this.closeWatchOf(w, true) : Promise.resolve();
  }

  /** Closes `w`; `own`: the snapshotter's watch (else the catch-up's). */
  async closeWatchOf(w: PausableWatch, own: boolean): Promise<void> {
    const paused = this.pausedWatch === w;
    if (paused) this.pausedWatch = undefined;
    this.machine.tell({ type: 'WatchClosing', own, paused });
    await w.close();
  }

  /** The watch paused for memory goes on (the step saw room again). */
  resume(): void {
    const w = this.pausedWatch;
    this.pausedWatch = undefined;
    void w?.resume();
  }

  /** Empties the buffer into a payload that counts against the memory limit until it is stored. */
  take(): TakenDelta | undefined {
    const payload = this.buffer.take();
    if (!payload) return undefined;
    this.machine.tell({ type: 'DeltaTaken', payloadBytes: payload.byteLength });
    return { payload, epoch: this.machine.state.epoch };
  }

  /**
   * Buffers one watch response's events. The buffer is cut at the memory limit only between revisions (see
   * capture-step.ts): etcd never splits a revision across watch responses, so the end of a response is a
   * revision boundary too. The per-event checks are plain predicates that allocate nothing; the capture step
   * runs only at the rare boundaries where a delta is cut or the watch paused (holding back the events after
   * it, which come again when the watch resumes).
   */
  append(events: readonly DeltaEvent[], watch: PausableWatch, onCut?: OnCut): void {
    if (!capturing(this.machine.state)) return;
    let appended = 0;
    /** `appended` when the peak was last noted. */
    let noted = 0;
    for (const ev of events) {
      if (ev.modRevision > this.taken) {
        if (boundaryActs(this.machine.state, this.buffer.size)) {
          if (appended > noted) this.notePeak();
          noted = appended;
          if (this.settleBoundary(watch, onCut)) return this.noteAppended(appended > 0);
        }
        this.taken = ev.modRevision;
      }
      if (inChain(this.machine.state, ev.modRevision)) continue;
      this.buffer.append(ev);
      this.leaseTtls.note(ev.lease);
      appended++;
    }
    this.noteAppended(appended > 0);
    if (appended > noted) this.notePeak();
    if (boundaryActs(this.machine.state, this.buffer.size)) this.settleBoundary(watch, onCut);
  }

  /**
   * Between two boundaries only appends change what the buffer and the deltas being saved hold together, so
   * the sum at the last append (now) is the most since the previous boundary.
   */
  private notePeak(): void {
    this.peak = Math.max(this.peak, this.buffer.size + this.machine.state.savingBytes);
  }

  /** Once per watch response, not per event: a labelled gauge's set costs a label lookup each time. */
  private noteAppended(appended: boolean): void {
    if (appended) this.deps.metrics.snapshotRequired.labels('Incr').set(1);
  }

  /** Steps a revision boundary and carries out its cut and pause; true when the watch was paused there. */
  private settleBoundary(watch: PausableWatch, onCut?: OnCut): boolean {
    let paused = false;
    for (const effect of this.machine.tell({ type: 'RevisionBoundary', takenRevision: this.taken, bufferedBytes: this.buffer.size })) {
      if (effect.type === 'CutDelta') this.cut(onCut);
      else if (effect.type === 'PauseWatch') {
        this.pauseForMemory(watch, effect.nextRevision);
        paused = true;
      }
    }
    return paused;
  }

  /** Saves the buffer as a delta now: it holds the memory limit or more, at a revision boundary. */
  private cut(onCut?: OnCut): void {
    // The step counted the payload against the memory limit already.
    const taken: TakenDelta = { payload: this.buffer.take()!, epoch: this.machine.state.epoch };
    this.deps.logger.info(
      { bytes: taken.payload.byteLength - 32, limit: this.machine.state.memoryLimit },
      'Delta events memory crossed the memory limit; taking a delta snapshot',
    );
    const save = this.saveCut(taken);
    onCut?.(save);
  }

  /** Pauses `watch` after the last revision taken: the delta memory is full. */
  private pauseForMemory(watch: PausableWatch, nextRevision: number): void {
    if (watch.paused) return;
    this.deps.logger.debug(
      { bufferedBytes: this.buffer.size, savingBytes: this.machine.state.savingBytes, nextRevision },
      'Delta memory limit reached while a delta is being saved; pausing the watch until it is stored',
    );
    watch.pause(nextRevision);
    this.pausedWatch = watch;
  }
}
