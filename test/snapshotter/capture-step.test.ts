import { describe, expect, it } from 'vitest';
import {
  boundaryActs,
  inChain,
  initialCaptureState,
  step,
  type CaptureEffect,
  type CaptureEvent,
  type CaptureState,
} from '../../src/snapshotter/capture-step.js';
import { deltaPayloadLength } from '../../src/backup/delta-write.js';

/**
 * The snapshotter's capture decisions as tables: a start state and a sequence of events ⇒ the effects asked
 * for, in order, and what the state holds afterwards. The Snapshotter and its DeltaIntake carry the effects
 * out (test/snapshotter/delta-intake.test.ts drives the per-event path with a real buffer).
 */

const LIMIT = 1000;
/** What a payload of `buffered` JSON bytes counts against the limit once taken (the closing `]` and the hash). */
const payload = (buffered: number): number => deltaPayloadLength(buffered);

const fresh = (over: Partial<CaptureState> = {}): CaptureState => ({
  ...initialCaptureState({ memoryLimit: LIMIT, deltasEnabled: true, chainEnd: 100 }),
  ...over,
});
/** A running snapshotter whose watch is open from revision 101 (the store's chain ends at 100). */
const watching = (over: Partial<CaptureState> = {}): CaptureState => fresh({ running: true, watching: true, ...over });

/** An effect as a short string: its type, then what it carries. */
function show(e: CaptureEffect): string {
  switch (e.type) {
    case 'PauseWatch':
      return `PauseWatch@${e.nextRevision}`;
    case 'CatchUp':
      return `CatchUp@${e.fromRevision}`;
    case 'DropBuffer':
      return `DropBuffer:${e.because}`;
    case 'WarnTimelineLeft':
      return `WarnTimelineLeft:${e.reason}`;
    default:
      return e.type;
  }
}

function play(from: CaptureState, events: readonly CaptureEvent[]): { state: CaptureState; effects: string[] } {
  let state = from;
  const effects: string[] = [];
  for (const e of events) {
    const next = step(state, e);
    state = next.state;
    effects.push(...next.effects.map(show));
  }
  return { state, effects };
}

interface Row {
  name: string;
  from: CaptureState;
  events: CaptureEvent[];
  effects: string[];
  /** Fields of the state afterwards (the others are not checked). */
  state?: Partial<CaptureState>;
}

const boundary = (takenRevision: number, bufferedBytes: number): CaptureEvent => ({
  type: 'RevisionBoundary',
  takenRevision,
  bufferedBytes,
});

function table(rows: Row[]): void {
  it.each(rows)('$name', (row) => {
    const { state, effects } = play(row.from, row.events);
    expect(effects).toEqual(row.effects);
    if (row.state) expect(state).toMatchObject(row.state);
  });
}

