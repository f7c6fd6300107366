import { describe, expect, it } from 'vitest';
import { fnv1a30, KeyStates } from '../../src/restorer/key-states.js';

describe('KeyStates (the offline replay’s per-key memory)', () => {
  it.each([
    ['FNV-1a', fnv1a30],
    ['a hash under which every key collides', () => 7],
  ])('finds each key by its bytes, tells apart keys that differ in one byte or in length (%s)', (_what, hash) => {
    const states = new KeyStates(hash);
    const keys = ['/registry/a', '/registry/b', '/registry/a/', '/registry/', '', '\u00ff\u0000x'].map((k) => Buffer.from(k, 'latin1'));
    keys.forEach((k, i) => {
      expect(states.get(k)).toBeUndefined();
      states.add(k, { createRevision: i + 1, version: 1, live: true });
    });
    expect(states.size).toBe(keys.length);
    keys.forEach((k, i) => {
      // A fresh Buffer with the same bytes finds the same state.
      expect(states.get(Buffer.from(k))).toEqual(expect.objectContaining({ createRevision: i + 1, version: 1, live: true }));
    });
    const s = states.get(Buffer.from('/registry/b'))!;
    s.version = 9;
    s.live = false;
    expect(states.get(Buffer.from('/registry/b'))).toEqual(expect.objectContaining({ createRevision: 2, version: 9, live: false }));
    expect(states.get(Buffer.from('/registry/c'))).toBeUndefined();
  });

  it('spreads keys over the 30-bit hash space as a small integer', () => {
    const seen = new Set<number>();
    for (let i = 0; i < 10_000; i++) {
      const h = fnv1a30(Buffer.from(`/registry/pods/ns-${i % 97}/pod-${i}`));
      expect(Number.isInteger(h) && h >= 0 && h < 2 ** 30).toBe(true);
      seen.add(h);
    }
    expect(seen.size).toBeGreaterThan(9_990);
  });
});
