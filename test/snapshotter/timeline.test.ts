import { describe, expect, it } from 'vitest';
import { advanceTimeline, continuesTimeline } from '../../src/snapshotter/timeline.js';

describe('continuesTimeline', () => {
  it('anything continues when nothing was seen yet', () => {
    expect(continuesTimeline(undefined, { revision: 1, clusterId: '7' })).toEqual({ continues: true });
  });

  it('a growing or equal revision of the same cluster continues', () => {
    expect(continuesTimeline({ revision: 10, clusterId: '7' }, { revision: 10, clusterId: '7' }).continues).toBe(true);
    expect(continuesTimeline({ revision: 10, clusterId: '7' }, { revision: 11, clusterId: '7' }).continues).toBe(true);
    expect(continuesTimeline({ revision: 10 }, { revision: 11, clusterId: '7' }).continues).toBe(true);
  });

  it('a revision going backwards breaks the chain, saying from where to where', () => {
    const v = continuesTimeline({ revision: 120, clusterId: '7' }, { revision: 100, clusterId: '7' });
    expect(v).toEqual({ continues: false, reason: expect.stringContaining('went backwards from 120 to 100') });
  });

  it('another cluster ID breaks the chain even with a higher revision', () => {
    const v = continuesTimeline({ revision: 120, clusterId: '7' }, { revision: 500, clusterId: '8' });
    expect(v).toEqual({ continues: false, reason: expect.stringContaining('cluster ID changed from 7 to 8') });
  });
});

describe('advanceTimeline', () => {
  it('keeps the highest revision and the first cluster ID known', () => {
    expect(advanceTimeline(undefined, { revision: 5 })).toEqual({ revision: 5, clusterId: undefined });
    expect(advanceTimeline({ revision: 5 }, { revision: 9, clusterId: '7' })).toEqual({ revision: 9, clusterId: '7' });
    expect(advanceTimeline({ revision: 9, clusterId: '7' }, { revision: 9, clusterId: '7' })).toEqual({ revision: 9, clusterId: '7' });
  });
});