describe('capture step: the memory-limit cut and the pause', () => {
  table([
    {
      name: 'below the limit with nothing being saved: nothing cut',
      from: watching(),
      events: [boundary(105, 600)],
      effects: [],
      state: { savingBytes: 0, pausedForMemory: false },
    },
    {
      name: 'the buffer reaches the limit: a delta is cut there, and the watch paused after the last revision taken (the cut delta fills the memory)',
      from: watching(),
      events: [boundary(107, LIMIT)],
      effects: ['CutDelta', 'PauseWatch@108'],
      state: { savingBytes: payload(LIMIT), pausedForMemory: true },
    },
    {
      name: 'over the limit by the last revision’s events: cut all the same (the limit is checked between revisions only)',
      from: watching(),
      events: [boundary(107, LIMIT + 250)],
      effects: ['CutDelta', 'PauseWatch@108'],
      state: { savingBytes: payload(LIMIT + 250) },
    },
    {
      name: 'a delta being saved and the buffer fill the memory together: the watch is paused, nothing cut',
      from: watching({ savingBytes: 700 }),
      events: [boundary(110, 300)],
      effects: ['PauseWatch@111'],
      state: { savingBytes: 700, pausedForMemory: true },
    },
    {
      name: 'a delta being saved with room left: nothing happens',
      from: watching({ savingBytes: 700 }),
      events: [boundary(110, 299)],
      effects: [],
      state: { pausedForMemory: false },
    },
    {
      name: 'after a failed delta save nothing is cut or paused (capture halted)',
      from: watching({ deltaSaveFailed: true }),
      events: [boundary(107, 5 * LIMIT)],
      effects: [],
    },
    {
      name: 'after a timeline change nothing is cut or paused (capture halted)',
      from: watching({ timelineChanged: true }),
      events: [boundary(107, 5 * LIMIT)],
      effects: [],
    },
    {
      name: 'the cut delta is stored: its bytes no longer count, and the paused watch goes on',
      from: watching(),
      events: [
        boundary(107, LIMIT),
        { type: 'DeltaStored', lastRevision: 107 },
        { type: 'DeltaSettled', payloadBytes: payload(LIMIT), bufferedBytes: 0 },
      ],
      effects: ['CutDelta', 'PauseWatch@108', 'ResumeWatch'],
      state: { chainEnd: 107, savingBytes: 0, pausedForMemory: false },
    },
    {
      name: 'one of two deltas being saved is stored but the other and the buffer still fill the memory: the watch stays paused',
      from: watching({ savingBytes: 600, pausedForMemory: true }),
      events: [{ type: 'DeltaSettled', payloadBytes: 100, bufferedBytes: 500 }],
      effects: [],
      state: { savingBytes: 500, pausedForMemory: true },
    },
    {
      name: 'a delta settles with no watch paused: nothing to resume',
      from: watching({ savingBytes: 600 }),
      events: [{ type: 'DeltaSettled', payloadBytes: 600, bufferedBytes: 0 }],
      effects: [],
      state: { savingBytes: 0 },
    },
    {
      name: 'a paused watch that is closed is not resumed later',
      from: watching(),
      events: [
        boundary(107, LIMIT),
        { type: 'WatchClosing', own: true, paused: true },
        { type: 'DeltaSettled', payloadBytes: payload(LIMIT), bufferedBytes: 0 },
      ],
      effects: ['CutDelta', 'PauseWatch@108'],
      state: { watching: false, pausedForMemory: false },
    },
    {
      name: 'a delta period takes the buffer: it counts against the limit until it settles',
      from: watching(),
      events: [{ type: 'DeltaTaken', payloadBytes: 400 }, boundary(120, 600)],
      effects: ['PauseWatch@121'],
      state: { savingBytes: 400, pausedForMemory: true },
    },
  ]);
});

describe('capture step: the per-event checks', () => {
  it.each([
    { name: 'under the limit, nothing saving', over: {}, buffered: 999, acts: false },
    { name: 'at the limit', over: {}, buffered: LIMIT, acts: true },
    { name: 'an empty buffer is never cut', over: { memoryLimit: 0 }, buffered: 0, acts: false },
    { name: 'saving + buffered at the limit', over: { savingBytes: 1 }, buffered: 999, acts: true },
    { name: 'saving + buffered under the limit', over: { savingBytes: 1 }, buffered: 998, acts: false },
    { name: 'saving alone at the limit', over: { savingBytes: LIMIT }, buffered: 0, acts: true },
  ])('boundaryActs: $name ⇒ $acts', ({ over, buffered, acts }) => {
    expect(boundaryActs(watching(over), buffered)).toBe(acts);
  });

  it.each([
    { revision: 99, inChain: true },
    { revision: 100, inChain: true },
    { revision: 101, inChain: false },
  ])('inChain: the chain ends at 100, revision $revision ⇒ $inChain', ({ revision, inChain: expected }) => {
    expect(inChain(watching(), revision)).toBe(expected);
  });

  it('a boundary that acts on nothing keeps the same state object (nothing allocated)', () => {
    const s = watching();
    expect(step(s, boundary(105, 600)).state).toBe(s);
  });
});

