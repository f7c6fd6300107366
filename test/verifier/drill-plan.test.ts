/**
 * The hash drill's decisions (src/verifier/drill-plan.ts): the revision compared at, the bisection's probes,
 * how answers narrow the range, and the objects named for a range.
 */
import { describe, expect, it } from 'vitest';
import { newSnapshot } from '@etcdbrctl/snapstore';
import {
  DELTA_EXPANSION,
  bisectionProbes,
  drillRevision,
  narrow,
  objectsHolding,
  rangeWords,
  scratchSpaceProblem,
} from '../../src/verifier/drill-plan.js';

describe('the drill plan', () => {
  it('compares at the newest revision the store and every member have', () => {
    expect(drillRevision(100, [120, 130])).toBe(100);
    expect(drillRevision(100, [90, 130])).toBe(90);
  });

  it('probes lie strictly inside the range, evenly, at most three, none when it is one revision wide', () => {
    expect(bisectionProbes(0, 100)).toEqual([25, 50, 75]);
    expect(bisectionProbes(10, 13)).toEqual([11, 12]);
    expect(bisectionProbes(10, 12)).toEqual([11]);
    expect(bisectionProbes(10, 11)).toEqual([]);
  });

  it('the first differing probe ends the range and the one before it starts it', () => {
    const r = { lo: 0, hi: 100, loEqual: false };
    expect(narrow(r, [25, 50, 75], [true, false, false])).toEqual({ lo: 25, hi: 50, loEqual: true });
    expect(narrow(r, [25, 50, 75], [false, false, false])).toEqual({ lo: 0, hi: 25, loEqual: false });
    expect(narrow(r, [25, 50, 75], [true, true, true])).toEqual({ lo: 75, hi: 100, loEqual: true });
    // Not monotonic (a difference at or below the compaction that a later revision supersedes): the first boundary.
    expect(narrow(r, [25, 50, 75], [false, true, false])).toEqual({ lo: 0, hi: 25, loEqual: false });
  });

  it('names the full when the range reaches into it, and the deltas that overlap it', () => {
    const at = (kind: 'Full' | 'Incr', start: number, last: number) =>
      newSnapshot({ kind, startRevision: start, lastRevision: last, createdOn: new Date(last * 1000), compressionSuffix: '' });
    const base = at('Full', 0, 10);
    const deltas = [at('Incr', 11, 20), at('Incr', 21, 30), at('Incr', 31, 40)];
    expect(objectsHolding(base, 10, deltas, 25, 25)).toEqual([deltas[1]!.snapName]);
    expect(objectsHolding(base, 10, deltas, 5, 21)).toEqual([base.snapName, deltas[0]!.snapName, deltas[1]!.snapName]);
    expect(rangeWords(7, 7)).toBe('revision 7');
    expect(rangeWords(7, 9)).toBe('revisions 7 to 9');
  });

  it('fetches the chain only where it leaves a twentieth of the file system (at least 64 MiB) free', () => {
    const GiB = 1024 ** 3;
    const MiB = 1024 ** 2;
    const volume = { fsBytes: 20 * GiB, memberDbBytes: 8 * GiB, baseStoredBytes: 2 * GiB, deltaStoredBytes: 100 * MiB };
    const needed = 8 * GiB + DELTA_EXPANSION * 100 * MiB;
    expect(scratchSpaceProblem({ ...volume, freeBytes: needed + GiB })).toBeUndefined();
    expect(scratchSpaceProblem({ ...volume, freeBytes: needed + GiB - 1 })).toContain('must stay free there');
    // An uncompressed full larger than the member's database now (it shrank since): the full counts.
    expect(
      scratchSpaceProblem({ fsBytes: GiB, memberDbBytes: MiB, baseStoredBytes: 900 * MiB, deltaStoredBytes: 0, freeBytes: 950 * MiB }),
    ).toContain('needs about 900 MiB');
    expect(
      scratchSpaceProblem({ fsBytes: GiB, memberDbBytes: MiB, baseStoredBytes: 10 * MiB, deltaStoredBytes: 0, freeBytes: 80 * MiB }),
    ).toBeUndefined();
  });
});
