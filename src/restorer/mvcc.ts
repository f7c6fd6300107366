/**
 * etcd's mvcc records in the backend's `key` bucket (etcd server/mvcc: revision.go, kvstore_txn.go;
 * api/mvccpb/kv.proto), written by the offline replay exactly as etcd writes them:
 * - the bbolt key is the revision: 8-byte big-endian main revision, `_`, 8-byte big-endian sub revision
 *   (the op's index within its revision), plus a trailing `t` for a tombstone (a delete);
 * - the value is the `mvccpb.KeyValue` protobuf (proto3: zero and empty fields left out, fields in number
 *   order): key = 1, create_revision = 2, mod_revision = 3, version = 4, value = 5, lease = 6. A tombstone's
 *   value carries the key only.
 */
import { varintSize, writeVarint } from '../wal/protobuf-write.js';

const REVISION_BYTES = 17;
const MARK_TOMBSTONE = 0x74; // 't'
const REVISION_SEPARATOR = 0x5f; // '_'

/** The bbolt key of revision `main`/`sub`, with the tombstone mark for a delete. */
export function revisionKey(main: number, sub: number, tombstone: boolean): Buffer {
  const b = Buffer.allocUnsafe(tombstone ? REVISION_BYTES + 1 : REVISION_BYTES);
  b.writeUInt32BE(Math.floor(main / 0x1_0000_0000), 0);
  b.writeUInt32BE(main >>> 0, 4);
  b[8] = REVISION_SEPARATOR;
  b.writeUInt32BE(Math.floor(sub / 0x1_0000_0000), 9);
  b.writeUInt32BE(sub >>> 0, 13);
  if (tombstone) b[REVISION_BYTES] = MARK_TOMBSTONE;
  return b;
}

/** The main revision of a `key` bucket key (undefined for a key too short to hold one). */
export function mainRevisionOf(key: Buffer): number | undefined {
  if (key.length < 8) return undefined;
  return key.readUInt32BE(0) * 0x1_0000_0000 + key.readUInt32BE(4);
}

export interface MvccKeyValue {
  key: Buffer;
  createRevision: number;
  modRevision: number;
  version: number;
  value: Buffer;
}

/**
 * A put's stored KeyValue. The lease is left out: the replay writes keys without their lease, as the
 * online replay (and upstream) does, so both give the same database.
 */
export function encodePutValue(kv: MvccKeyValue): Buffer {
  const fields: Array<[tag: number, n: number]> = [
    [0x10, kv.createRevision],
    [0x18, kv.modRevision],
    [0x20, kv.version],
  ];
  let size = 1 + varintSize(kv.key.length) + kv.key.length;
  for (const [, n] of fields) if (n !== 0) size += 1 + varintSize(n);
  if (kv.value.length > 0) size += 1 + varintSize(kv.value.length) + kv.value.length;
  const out = Buffer.allocUnsafe(size);
  let off = 0;
  out[off++] = 0x0a;
  off = writeVarint(out, off, kv.key.length);
  off += kv.key.copy(out, off);
  for (const [tag, n] of fields) {
    if (n === 0) continue;
    out[off++] = tag;
    off = writeVarint(out, off, n);
  }
  if (kv.value.length > 0) {
    out[off++] = 0x2a;
    off = writeVarint(out, off, kv.value.length);
    kv.value.copy(out, off);
  }
  return out;
}

/** A tombstone's stored KeyValue: the key only. */
export function encodeTombstoneValue(key: Buffer): Buffer {
  const out = Buffer.allocUnsafe(1 + varintSize(key.length) + key.length);
  const off = writeVarint(out, 1, key.length);
  out[0] = 0x0a;
  key.copy(out, off);
  return out;
}
