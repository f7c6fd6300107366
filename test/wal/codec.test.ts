import { describe, expect, it } from 'vitest';
import { crc32c } from '../../src/encoding/crc32c.js';
import { parseSnapName, parseWalName, snapName, walName } from '../../src/wal/names.js';
import { ProtoError, ProtoReader } from '../../src/encoding/protobuf.js';
import { decodeEntry, decodeHardState, decodeMemberMetadata, decodeRecord } from '../../src/wal/records.js';
import { selectSegments } from '../../src/wal/verify.js';
import { entry, fieldBytes, fieldVarint, hardState, metadata, varint } from './encoder.js';

/** Bit-by-bit CRC-32C, the reference the table-driven one must agree with. */
function slowCrc(buf: Uint8Array, prev = 0): number {
  let c = ~prev >>> 0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  }
  return ~c >>> 0;
}

describe('crc32c', () => {
  it('matches the published check values', () => {
    expect(crc32c(Buffer.from('123456789'))).toBe(0xe3069283);
    // RFC 3720 (iSCSI) B.4 test vectors.
    expect(crc32c(Buffer.alloc(32, 0))).toBe(0x8a9136aa);
    expect(crc32c(Buffer.alloc(32, 0xff))).toBe(0x62a8ab43);
    expect(crc32c(Buffer.from(Array.from({ length: 32 }, (_, i) => i)))).toBe(0x46dd794e);
    expect(crc32c(Buffer.alloc(0))).toBe(0);
  });

  it('agrees with the bitwise reference at every alignment and length, and chains', () => {
    const data = Buffer.from(Array.from({ length: 301 }, (_, i) => (i * 131 + 7) & 0xff));
    for (let start = 0; start < 9; start++) {
      for (const len of [0, 1, 7, 8, 9, 15, 16, 17, 63, 200]) {
        const part = data.subarray(start, start + len);
        expect(crc32c(data, 0, start, start + len)).toBe(slowCrc(part));
        expect(crc32c(Buffer.from(part))).toBe(slowCrc(part));
      }
    }
    const whole = crc32c(data);
    expect(crc32c(data, crc32c(data, 0, 0, 123), 123, data.length)).toBe(whole);
    expect(crc32c(data.subarray(77), crc32c(data.subarray(0, 77)))).toBe(whole);
  });
});

describe('protobuf decoding', () => {
  it('decodes 64-bit varints exactly', () => {
    const id = 0xf6cb54b6b9d77235n;
    const m = decodeMemberMetadata(metadata(0x37e4cbca80cfc179n, id));
    expect(m).toEqual({ nodeId: 0x37e4cbca80cfc179n, clusterId: id, nodeIdHex: '37e4cbca80cfc179', clusterIdHex: 'f6cb54b6b9d77235' });
    expect(decodeHardState(hardState(7, 0xffffffffffffffffn, 123456789012))).toEqual({
      term: 7,
      vote: 0xffffffffffffffffn,
      commit: 123456789012,
    });
    expect(decodeEntry(entry(2 ** 40, 3))).toEqual({ type: 0, term: 3, index: 2 ** 40 });
  });

  it('skips unknown fields and keeps the last value of a repeated scalar', () => {
    const buf = Buffer.concat([fieldVarint(9, 5), fieldBytes(10, Buffer.from('x')), fieldVarint(3, 1), fieldVarint(3, 2)]);
    expect(decodeEntry(buf).index).toBe(2);
  });

  it('rejects truncated and malformed input', () => {
    expect(() => decodeEntry(Buffer.from([0x18, 0x80]))).toThrow(ProtoError);
    expect(() => decodeEntry(Buffer.concat([varint((4 << 3) | 2), varint(10), Buffer.from('abc')]))).toThrow(/length beyond message/);
    expect(() => decodeEntry(Buffer.from([(3 << 3) | 2, 0]))).toThrow(/wrong wire type/);
    expect(() => decodeEntry(Buffer.from([(5 << 3) | 7]))).toThrow(/unsupported wire type/);
    expect(() => decodeEntry(Buffer.from([0x00]))).toThrow(/field number 0/);
    const r = new ProtoReader(Buffer.from([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]));
    r.next();
    expect(() => r.uint64Big()).toThrow(/longer than 10 bytes/);
  });

  it('decodes a walpb.Record without copying its data', () => {
    const rec = Buffer.concat([fieldVarint(1, 2), fieldVarint(2, 0xdeadbeef), fieldBytes(3, Buffer.from('hello'))]);
    const r = decodeRecord(rec, 0, rec.length);
    expect(r.type).toBe(2);
    expect(r.crc).toBe(0xdeadbeef);
    expect(rec.subarray(r.dataStart, r.dataEnd).toString()).toBe('hello');
  });
});

describe('file names', () => {
  it('parses and formats WAL and snapshot names', () => {
    expect(walName(1, 0x1f)).toBe('0000000000000001-000000000000001f.wal');
    expect(parseWalName('0000000000000001-000000000000001f.wal')).toEqual({
      name: '0000000000000001-000000000000001f.wal',
      seq: 1,
      index: 31,
    });
    expect(parseWalName('0.tmp')).toBeUndefined();
    expect(parseWalName('0000000000000001-000000000000001f.wal.broken')).toBeUndefined();
    expect(snapName(2, 0xcc)).toBe('0000000000000002-00000000000000cc.snap');
    expect(parseSnapName('0000000000000002-00000000000000cc.snap')).toMatchObject({ term: 2, index: 204 });
  });

  it('selects the segment covering the snapshot index and everything after it', () => {
    const names = [walName(0, 0), walName(1, 100), walName(2, 250)].map((n) => parseWalName(n)!);
    expect(selectSegments(names, 0)).toEqual(names);
    expect(selectSegments(names, 99)).toEqual(names);
    expect(selectSegments(names, 100)).toEqual(names.slice(1));
    expect(selectSegments(names, 1000)).toEqual(names.slice(2));
    expect(selectSegments(names.slice(1), 50)).toMatch(/no segment covers snapshot index 50/);
    expect(selectSegments([names[0]!, names[2]!], 0)).toMatch(/sequence broken/);
    expect(selectSegments([], 0)).toMatch(/no segment files/);
  });
});
