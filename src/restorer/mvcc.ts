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
  // Most keys have no lease: nothing is looked up for them (this runs once per event written).
  const id = kv.lease ?? '0';
  const lease = id !== '0' && id !== '' ? leaseField(id) : undefined;
  let size = 1 + varintSize(key.length) + key.length;
  if (createRevision !== 0) size += 1 + varintSize(createRevision);
  if (modRevision !== 0) size += 1 + varintSize(modRevision);
  if (version !== 0) size += 1 + varintSize(version);
  if (value.length > 0) size += 1 + varintSize(value.length) + value.length;
  if (lease !== undefined) size += lease.length;
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
  if (lease !== undefined) lease.copy(out, off);
  return out;
}

/** Encoded lease fields by lease ID; a chain names a handful of leases across many events. */
const leaseFields = new Map<string, Buffer>();
/** More distinct leases than this and the cache starts over (it only saves work; any size is correct). */
const LEASE_FIELDS_MAX = 4096;

/**
 * The lease field (tag 6, the ID's int64 bits as a varint: a negative ID is 10 bytes, as Go writes it), made
 * once per lease ID: parsing the decimal ID into a BigInt and writing its varint for every leased event cost a
 * restore of 100,000 revisions with leased keys several percent of its CPU.
 */
function leaseField(id: string): Buffer {
  let field = leaseFields.get(id);
  if (field === undefined) {
    const bits = BigInt.asUintN(64, BigInt(id));
    field = Buffer.allocUnsafe(1 + varintSize(bits));
    field[0] = 0x30;
    writeVarint(field, 1, bits);
    if (leaseFields.size >= LEASE_FIELDS_MAX) leaseFields.clear();
    leaseFields.set(id, field);
  }
  return field;
}

/** A tombstone's stored KeyValue: the key only. */
export function encodeTombstoneValue(key: Buffer): Buffer {
  const out = Buffer.allocUnsafe(1 + varintSize(key.length) + key.length);
  const off = writeVarint(out, 1, key.length);
  out[0] = 0x0a;
  key.copy(out, off);
  return out;
}
