/** The protobuf varint writer against encodings fixed by the protobuf spec, and read back by our reader. */
import { describe, expect, it } from 'vitest';
import { varintSize, writeVarint } from '../../src/encoding/protobuf-write.js';

/** Known encodings: the protobuf encoding guide's 1 and 150, the 7-bit boundaries, 2^32 and 2^53 - 1. */
const KNOWN: Array<[number, string]> = [
  [0, '00'],
  [1, '01'],
  [127, '7f'],
  [128, '8001'],
  [150, '9601'],
  [300, 'ac02'],
  [16383, 'ff7f'],
  [16384, '808001'],
  [2 ** 31 - 1, 'ffffffff07'],
  [2 ** 31, '8080808008'],
  [2 ** 32, '8080808010'],
  [2 ** 53 - 1, 'ffffffffffffff0f'],
];

describe('protobuf varint writer', () => {
  it.each(KNOWN)('writes %d as %s, at an offset, and sizes it right', (n, hex) => {
    const buf = Buffer.alloc(12, 0xee);
    const end = writeVarint(buf, 2, n);
    expect(buf.subarray(2, end).toString('hex')).toBe(hex);
    expect(end - 2).toBe(varintSize(n));
    expect(buf[0]).toBe(0xee);
    expect(buf[end]).toBe(0xee);
  });
});
