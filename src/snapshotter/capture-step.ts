/**
 * The snapshotter's capture decisions as a pure step: `step(state, event) → { state, effects }`. The state
 * holds only numbers and flags (revisions, byte counts, the epoch); the Snapshotter keeps the timers, the
 * serial write queue, the watch and the DeltaBuffer (the events themselves), tells the step what happened,
 * and carries out the effects in the order given.
 *
 * The watch's events arrive at up to ~100k/s, so what changes with every response stays out of the state: the
 * last revision taken, the memory peak and etcd's newest revision are the intake's and the snapshotter's
 * counters (whether etcd left the history is timeline.ts's pure rule). Per event only plain predicates run
 * (`boundaryActs`, `inChain`), which allocate nothing; the step runs only at the rare revision boundaries where
 * a delta is cut or the watch paused, and on the other events (a few per delta).
 */
import { deltaPayloadLength } from '../backup/delta-write.js';

export interface CaptureState {
  /** `--delta-snapshot-memory-limit`: the buffered events and the deltas being saved count against it together. */
  readonly memoryLimit: number;
  readonly deltasEnabled: boolean;
  /** `run` is under way (a watch is opened after a full, and a timeline change takes a full, only then). */
  readonly running: boolean;
  /** The snapshotter's own watch is open (not the start-up catch-up's). */
  readonly watching: boolean;
  /**
   * The last revision the delta chain covers: the next delta starts after it, and the watch hands over the
   * events after it. Set from the store's newest snapshot when the snapshotter is created and after a full
   * snapshot that starts a new chain; a delta moves it on. A full snapshot taken while the watch runs does not:
   * the deltas go on across it (the first one after it may start at or below its revision), so every revision
   * written while the full was being taken is in a delta too, and every point in time stays restorable.
   */
  readonly chainEnd: number;
  /** Bytes of delta payloads taken from the buffer and not stored yet (queued or being saved). */
  readonly savingBytes: number;
  /**
   * Incremented when taken events stop belonging to the chain: a full snapshot covers them, or a delta
   * before them failed (saving them would leave a gap). Payloads of an older epoch are not saved.
   */
  readonly epoch: number;
  /** Set when a delta save failed: events are ignored until a watch is opened again from the store's chain. */
  readonly deltaSaveFailed: boolean;
  /** Set when etcd left the chain's history; events are ignored until a full snapshot starts a new chain. */
  readonly timelineChanged: boolean;
  /** A watch is paused because the delta memory is full; resumed when a save frees room. */
  readonly pausedForMemory: boolean;
  /** The full snapshot being taken starts a new chain (set when it starts, used when it is stored). */
  readonly fullStartsNewChain: boolean;
}

export function initialCaptureState(opts: { memoryLimit: number; deltasEnabled: boolean; chainEnd: number }): CaptureState {
  return {
    memoryLimit: opts.memoryLimit,
    deltasEnabled: opts.deltasEnabled,
    running: false,
    watching: false,
    chainEnd: opts.chainEnd,
    savingBytes: 0,
    epoch: 0,
    deltaSaveFailed: false,
    timelineChanged: false,
    pausedForMemory: false,
    fullStartsNewChain: false,
  };
}

