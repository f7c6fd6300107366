/**
 * Sequential decoder of etcd WAL segments, with the CRC chain.
 *
 * Frame: an 8-byte little-endian length word, then a walpb.Record padded to 8 bytes. The low 56 bits of the
 * word are the record size; if the top bit is set, the low 3 bits of the top byte are the padding size. A
 * zero word is the preallocated (zero-filled) rest of a segment: decoding moves on to the next segment.
 *
 * CRC chain: every record except crc records carries crc32c(data) continued from the previous record's value,
 * across segment boundaries. Each segment starts with a crc record holding the running value at the end of
 * the previous segment; it must match, except on the very first segment read (the running value is 0 there).
 *
 * Torn writes: like etcd's decoder, a record in the last segment that does not decode or fails its CRC is a
 * torn write (repairable by truncating the segment, which etcd does itself on start) when one of its 512-byte
 * sectors is all zeros, or when the segment ends inside it. Anywhere else it is corruption.
 */
import { CodedError } from '../errors.js';
import { open } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { crc32c } from '../encoding/crc32c.js';
import { ProtoError } from '../encoding/protobuf.js';
import { RecordType, decodeRecord } from './records.js';
import type { WalRecord } from './records.js';

const SECTOR = 512;
const TWO_32 = 4294967296;

export interface WalScanProblem {
  file: string;
  /** Offset of the frame in the file. */
  offset: number;
  message: string;
  /**
   * Torn records only: more frames follow in the segment. etcd still truncates there (everything after a
   * torn write belongs to writes that never completed), but it is worth a warning.
   */
  followedByRecords?: boolean;
}

export interface WalScanOutcome {
  /** 'eof': every segment read to its end; 'torn': stopped at a torn last record; 'corrupt'; 'stopped' by the visitor. */
  end: 'eof' | 'torn' | 'corrupt' | 'stopped';
  problem?: WalScanProblem;
  /** Bytes of valid frames decoded (the part of the segments that holds records). */
  bytes: number;
  records: number;
}

/**
 * Called for every valid non-crc record, in order. `buf[rec.dataStart, rec.dataEnd)` is the record's data,
 * only valid during the call. Return false to stop scanning.
 */
export type WalVisitor = (rec: WalRecord, buf: Buffer, file: string, offset: number) => boolean | void;

export interface WalScanOptions {
  /** Read size; records larger than this grow the buffer. Default 8 MiB. */
  readBytes?: number;
}

class Stop extends CodedError {
  readonly code = 'E_WAL_SCAN_STOP';
  constructor(
    readonly kind: 'torn' | 'corrupt',
    readonly problem: WalScanProblem,
  ) {
    super(problem.message);
  }
}