describe('capture step: stale payloads, failed saves', () => {
  table([
    {
      name: 'a payload taken in the current epoch is saved',
      from: watching({ epoch: 3 }),
      events: [{ type: 'DeltaSaving', epoch: 3 }],
      effects: ['SaveDelta'],
    },
    {
      name: 'a failed delta: the buffer is dropped, capture halts, and what was taken before it is not saved (it would leave a gap)',
      from: watching({ epoch: 3 }),
      events: [{ type: 'DeltaFailed' }, { type: 'DeltaSaving', epoch: 3 }, boundary(130, 5 * LIMIT)],
      effects: ['DropBuffer:delta-failed', 'DropStalePayload'],
      state: { epoch: 4, deltaSaveFailed: true },
    },
    {
      name: 'a watch opened again (the next run) takes events again, from the chain’s end',
      from: watching({ deltaSaveFailed: true, watching: false, chainEnd: 120 }),
      events: [{ type: 'WatchOpening' }, { type: 'WatchOpened' }],
      effects: [],
      state: { deltaSaveFailed: false, watching: true },
    },
    {
      name: 'a full that starts a new chain makes the deltas still queued stale',
      from: watching({ watching: false, epoch: 1 }),
      events: [{ type: 'FullStarting', bufferedBytes: 0 }, { type: 'FullTaking' }, { type: 'DeltaSaving', epoch: 1 }],
      effects: ['CloseWatch', 'DropBuffer:new-chain', 'ForgetTimeline', 'DropStalePayload'],
      state: { epoch: 2 },
    },
    {
      name: 'a stored delta moves the chain’s end',
      from: watching(),
      events: [{ type: 'DeltaStored', lastRevision: 180 }],
      effects: [],
      state: { chainEnd: 180 },
    },
  ]);
});

describe('capture step: etcd leaves the backed-up history (timeline change)', () => {
  // Whether it left is timeline.ts's rule (test/snapshotter/timeline.test.ts); this is what follows.
  const BACKWARDS = "etcd's revision went backwards from 120 to 50 (etcd was restored or replaced)";
  const left = (reason = BACKWARDS): CaptureEvent => ({ type: 'TimelineLeft', reason });
  table([
    {
      name: 'under a run: the buffer is dropped, capture halts, a full starts a new chain',
      from: watching({ epoch: 2 }),
      events: [left(), boundary(130, 5 * LIMIT)],
      effects: [`WarnTimelineLeft:${BACKWARDS}`, 'DropBuffer:timeline-left', 'TakeFullSnapshot'],
      state: { timelineChanged: true, epoch: 3 },
    },
    {
      name: 'outside a run (the start-up catch-up): the buffer is dropped, no full taken here (the catch-up fails)',
      from: fresh(),
      events: [left()],
      effects: [`WarnTimelineLeft:${BACKWARDS}`, 'DropBuffer:timeline-left'],
      state: { timelineChanged: true },
    },
    {
      name: 'once changed, later reports change nothing until a full starts a new chain',
      from: watching(),
      events: [left(), left("etcd's cluster ID changed from c1 to c2 (etcd was replaced)")],
      effects: [`WarnTimelineLeft:${BACKWARDS}`, 'DropBuffer:timeline-left', 'TakeFullSnapshot'],
      state: { epoch: 1 },
    },
    {
      name: 'payloads taken before the change are not saved',
      from: watching(),
      events: [{ type: 'DeltaTaken', payloadBytes: 400 }, left(), { type: 'DeltaSaving', epoch: 0 }],
      effects: [`WarnTimelineLeft:${BACKWARDS}`, 'DropBuffer:timeline-left', 'TakeFullSnapshot', 'DropStalePayload'],
    },
    {
      name: 'the full after a change starts a new chain at its own (lower) revision, forgets etcd’s old revision, and opens the watch from there',
      from: watching({ chainEnd: 120 }),
      events: [
        left(),
        { type: 'FullStarting', bufferedBytes: 300 },
        { type: 'FullTaking' },
        { type: 'WatchClosing', own: true, paused: false },
        { type: 'FullStored', lastRevision: 55 },
        { type: 'FullDone' },
        { type: 'WatchOpening' },
        { type: 'WatchOpened' },
        boundary(60, LIMIT),
      ],
      effects: [
        `WarnTimelineLeft:${BACKWARDS}`,
        'DropBuffer:timeline-left',
        'TakeFullSnapshot',
        'CloseWatch',
        'DropBuffer:new-chain',
        'ForgetTimeline',
        'OpenWatch',
        'CutDelta',
        'PauseWatch@61',
      ],
      state: { chainEnd: 55, timelineChanged: false, watching: true, epoch: 2 },
    },
  ]);
});