export type CaptureEvent =
  | { type: 'RunStarted' }
  | { type: 'RunEnded' }
  /** The snapshotter's watch is about to be opened from `chainEnd + 1` (it hands over the events after the chain's end). */
  | { type: 'WatchOpening' }
  | { type: 'WatchOpened' }
  /** A watch is being closed; `paused`: it is the one paused for memory. `own`: the snapshotter's watch (not the catch-up's). */
  | { type: 'WatchClosing'; own: boolean; paused: boolean }
  /** The start-up catch-up read etcd's revision. */
  | { type: 'CatchUpStarting'; target: number }
  /** etcd left the chain's history under the watch (timeline.ts: its revision went backwards, its cluster ID changed). */
  | { type: 'TimelineLeft'; reason: string }
  /**
   * A revision boundary of a watch response where `boundaryActs`: before the first event of a new revision, or
   * at the end of a response (etcd never splits a revision across responses). `takenRevision`: the last
   * revision taken so far.
   */
  | { type: 'RevisionBoundary'; takenRevision: number; bufferedBytes: number }
  /** The buffer was emptied into a payload of `payloadBytes` for a delta period, an on-demand delta, a full or the stop. */
  | { type: 'DeltaTaken'; payloadBytes: number }
  /** A taken payload's turn in the write queue came; `epoch`: the epoch it was taken in. */
  | { type: 'DeltaSaving'; epoch: number }
  | { type: 'DeltaStored'; lastRevision: number }
  | { type: 'DeltaFailed' }
  /** A taken payload is stored, dropped or failed: its bytes no longer count. */
  | { type: 'DeltaSettled'; payloadBytes: number; bufferedBytes: number }
  /** A delta period (timer, on-demand delta, start-up catch-up) ended; `stored`: it stored a delta. */
  | { type: 'DeltaPeriodEnded'; stored: boolean }
  /** A full snapshot (not a reused final one) is about to be taken. */
  | { type: 'FullStarting'; bufferedBytes: number }
  /** After the buffered events went into a delta (or could not): the full is taken now. */
  | { type: 'FullTaking' }
  | { type: 'FullStored'; lastRevision: number }
  /** The full snapshot is stored and announced. */
  | { type: 'FullDone' }
  /** `run` was asked to stop; `leadershipLost`: another member leads now. */
  | { type: 'Stopping'; leadershipLost: boolean }
  /** The stop closed the watch: what is buffered now is all there is. */
  | { type: 'StopWatchClosed'; leadershipLost: boolean; bufferedBytes: number };

export type CaptureEffect =
  /** Take the buffer as a delta now (at the memory limit) and queue its save. */
  | { type: 'CutDelta' }
  /** Pause the watch at `nextRevision` (the first revision not taken) and take no more of this response. */
  | { type: 'PauseWatch'; nextRevision: number }
  | { type: 'ResumeWatch' }
  | { type: 'OpenWatch' }
  | { type: 'CloseWatch' }
  /** Open the catch-up's watch from `fromRevision`. */
  | { type: 'CatchUp'; fromRevision: number }
  | { type: 'DropBuffer'; because: 'timeline-left' | 'delta-failed' | 'new-chain' | 'leadership-lost' }
  /** etcd left the chain's history (`reason`): say so before the buffer is dropped. */
  | { type: 'WarnTimelineLeft'; reason: string }
  | { type: 'TakeFullSnapshot' }
  /** Forget etcd's revision and cluster ID seen so far: a new chain follows what etcd holds now. */
  | { type: 'ForgetTimeline' }
  /** Store the buffered events as a delta first (before the full snapshot). */
  | { type: 'SaveBufferedDelta' }
  | { type: 'SaveDelta' }
  | { type: 'DropStalePayload' }
  /** Tell `onIdleDeltaPeriod` (the delta lease renewal). */
  | { type: 'ReportIdlePeriod' }
  /** Wait (bounded) until the watch delivered every write etcd acknowledged before the stop. */
  | { type: 'CatchUpBeforeStop' }
  /** Write the buffered events as one last delta (bounded in time). */
  | { type: 'WriteLastDelta' }
  /** Nothing buffered: wait for the writes under way. */
  | { type: 'AwaitWrites' };

export interface CaptureStep {
  state: CaptureState;
  effects: readonly CaptureEffect[];
}

const NONE: readonly CaptureEffect[] = Object.freeze([]);

/** Whether `effects` ask for `type`. */
export function asks(effects: readonly CaptureEffect[], type: CaptureEffect['type']): boolean {
  return effects.some((e) => e.type === type);
}

/** Events are taken: neither a failed delta save nor a timeline change halted the capture. */
export function capturing(s: CaptureState): boolean {
  return !s.timelineChanged && !s.deltaSaveFailed;
}

/**
 * At a revision boundary with `bufferedBytes` buffered: whether a delta must be cut or the watch paused
 * there (then the caller steps a `RevisionBoundary` before taking the next revision). Per event: allocates nothing.
 */
