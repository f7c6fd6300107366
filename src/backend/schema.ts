/**
 * etcd's backend schema, declared once: the bbolt buckets and keys etcd keeps its state in, and the layout
 * of its revision keys (etcd-io/etcd `server/storage/schema/bucket.go`, `schema/meta.go`,
 * `server/storage/mvcc/revision.go`). The bbolt code in `src/bbolt` is a generic reader, writer and checker;
 * whatever needs to know what etcd stores where takes the names from here: the rest of this folder (the store
 * revision, the auth flag), the offline replay, the verifier. `test/architecture/etcd-schema.test.ts` fails
 * when one is spelled elsewhere.
 */
import { constantBytes } from '../encoding/constant-bytes.js';

/** Bucket of the mvcc history: one entry per revision (see `revisionKey`), the value a `mvccpb.KeyValue`. */
export const KEY_BUCKET = constantBytes('key');
/** Bucket of etcd's own bookkeeping (consistent index, term, compaction revisions). */
export const META_BUCKET = constantBytes('meta');
/** Bucket of the auth store's switch and revision. */
export const AUTH_BUCKET = constantBytes('auth');
/**
 * Bucket of the leases: the key is the lease ID as 8 big-endian bytes (its int64 bits), the value a
 * `leasepb.Lease` (see `leaseKey`, and src/restorer/lease-record.ts for the value).
 */
export const LEASE_BUCKET = constantBytes('lease');

/** `meta`: the revision of the last finished compaction (8-byte big-endian main revision, `_`, sub revision). */
export const FINISHED_COMPACT_REV_KEY = constantBytes('finishedCompactRev');
/** `meta`: the revision of the last scheduled compaction (same encoding). */
export const SCHEDULED_COMPACT_REV_KEY = constantBytes('scheduledCompactRev');
/** `auth`: auth on ([1]) or off ([0]). */
export const AUTH_ENABLED_KEY = constantBytes('authEnabled');

/** Whether `buf[start, end)` is `meta`'s finishedCompactRev key. */
export function isFinishedCompactRevKey(buf: Buffer, start: number, end: number): boolean {
  const k = FINISHED_COMPACT_REV_KEY;
  return end - start === k.length && buf.compare(k, 0, k.length, start, end) === 0;
}

/**
 * A revision key: 8-byte big-endian main revision, `_`, 8-byte big-endian sub revision (the op's index
 * within its revision), plus a trailing `t` for a tombstone (a delete).
 */
export const REVISION_KEY_BYTES = 17;
const REVISION_SEPARATOR = 0x5f; // '_'
const MARK_TOMBSTONE = 0x74; // 't'

/** The bbolt key of revision `main`/`sub`, with the tombstone mark for a delete. */
export function revisionKey(main: number, sub: number, tombstone: boolean): Buffer {
  const b = Buffer.allocUnsafe(tombstone ? REVISION_KEY_BYTES + 1 : REVISION_KEY_BYTES);
  b.writeUInt32BE(Math.floor(main / 0x1_0000_0000), 0);
  b.writeUInt32BE(main >>> 0, 4);
  b[8] = REVISION_SEPARATOR;
  b.writeUInt32BE(Math.floor(sub / 0x1_0000_0000), 9);
  b.writeUInt32BE(sub >>> 0, 13);
  if (tombstone) b[REVISION_KEY_BYTES] = MARK_TOMBSTONE;
  return b;
}

/** Whether the revision key at `buf[start, end)` carries the tombstone mark (etcd's `isTombstone`). */
export function isTombstoneKey(buf: Buffer, start = 0, end = buf.length): boolean {
  return end - start === REVISION_KEY_BYTES + 1 && buf[start + REVISION_KEY_BYTES] === MARK_TOMBSTONE;
}

/** Whether `buf[start, end)` is `meta`'s scheduledCompactRev key. */
export function isScheduledCompactRevKey(buf: Buffer, start: number, end: number): boolean {
  const k = SCHEDULED_COMPACT_REV_KEY;
  return end - start === k.length && buf.compare(k, 0, k.length, start, end) === 0;
}

/**
 * The main revision of the revision key at `buf[start, end)` (by default the whole buffer), or undefined when
 * fewer than 8 bytes are there.
 */
export function mainRevisionOf(buf: Buffer, start = 0, end = buf.length): number | undefined {
  if (end - start < 8) return undefined;
  return buf.readUInt32BE(start) * 0x1_0000_0000 + buf.readUInt32BE(start + 4);
}

/** The `lease` bucket's key of a lease ID (decimal int64): its 64 bits, big-endian. */
export function leaseKey(id: string): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigInt64BE(BigInt(id));
  return b;
}

/** The lease ID (decimal int64) of a `lease` bucket key; undefined when it is not 8 bytes. */
export function leaseIdOfKey(key: Buffer): string | undefined {
  return key.length === 8 ? key.readBigInt64BE(0).toString() : undefined;
}
