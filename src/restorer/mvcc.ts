/**
 * etcd's mvcc records in the backend's `key` bucket (etcd server/mvcc: revision.go, kvstore_txn.go;
 * api/mvccpb/kv.proto), written by the offline replay exactly as etcd writes them:
 * - the bbolt key is the revision (`revisionKey` in src/backend/schema.ts);
 * - the value is the `mvccpb.KeyValue` protobuf (proto3: zero and empty fields left out, fields in number
 *   order): key = 1, create_revision = 2, mod_revision = 3, version = 4, value = 5, lease = 6. A tombstone's
 *   value carries the key only.
 */
import { varintSize, writeVarint } from '../encoding/protobuf-write.js';

/** The revision-key layout is etcd's schema, declared in one place. */
export { mainRevisionOf, revisionKey } from '../backend/schema.js';

export interface MvccKeyValue {
  key: Buffer;
  createRevision: number;
  modRevision: number;
  version: number;
  value: Buffer;
  /**
   * The lease ID (decimal int64; '0' or absent: none). A restore and `compact` keep it (restored-leases.ts);
   * upstream's write the deltas' keys without their lease.
   */
  lease?: string;
}

/** A put's stored KeyValue, byte for byte as etcd marshals it (so `etcdctl endpoint hashkv` agrees). */
export function encodePutValue(kv: MvccKeyValue): Buffer {
  // Field by field rather than from a list of (tag, number) pairs: this runs once per event written, and the
  // pairs were four arrays of garbage per event.
  const { key, createRevision, modRevision, version, value } = kv;
  // Most keys have no lease: no BigInt is made or compared for them (this runs once per event written).
  const id = kv.lease ?? '0';
  const leased = id !== '0' && id !== '';
  // The int64's bits: a negative ID is a 10-byte varint, as Go writes it.
  const lease = leased ? BigInt.asUintN(64, BigInt(id)) : 0n;
  let size = 1 + varintSize(key.length) + key.length;
  if (createRevision !== 0) size += 1 + varintSize(createRevision);
  if (modRevision !== 0) size += 1 + varintSize(modRevision);
  if (version !== 0) size += 1 + varintSize(version);
  if (value.length > 0) size += 1 + varintSize(value.length) + value.length;
  if (leased) size += 1 + varintSize(lease);
  const out = Buffer.allocUnsafe(size);
  out[0] = 0x0a;
  let off = writeVarint(out, 1, key.length);
  off += key.copy(out, off);
  if (createRevision !== 0) {
    out[off++] = 0x10;
    off = writeVarint(out, off, createRevision);
  }
  if (modRevision !== 0) {
    out[off++] = 0x18;
    off = writeVarint(out, off, modRevision);
  }
  if (version !== 0) {
    out[off++] = 0x20;
    off = writeVarint(out, off, version);
  }
  if (value.length > 0) {
    out[off++] = 0x2a;
    off = writeVarint(out, off, value.length);
    off += value.copy(out, off);
  }
  if (leased) {
    out[off++] = 0x30;
    writeVarint(out, off, lease);
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