export function boundaryActs(s: CaptureState, bufferedBytes: number): boolean {
  return (bufferedBytes > 0 && bufferedBytes >= s.memoryLimit) || memoryFull(s.savingBytes, bufferedBytes, s.memoryLimit);
}

/** The event at `modRevision` is in the chain already (a delta holds it): it is not buffered again. */
export function inChain(s: CaptureState, modRevision: number): boolean {
  return modRevision <= s.chainEnd;
}

/** The buffered events and the deltas being saved reach the memory limit: taking more would exceed it. */
function memoryFull(savingBytes: number, bufferedBytes: number, limit: number): boolean {
  return savingBytes > 0 && bufferedBytes + savingBytes >= limit;
}

export function step(s: CaptureState, e: CaptureEvent): CaptureStep {
  switch (e.type) {
    case 'RunStarted':
      return { state: { ...s, running: true }, effects: NONE };
    case 'RunEnded':
      return { state: { ...s, running: false }, effects: NONE };
    case 'WatchOpening':
      return { state: { ...s, deltaSaveFailed: false }, effects: NONE };
    case 'WatchOpened':
      return { state: { ...s, watching: true }, effects: NONE };
    case 'WatchClosing':
      return {
        state: { ...s, watching: e.own ? false : s.watching, pausedForMemory: e.paused ? false : s.pausedForMemory },
        effects: NONE,
      };
    case 'CatchUpStarting':
      // Nothing to catch up: upstream renews the delta lease after its start-up delta, taken or not.
      if (e.target <= s.chainEnd) return { state: s, effects: [{ type: 'ReportIdlePeriod' }] };
      return {
        state: { ...s, deltaSaveFailed: false },
        effects: [{ type: 'CatchUp', fromRevision: s.chainEnd + 1 }],
      };
    case 'TimelineLeft':
      return onTimelineLeft(s, e.reason);
    case 'RevisionBoundary':
      return onRevisionBoundary(s, e.takenRevision, e.bufferedBytes);
    case 'DeltaTaken':
      return { state: { ...s, savingBytes: s.savingBytes + e.payloadBytes }, effects: NONE };
    case 'DeltaSaving':
      return { state: s, effects: [{ type: e.epoch === s.epoch ? 'SaveDelta' : 'DropStalePayload' }] };
    case 'DeltaStored':
      return { state: { ...s, chainEnd: e.lastRevision }, effects: NONE };
    case 'DeltaFailed':
      // The chain now ends before these events: nothing taken after them may be stored (it would leave a gap).
      // The run fails, and the next one catches up from the store.
      return {
        state: { ...s, epoch: s.epoch + 1, deltaSaveFailed: true },
        effects: [{ type: 'DropBuffer', because: 'delta-failed' }],
      };
    case 'DeltaSettled': {
      const savingBytes = s.savingBytes - e.payloadBytes;
      // The paused watch goes on when there is room again.
      if (!s.pausedForMemory || memoryFull(savingBytes, e.bufferedBytes, s.memoryLimit))
        return { state: { ...s, savingBytes }, effects: NONE };
      return { state: { ...s, savingBytes, pausedForMemory: false }, effects: [{ type: 'ResumeWatch' }] };
    }
    case 'DeltaPeriodEnded':
      return { state: s, effects: e.stored ? NONE : [{ type: 'ReportIdlePeriod' }] };
    case 'FullStarting':
      // The buffered events go into a delta first, so the deltas reach as far as the watch had delivered: a point
      // in time between the last delta and the full stays restorable (dropped, they were only in the full's end
      // state). A save that fails leaves them to the full; one refused because another member leads ends the run.
      return {
        state: { ...s, fullStartsNewChain: false },
        effects: s.watching && e.bufferedBytes > 0 && capturing(s) ? [{ type: 'SaveBufferedDelta' }] : NONE,
      };
    case 'FullTaking':
      return onFullTaking(s);
    case 'FullStored':
      return { state: s.fullStartsNewChain ? { ...s, chainEnd: e.lastRevision, fullStartsNewChain: false } : s, effects: NONE };
    case 'FullDone':
      return { state: s, effects: s.deltasEnabled && s.running && !s.watching ? [{ type: 'OpenWatch' }] : NONE };
    case 'Stopping':
      // SIGTERM: the last delta should hold the writes etcd acknowledged before it. Leadership lost: the next
      // leader stores the buffered events, so the stop does not wait for more of them.
      return {
        state: s,
        effects:
          !e.leadershipLost && s.watching && !s.timelineChanged
            ? [{ type: 'CatchUpBeforeStop' }, { type: 'CloseWatch' }]
            : [{ type: 'CloseWatch' }],
      };
    case 'StopWatchClosed': {
      if (e.leadershipLost && e.bufferedBytes > 0) {
        return { state: s, effects: [{ type: 'DropBuffer', because: 'leadership-lost' }, { type: 'AwaitWrites' }] };
      }
      return { state: s, effects: [{ type: e.bufferedBytes > 0 ? 'WriteLastDelta' : 'AwaitWrites' }] };
    }
  }
}