describe('capture step: a full snapshot and the delta chain', () => {
  table([
    {
      name: 'a healthy watch: the buffer goes into a delta first, the watch goes on, and the chain continues across the full',
      from: watching({ epoch: 5 }),
      events: [
        { type: 'FullStarting', bufferedBytes: 300 },
        { type: 'DeltaTaken', payloadBytes: payload(300) },
        { type: 'DeltaSaving', epoch: 5 },
        { type: 'DeltaStored', lastRevision: 120 },
        { type: 'DeltaSettled', payloadBytes: payload(300), bufferedBytes: 0 },
        { type: 'FullTaking' },
        { type: 'FullStored', lastRevision: 126 },
        { type: 'FullDone' },
        // The next delta starts after 120, at or below the full's revision.
        { type: 'DeltaSaving', epoch: 5 },
      ],
      effects: ['SaveBufferedDelta', 'SaveDelta', 'SaveDelta'],
      state: { chainEnd: 120, epoch: 5, watching: true, fullStartsNewChain: false },
    },
    {
      name: 'a healthy watch with nothing buffered: no delta first, the chain continues',
      from: watching(),
      events: [
        { type: 'FullStarting', bufferedBytes: 0 },
        { type: 'FullTaking' },
        { type: 'FullStored', lastRevision: 130 },
        { type: 'FullDone' },
      ],
      effects: [],
      state: { chainEnd: 100 },
    },
    {
      name: 'the first full of a run (no watch yet): a new chain starts after it and the watch opens',
      from: fresh({ running: true }),
      events: [
        { type: 'FullStarting', bufferedBytes: 0 },
        { type: 'FullTaking' },
        { type: 'FullStored', lastRevision: 130 },
        { type: 'FullDone' },
      ],
      effects: ['CloseWatch', 'DropBuffer:new-chain', 'ForgetTimeline', 'OpenWatch'],
      state: { chainEnd: 130, epoch: 1 },
    },
    {
      name: 'the delta before the full fails: the full starts a new chain (the old one ends before the failed delta)',
      from: watching(),
      events: [
        { type: 'FullStarting', bufferedBytes: 300 },
        { type: 'DeltaFailed' },
        { type: 'FullTaking' },
        { type: 'WatchClosing', own: true, paused: false },
        { type: 'FullStored', lastRevision: 140 },
        { type: 'FullDone' },
      ],
      effects: ['SaveBufferedDelta', 'DropBuffer:delta-failed', 'CloseWatch', 'DropBuffer:new-chain', 'ForgetTimeline', 'OpenWatch'],
      state: { chainEnd: 140, epoch: 2, deltaSaveFailed: true },
    },
    {
      name: 'after a failed delta the buffer is not saved first either',
      from: watching({ deltaSaveFailed: true }),
      events: [{ type: 'FullStarting', bufferedBytes: 300 }],
      effects: [],
    },
    {
      name: 'delta snapshots disabled: no watch after the full',
      from: fresh({ running: true, deltasEnabled: false }),
      events: [
        { type: 'FullStarting', bufferedBytes: 0 },
        { type: 'FullTaking' },
        { type: 'FullStored', lastRevision: 130 },
        { type: 'FullDone' },
      ],
      effects: ['CloseWatch', 'DropBuffer:new-chain', 'ForgetTimeline'],
    },
    {
      name: 'the run ended while the full was stored: no watch opened',
      from: fresh({ running: true }),
      events: [
        { type: 'FullStarting', bufferedBytes: 0 },
        { type: 'FullTaking' },
        { type: 'FullStored', lastRevision: 130 },
        { type: 'RunEnded' },
        { type: 'FullDone' },
      ],
      effects: ['CloseWatch', 'DropBuffer:new-chain', 'ForgetTimeline'],
    },
    {
      name: 'a full that would start a new chain fails; the next one, with a watch open by then, continues the chain',
      from: fresh({ running: true }),
      events: [
        { type: 'FullStarting', bufferedBytes: 0 },
        { type: 'FullTaking' },
        { type: 'WatchOpening' },
        { type: 'WatchOpened' },
        { type: 'FullStarting', bufferedBytes: 0 },
        { type: 'FullTaking' },
        { type: 'FullStored', lastRevision: 150 },
      ],
      effects: ['CloseWatch', 'DropBuffer:new-chain', 'ForgetTimeline'],
      state: { chainEnd: 100, epoch: 1, fullStartsNewChain: false },
    },
  ]);
});

