/**
 * One delta event as a compact record: how the sidecar's delta buffer (src/snapshotter/delta-buffer.ts) holds
 * the events of a delta until it is saved, and what the JSON writer (delta-write.ts) reads them from. The key
 * and value stay as they are and the revisions are numbers, so a record is about three quarters of the JSON it
 * becomes (base64 and the field names come only when the delta is written out).
 *
 * Layout: u8 flags (1 = DELETE), u32 key length, u32 value length, f64 create revision, f64 mod revision,
 * f64 version, u8 lease length, u16 time length, then the lease (ASCII digits), the time (UTF-8), the key and
 * the value. Revisions and versions are below 2^53 (etcd's are int64 counters that never get there).
 */
import { EtcdbrError } from '../errors.js';
import type { DeltaEvent } from './delta-format.js';

export const RECORD_HEADER_BYTES = 1 + 4 + 4 + 8 + 8 + 8 + 1 + 2;
/** Where each header field of a record starts, from the record's start (the order above). */
export const FIELD = {
  type: 0,
  keyLength: 1,
  valueLength: 5,
  createRevision: 9,
  modRevision: 17,
  version: 25,
  leaseLength: 33,
  timeLength: 34,
} as const;
/** The flags value of a DELETE. */
export const RECORD_DELETE = 1;

/**
 * The bytes the record of `ev` takes, whose time is `timeBytes` of UTF-8. Throws (E_INVALID_INPUT) for an
 * event whose lease ID or time does not fit the record's length fields.
 */
export function recordLength(ev: DeltaEvent, timeBytes: number): number {
  if (ev.lease.length > 0xff || timeBytes > 0xffff)
    throw new EtcdbrError('E_INVALID_INPUT', `delta event at revision ${ev.modRevision}: lease ID or time too long to record`);
  return RECORD_HEADER_BYTES + ev.lease.length + timeBytes + ev.key.length + ev.value.length;
}

/** Writes the record of `ev` (its length from `recordLength`) at `out[at]`; returns the offset after it. */
export function writeRecord(ev: DeltaEvent, timeBytes: number, out: Buffer, at: number): number {
  let o = out.writeUInt8(ev.type === 'DELETE' ? RECORD_DELETE : 0, at);
  o = out.writeUInt32LE(ev.key.length, o);
  o = out.writeUInt32LE(ev.value.length, o);
  o = out.writeDoubleLE(ev.createRevision, o);
  o = out.writeDoubleLE(ev.modRevision, o);
  o = out.writeDoubleLE(ev.version, o);
  o = out.writeUInt8(ev.lease.length, o);
  o = out.writeUInt16LE(timeBytes, o);
  o += out.write(ev.lease, o, 'latin1');
  o += out.write(ev.time, o, 'utf8');
  o += ev.key.copy(out, o);
  o += ev.value.copy(out, o);
  return o;
}

/** Offset of the record after the one at `at`. */
export function nextRecord(r: Buffer, at: number): number {
  return (
    at +
    RECORD_HEADER_BYTES +
    r.readUInt8(at + FIELD.leaseLength) +
    r.readUInt16LE(at + FIELD.timeLength) +
    r.readUInt32LE(at + FIELD.keyLength) +
    r.readUInt32LE(at + FIELD.valueLength)
  );
}

/** The mod revision of the record at `at`. */
export function recordModRevision(r: Buffer, at: number): number {
  return r.readDoubleLE(at + FIELD.modRevision);
}
