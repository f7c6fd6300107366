/** Two consecutive deltas that hold some of the same revisions: a cut transaction or an overlap (overlap.ts). */
import { describe, expect, it } from 'vitest';
import { alignOverlap, DeltaOverlapMismatchError, type ComparedEvent } from '../../src/restorer/overlap.js';

/** `10a` is a put of key `a` at revision 10 with value `a@10`; `10a!` the same key with another value. */
function ev(spec: string): ComparedEvent {
  const m = /^(\d+)([a-z]+)(!?)$/.exec(spec)!;
  const revision = Number(m[1]);
  return {
    revision,
    type: 'PUT',
    key: m[2]!,
    valueDigest: `${m[2]}@${revision}${m[3]}`,
    createRevision: revision,
    version: 1,
    lease: '0',
  };
}
const evs = (specs: string): ComparedEvent[] => (specs === '' ? [] : specs.split(' ').map(ev));

function align(prevTail: string, nextHead: string, nextGoesOn = true) {
  return alignOverlap({ prevTail: evs(prevTail), nextHead: evs(nextHead), nextGoesOn, prevName: 'Incr-A', nextName: 'Incr-B' });
}

describe('alignOverlap', () => {
  it.each([
    ['no shared revision', '12a', '', { skip: 0, continuesLastRevision: false }],
    [
      'same start, the later reaches further (two leaders)',
      '10a 11a 12a 12b',
      '10a 11a 12a 12b',
      { skip: 4, continuesLastRevision: false },
    ],
    ['a transaction cut: the rest of the last revision', '12a', '12b 12c', { skip: 0, continuesLastRevision: true }],
    [
      'an overlap whose earlier delta was cut: the shared part, then the rest of the cut revision',
      '11a 12a',
      '11a 12a 12b',
      { skip: 2, continuesLastRevision: true },
    ],
    ['the later delta starts inside a revision (cut there itself)', '11a 11b 12a', '11b 12a', { skip: 2, continuesLastRevision: false }],
    [
      'events from before the earlier delta were applied from the ones before it',
      '11a 12a',
      '10z 11a 12a',
      { skip: 3, continuesLastRevision: false },
    ],
  ])('%s', (_what, prev, next, expected) => {
    expect(align(prev, next)).toEqual(expected);
  });

  it('a later delta that ends inside the earlier one is redundant', () => {
    expect(align('10a 11a 12a', '10a 11a', false)).toEqual({ skip: 2, continuesLastRevision: false });
  });

  it.each([
    ['a value differs', '10a 11a 12a', '10a 11a! 12a', /both hold revision 11, but their events at it differ/],
    ['an event is missing in the later delta', '10a 11a 11b 12a', '10a 11a 12a', /both hold revision 11|revision 12/],
    [
      'the later delta has an extra event inside a complete revision',
      '10a 11a 12a',
      '10a 11a 11b 12a',
      /both hold revision 11, but their events at it differ/,
    ],
    ['nothing shared, and not the last revision', '11a 12a', '11b 12b', /revision 11/],
    ['a shared key in a revision that looks continued', '12a', '12b 12a', /revision 12/],
    ['the later delta stops inside and goes on', '10a 11a 12a', '10a 11a', /revision 12, but the later one lacks events/],
  ])('names both objects when %s', (_what, prev, next, message) => {
    const run = () => align(prev, next);
    expect(run).toThrow(DeltaOverlapMismatchError);
    expect(run).toThrow(/delta snapshots Incr-A and Incr-B/);
    expect(run).toThrow(message);
  });
});