describe('capture step: the stop flush', () => {
  table([
    {
      name: 'shutdown: wait for the writes etcd acknowledged, close the watch, write the buffer as the last delta',
      from: watching(),
      events: [
        { type: 'Stopping', leadershipLost: false },
        { type: 'StopWatchClosed', leadershipLost: false, bufferedBytes: 300 },
      ],
      effects: ['CatchUpBeforeStop', 'CloseWatch', 'WriteLastDelta'],
    },
    {
      name: 'shutdown with nothing buffered: only the writes under way finish',
      from: watching(),
      events: [
        { type: 'Stopping', leadershipLost: false },
        { type: 'StopWatchClosed', leadershipLost: false, bufferedBytes: 0 },
      ],
      effects: ['CatchUpBeforeStop', 'CloseWatch', 'AwaitWrites'],
    },
    {
      name: 'leadership lost: no waiting for more events, the buffer is left to the next leader',
      from: watching(),
      events: [
        { type: 'Stopping', leadershipLost: true },
        { type: 'StopWatchClosed', leadershipLost: true, bufferedBytes: 300 },
      ],
      effects: ['CloseWatch', 'DropBuffer:leadership-lost', 'AwaitWrites'],
    },
    {
      name: 'shutdown after a timeline change: no waiting on a watch of another history',
      from: watching({ timelineChanged: true }),
      events: [{ type: 'Stopping', leadershipLost: false }],
      effects: ['CloseWatch'],
    },
    {
      name: 'shutdown without a watch (deltas disabled): nothing to wait for',
      from: fresh({ running: true }),
      events: [
        { type: 'Stopping', leadershipLost: false },
        { type: 'StopWatchClosed', leadershipLost: false, bufferedBytes: 0 },
      ],
      effects: ['CloseWatch', 'AwaitWrites'],
    },
  ]);
});

describe('capture step: the idle delta period and the start-up catch-up', () => {
  table([
    {
      name: 'a delta period that stored nothing renews the delta lease',
      from: watching(),
      events: [{ type: 'DeltaPeriodEnded', stored: false }],
      effects: ['ReportIdlePeriod'],
    },
    {
      name: 'a delta period that stored a delta does not (onSnapshot does)',
      from: watching(),
      events: [{ type: 'DeltaPeriodEnded', stored: true }],
      effects: [],
    },
    {
      name: 'catch-up with nothing to catch up: an idle period',
      from: fresh(),
      events: [{ type: 'CatchUpStarting', target: 100 }],
      effects: ['ReportIdlePeriod'],
    },
    {
      name: 'catch-up: a watch from after the chain’s end, taking events again after a failed save',
      from: fresh({ deltaSaveFailed: true }),
      events: [{ type: 'CatchUpStarting', target: 150 }],
      effects: ['CatchUp@101'],
      state: { deltaSaveFailed: false },
    },
    {
      name: 'the catch-up’s paused watch is closed: it is not the snapshotter’s own',
      from: fresh({ pausedForMemory: true, watching: true }),
      events: [{ type: 'WatchClosing', own: false, paused: true }],
      effects: [],
      state: { pausedForMemory: false, watching: true },
    },
  ]);
});