/** Decodes `paths` (segments in order) as one WAL stream; never throws for bad content, only for I/O. */
export async function scanWal(paths: readonly string[], visit: WalVisitor, opts: WalScanOptions = {}): Promise<WalScanOutcome> {
  const readBytes = opts.readBytes ?? 8 << 20;
  let buf = Buffer.allocUnsafeSlow(readBytes);
  let runningCrc = 0;
  let bytes = 0;
  let records = 0;

  for (let f = 0; f < paths.length; f++) {
    const file = paths[f]!;
    const isLast = f === paths.length - 1;
    const fh: FileHandle = await open(file, 'r');
    try {
      const size = (await fh.stat()).size;
      // [bufStart, bufStart + have) of the file is in buf[0, have); p is the cursor in buf.
      let bufStart = 0;
      let have = 0;
      let p = 0;
      let eof = false;

      /** Makes buf hold at least n bytes from p on; false when the file ends first. */
      const ensure = async (n: number): Promise<boolean> => {
        if (have - p >= n) return true;
        if (p > 0) {
          buf.copy(buf, 0, p, have);
          bufStart += p;
          have -= p;
          p = 0;
        }
        if (n > buf.length) {
          const bigger = Buffer.allocUnsafeSlow(Math.max(n, buf.length * 2));
          buf.copy(bigger, 0, 0, have);
          buf = bigger;
        }
        while (have < n && !eof) {
          const { bytesRead } = await fh.read(buf, have, buf.length - have, bufStart + have);
          if (bytesRead === 0) eof = true;
          have += bytesRead;
        }
        return have - p >= n;
      };

      for (;;) {
        const offset = bufStart + p;
        if (!(await ensure(8))) {
          if (have - p === 0) break; // clean end of segment
          stopTornOrCorrupt(isLast, file, offset, `segment ends inside a frame header (${have - p} bytes)`);
        }
        const lo = buf.readUInt32LE(p);
        const hi = buf.readUInt32LE(p + 4);
        if (lo === 0 && hi === 0) break; // preallocated space
        const recBytes = (hi & 0x00ffffff) * TWO_32 + lo;
        const padBytes = hi & 0x80000000 ? (hi >>> 24) & 7 : 0;
        const frameBytes = recBytes + padBytes;
        if (frameBytes > size - offset - 8) {
          stopTornOrCorrupt(isLast, file, offset, `record of ${recBytes} bytes runs past the end of the segment`);
        }
        if (!(await ensure(8 + frameBytes))) {
          stopTornOrCorrupt(isLast, file, offset, 'segment ends inside a record');
        }
        const start = p + 8;
        const end = start + recBytes;
        let rec: WalRecord;
        try {
          rec = decodeRecord(buf, start, end);
        } catch (err) {
          if (!(err instanceof ProtoError)) throw err;
          if (isLast && isTorn(buf, start, start + frameBytes, offset + 8)) {
            throw new Stop('torn', {
              file,
              offset,
              message: `torn record (undecodable, zeroed sector): ${err.message}`,
              followedByRecords: (await ensure(16 + frameBytes)) && !isZero(buf, p + 8 + frameBytes, p + 16 + frameBytes),
            });
          }
          throw new Stop('corrupt', { file, offset, message: `undecodable record: ${err.message}` });
        }
        if (rec.type === RecordType.Crc) {
          // The first segment read starts a fresh chain: its crc record only seeds the running value.
          if (runningCrc !== 0 && rec.crc !== runningCrc) {
            throw new Stop('corrupt', {
              file,
              offset,
              message: `crc record ${hex(rec.crc)} does not match the running crc ${hex(runningCrc)} (previous segment altered)`,
            });
          }
          runningCrc = rec.crc;
        } else {
          const crc = crc32c(buf, runningCrc, rec.dataStart, rec.dataEnd);
          if (crc !== rec.crc) {
            if (isLast && isTorn(buf, start, start + frameBytes, offset + 8)) {
              throw new Stop('torn', {
                file,
                offset,
                message: 'torn record (crc mismatch, zeroed sector)',
                followedByRecords: (await ensure(16 + frameBytes)) && !isZero(buf, p + 8 + frameBytes, p + 16 + frameBytes),
              });
            }
            throw new Stop('corrupt', {
              file,
              offset,
              message: `crc mismatch: record says ${hex(rec.crc)}, data gives ${hex(crc)} (type ${rec.type})`,
            });
          }
          runningCrc = crc;
          records++;
          if (visit(rec, buf, file, offset) === false) {
            bytes += 8 + frameBytes;
            return { end: 'stopped', bytes, records };
          }
        }
        bytes += 8 + frameBytes;
        p += 8 + frameBytes;
      }
    } catch (err) {
      if (err instanceof Stop) return { end: err.kind, problem: err.problem, bytes, records };
      throw err;
    } finally {
      await fh.close();
    }
  }
  return { end: 'eof', bytes, records };
}

function stopTornOrCorrupt(isLast: boolean, file: string, offset: number, what: string): never {
  // A short last segment is etcd's io.ErrUnexpectedEOF: the tail of an interrupted write.
  if (isLast) throw new Stop('torn', { file, offset, message: `torn tail: ${what}`, followedByRecords: false });
  throw new Stop('corrupt', { file, offset, message: `truncated segment: ${what}` });
}

function isZero(buf: Buffer, start: number, end: number): boolean {
  for (let i = start; i < end; i++) if (buf[i] !== 0) return false;
  return true;
}

/** True if any 512-byte sector piece of the frame body `buf[start, end)` (file offset `fileOff`) is all zero. */
function isTorn(buf: Buffer, start: number, end: number, fileOff: number): boolean {
  let i = start;
  let off = fileOff;
  while (i < end) {
    const n = Math.min(SECTOR - (off % SECTOR), end - i);
    if (isZero(buf, i, i + n)) return true;
    i += n;
    off += n;
  }
  return false;
}

function hex(n: number): string {
  return `0x${n.toString(16).padStart(8, '0')}`;
}
