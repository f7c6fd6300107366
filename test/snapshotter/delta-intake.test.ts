import { describe, expect, it } from 'vitest';
import { silentLogger } from '@etcdbrctl/snapstore';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { deltaEventJsonLength } from '../../src/backup/delta-write.js';
import type { EtcdClient } from '../../src/etcd/index.js';
import { Metrics } from '../../src/metrics.js';
import { CaptureMachine } from '../../src/snapshotter/capture-machine.js';
import { initialCaptureState, type CaptureState } from '../../src/snapshotter/capture-step.js';
import { DeltaIntake, type TakenDelta } from '../../src/snapshotter/delta-intake.js';
import type { PausableWatch } from '../../src/snapshotter/pausable-watch.js';

/**
 * The per-event path as a table: watch responses (each a list of event revisions; a revision listed twice is a
 * transaction's) through DeltaIntake with a real DeltaBuffer and the capture step ⇒ where deltas are cut,
 * where the watch pauses, and what stays buffered.
 */

const event = (modRevision: number): DeltaEvent => ({
  type: 'PUT',
  key: Buffer.from('key'),
  value: Buffer.alloc(100, 1),
  createRevision: modRevision,
  modRevision,
  version: 1,
  lease: '0',
  time: '2026-11-28T10:00:00Z',
});
/** What one event (of a three-digit revision) counts in the buffer: its JSON and the separator before it. */
const EVENT_BYTES = 1 + deltaEventJsonLength(event(101));

interface Row {
  name: string;
  /** State fields over a running snapshotter whose watch is open from revision 101. */
  over?: Partial<CaptureState>;
  /** The last revision taken before the first response (100: the chain's end). */
  takenBefore?: number;
  /** The memory limit, in events. */
  limitEvents: number;
  responses: number[][];
  /** Each delta cut at the limit, as first-last revision. */
  cuts: string[];
  /** The revision the watch was paused at (the first one not taken), if it was. */
  pausedAt?: number;
  /** The buffer afterwards, as first-last revision ('' when empty). */
  buffered: string;
  takenRevision: number;
  /** The most events the buffer and the deltas being saved held together (the peak), beside `over.savingBytes`. */
  peakEvents: number;
}

const rows: Row[] = [
  {
    name: 'under the limit: everything is buffered',
    limitEvents: 10,
    responses: [[101, 102], [103]],
    cuts: [],
    buffered: '101-103',
    takenRevision: 103,
    peakEvents: 3,
  },
  {
    name: 'the limit reached inside a response: cut before the next revision, the rest of the response held back by the pause',
    limitEvents: 3,
    responses: [[101, 102, 103, 104, 105]],
    cuts: ['101-103'],
    pausedAt: 104,
    buffered: '',
    takenRevision: 103,
    peakEvents: 3,
  },
  {
    name: 'the limit reached at the end of a response: cut there (a response ends at a revision boundary)',
    limitEvents: 3,
    responses: [[101, 102], [103]],
    cuts: ['101-103'],
    pausedAt: 104,
    buffered: '',
    takenRevision: 103,
    peakEvents: 3,
  },
  {
    name: 'a transaction is never split: the limit is reached inside revision 102, the cut comes after all of it',
    limitEvents: 2,
    responses: [[101, 102, 102, 102, 103]],
    cuts: ['101-102'],
    pausedAt: 103,
    buffered: '',
    takenRevision: 102,
    peakEvents: 4,
  },
  {
    name: 'events the chain already holds are not buffered again',
    over: { chainEnd: 102 },
    takenBefore: 98,
    limitEvents: 10,
    responses: [[99, 100, 101, 102, 103]],
    cuts: [],
    buffered: '103-103',
    takenRevision: 103,
    peakEvents: 1,
  },
  {
    name: 'a delta being saved fills the memory with the first event: paused at the next revision, nothing cut',
    over: { savingBytes: 2 * EVENT_BYTES },
    limitEvents: 3,
    responses: [[101, 102, 103]],
    cuts: [],
    pausedAt: 102,
    buffered: '101-101',
    takenRevision: 101,
    peakEvents: 1,
  },
  {
    name: 'after a failed delta save nothing is taken',
    over: { deltaSaveFailed: true },
    limitEvents: 1,
    responses: [[101, 102, 103]],
    cuts: [],
    buffered: '',
    takenRevision: 100,
    peakEvents: 0,
  },
  {
    name: 'after a timeline change nothing is taken',
    over: { timelineChanged: true },
    limitEvents: 1,
    responses: [[101, 102, 103]],
    cuts: [],
    buffered: '',
    takenRevision: 100,
    peakEvents: 0,
  },
];

describe('DeltaIntake: watch responses into the buffer, cut and paused as the capture step decides', () => {
  it.each(rows)('$name', (row) => {
    const machine = new CaptureMachine({
      ...initialCaptureState({ memoryLimit: row.limitEvents * EVENT_BYTES, deltasEnabled: true, chainEnd: 100 }),
      running: true,
      watching: true,
      ...row.over,
    });
    const cuts: TakenDelta[] = [];
    const intake = new DeltaIntake(
      machine,
      { client: {} as EtcdClient, logger: silentLogger, metrics: new Metrics({ defaultMetrics: false }) },
      (taken) => {
        cuts.push(taken);
        return Promise.resolve();
      },
    );
    intake.takeAfter(row.takenBefore ?? 100);
    let pausedAt: number | undefined;
    const watch = {
      get paused() {
        return pausedAt !== undefined;
      },
      pause(next: number) {
        pausedAt = next;
      },
    } as unknown as PausableWatch;
    for (const response of row.responses) {
      if (pausedAt !== undefined) break;
      intake.append(response.map(event), watch);
    }
    expect(cuts.map((c) => `${c.payload.firstRevision}-${c.payload.lastRevision}`)).toEqual(row.cuts);
    expect(pausedAt).toBe(row.pausedAt);
    expect(intake.buffer.isEmpty ? '' : `${intake.buffer.firstRevision}-${intake.buffer.lastRevision}`).toBe(row.buffered);
    expect(intake.takenRevision).toBe(row.takenRevision);
    // A cut delta counts against the limit until it settles; the buffer and the deltas never exceed the limit by more than a revision.
    expect(machine.state.savingBytes).toBe((row.over?.savingBytes ?? 0) + cuts.reduce((n, c) => n + c.payload.byteLength, 0));
    expect(intake.peakBytes).toBe(row.peakEvents * EVENT_BYTES + (row.over?.savingBytes ?? 0));
  });
});
