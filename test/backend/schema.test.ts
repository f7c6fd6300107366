/** etcd's revision keys: written by revisionKey, read back by mainRevisionOf, also from inside a larger buffer. */
import { describe, expect, it } from 'vitest';
import { mainRevisionOf, revisionKey } from '../../src/backend/schema.js';

describe('revision keys', () => {
  it('the main revision reads back from a key and from a key inside a larger buffer', () => {
    for (const main of [1, 255, 2 ** 32 + 7, Number.MAX_SAFE_INTEGER]) {
      const key = revisionKey(main, 3, false);
      expect(key.subarray(8, 9).toString()).toBe('_');
      expect(mainRevisionOf(key)).toBe(main);
      const framed = Buffer.concat([Buffer.from('xx'), revisionKey(main, 0, true), Buffer.from('yy')]);
      expect(mainRevisionOf(framed, 2, framed.length - 2)).toBe(main);
    }
  });

  it('fewer than 8 bytes hold no revision', () => {
    expect(mainRevisionOf(Buffer.alloc(7))).toBeUndefined();
    expect(mainRevisionOf(Buffer.alloc(20), 13)).toBeUndefined();
    expect(mainRevisionOf(Buffer.alloc(20), 12)).toBe(0);
  });
});