/**
 * etcd left the chain's history (its revision went backwards, its cluster ID changed): the chain is not
 * continued. The buffered events belong to a history etcd no longer has, so they are dropped, and a full
 * snapshot starts a new chain from what etcd holds now. Once changed, later reports change nothing until then.
 */
function onTimelineLeft(s: CaptureState, reason: string): CaptureStep {
  if (s.timelineChanged) return { state: s, effects: NONE };
  const effects: CaptureEffect[] = [
    { type: 'WarnTimelineLeft', reason },
    { type: 'DropBuffer', because: 'timeline-left' },
  ];
  if (s.running) effects.push({ type: 'TakeFullSnapshot' });
  return { state: { ...s, timelineChanged: true, epoch: s.epoch + 1 }, effects };
}

/**
 * The buffer is cut at the memory limit only between revisions: a transaction's events share one revision,
 * and a delta that ended inside one would lose the rest of it (replay skips events at or below the revision it
 * has applied). At a boundary the watch is also paused when the delta memory is full; the events after it come
 * again when the watch resumes from the revision after the last one taken.
 */
function onRevisionBoundary(s: CaptureState, takenRevision: number, bufferedBytes: number): CaptureStep {
  if (!capturing(s) || !boundaryActs(s, bufferedBytes)) return { state: s, effects: NONE };
  let savingBytes = s.savingBytes;
  let buffered = bufferedBytes;
  const effects: CaptureEffect[] = [];
  if (buffered > 0 && buffered >= s.memoryLimit) {
    effects.push({ type: 'CutDelta' });
    savingBytes += deltaPayloadLength(buffered);
    buffered = 0;
  }
  let pausedForMemory = s.pausedForMemory;
  if (memoryFull(savingBytes, buffered, s.memoryLimit)) {
    effects.push({ type: 'PauseWatch', nextRevision: takenRevision + 1 });
    pausedForMemory = true;
  }
  return { state: { ...s, savingBytes, pausedForMemory }, effects };
}

/**
 * A healthy watch goes on while the full is taken, and the deltas go on across it: the revisions written
 * between the last delta and the full's own revision land in the next delta (a restore from this full skips
 * what it already holds, as upstream's applyFirstDeltaSnapshot does), so a point in time between them stays
 * restorable from the older full. Until issue 38 the watch was closed here and opened again after the full,
 * and those revisions were in no delta (a soak found 8775-8776 unreachable). Without a healthy watch (the
 * first full of a run, etcd left the history, a delta failed) the full starts a new chain after itself.
 */
function onFullTaking(s: CaptureState): CaptureStep {
  if (s.watching && capturing(s)) return { state: s, effects: NONE };
  return {
    // Deltas taken before this full and still queued hold events of a history the new chain does not continue.
    state: { ...s, epoch: s.epoch + 1, timelineChanged: false, fullStartsNewChain: true },
    effects: [{ type: 'CloseWatch' }, { type: 'DropBuffer', because: 'new-chain' }, { type: 'ForgetTimeline' }],
  };
}
