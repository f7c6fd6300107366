/**
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of etcd's WAL records and .snap files.
 * Node has no CRC-32C of its own (zlib.crc32 is the IEEE polynomial), so this is table-driven slicing-by-8
 * that reads the input as 32-bit words where it can: that keeps verifying a large WAL close to disk speed.
 *
 * `crc32c(data, prev)` continues a running checksum like Go's `crc32.Update(prev, castagnoliTable, data)`:
 * the inversions are applied per call, so chained calls equal one call over the concatenated bytes.
 */
import { endianness } from 'node:os';

const POLY = 0x82f63b78;

// Eight 256-entry tables in one array: T[k * 256 + b] is the CRC of byte b followed by k zero bytes.
const T = new Int32Array(8 * 256);
for (let b = 0; b < 256; b++) {
  let c = b;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
  T[b] = c;
}
for (let b = 0; b < 256; b++) {
  let c = T[b]!;
  for (let k = 1; k < 8; k++) {
    c = T[c & 0xff]! ^ (c >>> 8);
    T[k * 256 + b] = c;
  }
}

// Word reads through an Int32Array only give the right byte order on little-endian hosts.
const LITTLE_ENDIAN = endianness() === 'LE';

/** CRC-32C of `buf[start, end)` continued from `prev` (0 for a fresh checksum); an unsigned 32-bit value. */
export function crc32c(buf: Uint8Array, prev = 0, start = 0, end = buf.length): number {
  let crc = ~prev;
  let i = start;
  if (LITTLE_ENDIAN) {
    // Bytewise up to a 4-byte aligned address, then 8 bytes per step as two aligned words.
    while (i < end && ((buf.byteOffset + i) & 3) !== 0) {
      crc = T[(crc ^ buf[i]!) & 0xff]! ^ (crc >>> 8);
      i++;
    }
    const steps = (end - i) >>> 3;
    if (steps > 0) {
      const words = new Int32Array(buf.buffer, buf.byteOffset + i, steps * 2);
      const n = words.length;
      for (let j = 0; j < n; j += 2) {
        const lo = crc ^ words[j]!;
        const hi = words[j + 1]!;
        crc =
          T[1792 + (lo & 0xff)]! ^
          T[1536 + ((lo >>> 8) & 0xff)]! ^
          T[1280 + ((lo >>> 16) & 0xff)]! ^
          T[1024 + (lo >>> 24)]! ^
          T[768 + (hi & 0xff)]! ^
          T[512 + ((hi >>> 8) & 0xff)]! ^
          T[256 + ((hi >>> 16) & 0xff)]! ^
          T[hi >>> 24]!;
      }
      i += steps * 8;
    }
  }
  while (i < end) {
    crc = T[(crc ^ buf[i]!) & 0xff]! ^ (crc >>> 8);
    i++;
  }
  return ~crc >>> 0;
}
