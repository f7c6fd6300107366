/**
 * Constants made with constantBytes hold memory of their own, never a slice of Node's shared Buffer pool
 * (one long-lived slice keeps a whole 64 KiB slab alive).
 */
import { describe, expect, it } from 'vitest';
import { KEY_BUCKET, LEASE_BUCKET, META_BUCKET } from '../../src/backend/schema.js';
import { constantBytes } from '../../src/encoding/constant-bytes.js';

/** Whether `b` is all of its ArrayBuffer (what a pooled Buffer never is: it is a slice of a slab). */
function ownsItsMemory(b: Buffer): boolean {
  return b.byteOffset === 0 && b.buffer.byteLength === b.length;
}

describe('constantBytes', () => {
  it('gives the bytes Buffer.from gives, in memory of their own', () => {
    for (const [text, encoding] of [
      ['key', 'utf8'],
      ['\n--- ', 'latin1'],
      ['PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1'],
      ['grüße', 'utf8'],
    ] as const) {
      const b = constantBytes(text, encoding);
      expect(b).toEqual(Buffer.from(text, encoding));
      expect(ownsItsMemory(b)).toBe(true);
    }
    // What it replaces: a small Buffer.from is a slice of the pool.
    expect(ownsItsMemory(Buffer.from('key'))).toBe(false);
  });

  it("is what etcd's bucket names are made with", () => {
    for (const b of [KEY_BUCKET, META_BUCKET, LEASE_BUCKET]) expect(ownsItsMemory(b)).toBe(true);
  });
});
