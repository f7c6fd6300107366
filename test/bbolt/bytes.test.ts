import { describe, expect, it } from 'vitest';
import { compareBytes, copyBytes, u16, u32, u64 } from '../../src/bbolt/format.js';

/** Keys that differ late, early, by length only, and long ones (the native path). */
function keyPairs(): Array<[Buffer, Buffer]> {
  const pairs: Array<[Buffer, Buffer]> = [];
  let x = 12345;
  const next = () => ((x = (x * 1103515245 + 12345) & 0x7fffffff), x);
  for (let i = 0; i < 3000; i++) {
    const n = next() % 100;
    const a = Buffer.alloc(n);
    for (let j = 0; j < n; j++) a[j] = next() % 4; // few distinct bytes: long common prefixes
    const b = Buffer.from(a);
    const kind = next() % 4;
    if (kind === 0 && n > 0) b[next() % n] = next() % 4;
    if (kind === 1) pairs.push([a, b.subarray(0, next() % (n + 1))]);
    else if (kind === 2) pairs.push([a, Buffer.concat([b, Buffer.from([next() % 256])])]);
    else pairs.push([a, b]);
  }
  return pairs;
}

describe('bbolt key comparison and copy', () => {
  it('orders keys as Buffer.compare does, short and long, at any offset', () => {
    for (const [a, b] of keyPairs()) {
      // Both keys inside one larger buffer, as keys sit in a page.
      const page = Buffer.concat([Buffer.from([9, 9, 9]), a, Buffer.from([7]), b, Buffer.from([5])]);
      const aS = 3;
      const bS = 3 + a.length + 1;
      expect(compareBytes(page, aS, aS + a.length, page, bS, bS + b.length)).toBe(Buffer.compare(a, b));
      expect(compareBytes(page, bS, bS + b.length, page, aS, aS + a.length)).toBe(Buffer.compare(b, a));
    }
  });

  it('copies short and long ranges into place', () => {
    for (const n of [0, 1, 17, 64, 65, 300]) {
      const src = Buffer.from(Array.from({ length: n + 4 }, (_, i) => (i * 7) & 0xff));
      const dst = Buffer.alloc(n + 10, 0xee);
      copyBytes(src, 2, 2 + n, dst, 5);
      expect(dst.subarray(5, 5 + n).equals(src.subarray(2, 2 + n))).toBe(true);
      expect(dst.subarray(0, 5).every((v) => v === 0xee)).toBe(true);
      expect(dst.subarray(5 + n).every((v) => v === 0xee)).toBe(true);
    }
  });

  it('reads little-endian integers as Buffer does, the top bit set included', () => {
    const buf = Buffer.alloc(64);
    const values = [0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 0xdeadbeef];
    for (const [i, v] of values.entries()) {
      buf.writeUInt32LE(v, i * 4);
      expect(u32(buf, i * 4)).toBe(v);
      expect(u16(buf, i * 4)).toBe(buf.readUInt16LE(i * 4));
    }
    for (const v of [0n, 1n, 0xffffffffn, 0x1_0000_0000n, 2n ** 53n - 1n]) {
      buf.writeBigUInt64LE(v, 40);
      expect(u64(buf, 40)).toBe(Number(v));
    }
  });
});
