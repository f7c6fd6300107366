import { describe, expect, it } from 'vitest';
import { newSnapshot, type Logger, type Snapshot } from '@etcdbrctl/snapstore';
import { ReplayProgress } from '../../src/restorer/replay-progress.js';
import type { RestorePlan } from '../../src/restorer/plan.js';

const incr = (start: number, last: number) =>
  newSnapshot({ kind: 'Incr', startRevision: start, lastRevision: last, createdOn: new Date(start * 1000), compressionSuffix: '.gz' });

/** A logger that keeps each line's fields. */
function fieldsLogger(): Logger & { lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const at = (obj: object | string) => {
    if (typeof obj === 'object') lines.push({ ...obj });
  };
  return { lines, debug: at, info: at, warn: at, error: at };
}

describe('ReplayProgress', () => {
  // Ten deltas of 1000 revisions each, from revision 1000 to 11000.
  const deltas: Snapshot[] = Array.from({ length: 10 }, (_, i) => incr(1001 + i * 1000, 1000 + (i + 1) * 1000));
  const plan: RestorePlan = { base: undefined, deltas, targetRevision: 11_000, fetchBytes: 0 };

  it('gives no rate and no estimate before it has measured a few seconds of applying', () => {
    let now = 0;
    const logger = fieldsLogger();
    const progress = new ReplayProgress(plan, 1000, logger, () => now);
    // Fetching the first delta took 30 s: the first line must not turn that into a rate (the bug said
    // etaSeconds=2974 for a replay that ended 0.5 s later).
    now = 30_000;
    progress.delta(deltas[0]!, 2000);
    expect(logger.lines).toHaveLength(1);
    expect(logger.lines[0]).toMatchObject({ deltasApplied: 1, deltas: 10, revision: 2000, targetRevision: 11_000 });
    expect(logger.lines[0]).not.toHaveProperty('etaSeconds');
    expect(logger.lines[0]).not.toHaveProperty('revisionsPerSecond');
    // Within the log interval: no line.
    now = 31_000;
    progress.delta(deltas[1]!, 3000);
    expect(logger.lines).toHaveLength(1);
    // 5 s after the first delta, 4000 revisions later: 800 revisions/s, 5000 revisions left ⇒ about 6 s.
    now = 35_000;
    progress.delta(deltas[5]!, 6000);
    expect(logger.lines).toHaveLength(2);
    expect(logger.lines[1]).toMatchObject({ deltasApplied: 6, revisionsPerSecond: 800, etaSeconds: 6 });
  });

  it('logs the last delta with the overall rate and no estimate, however soon it comes', () => {
    let now = 0;
    const logger = fieldsLogger();
    const progress = new ReplayProgress(plan, 1000, logger, () => now);
    now = 100;
    progress.delta(deltas[0]!, 2000);
    now = 500;
    progress.delta(deltas[9]!, 11_000);
    expect(logger.lines).toHaveLength(2);
    expect(logger.lines[0]).not.toHaveProperty('etaSeconds');
    expect(logger.lines[1]).toMatchObject({ deltasApplied: 10, revision: 11_000, revisionsPerSecond: 20_000 });
    expect(logger.lines[1]).not.toHaveProperty('etaSeconds');
  });
});
