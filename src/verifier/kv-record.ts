/**
 * One entry of etcd's `key` bucket as the hash drill sees it: the revision key and the stored
 * `mvccpb.KeyValue` bytes, which etcd's HashKV feeds to its CRC, plus what the drill decides by (the main
 * revision, the tombstone mark, the user key).
 *
 * A delta event becomes the entry etcd wrote for it (server/mvcc kvstore_txn.go): a put is the KeyValue with
 * key = 1, create_revision = 2, mod_revision = 3, version = 4, value = 5, lease = 6 in field order, zero and
 * empty fields left out (proto3, as gogoproto marshals it); a delete is a tombstone, the revision key with the
 * `t` mark and a KeyValue of the key alone. The bytes come from the one KeyValue encoder, the restore's
 * (src/restorer/mvcc.ts): the drill hashes what a restore writes, leases included, which is what the live etcd has.
 */
import { CodedError } from '../errors.js';
import type { DeltaEvent } from '../backup/delta-format.js';
import { isTombstoneKey, mainRevisionOf, revisionKey } from '../backend/schema.js';
import { ProtoReader } from '../encoding/protobuf.js';
import { encodePutValue, encodeTombstoneValue } from '../restorer/mvcc.js';

export class KvRecordError extends CodedError {
  readonly code = 'E_KV_RECORD';
  override readonly name = 'KvRecordError';
}

/**
 * An entry of the `key` bucket. Readers hand out one object again and again (a million revisions would
 * otherwise be a million short-lived objects): a visitor reads it and keeps nothing of it.
 */
export interface KvRecord {
  /** The bbolt key: the revision, with the tombstone mark for a delete. */
  revKey: Buffer;
  /** The stored KeyValue bytes. */
  value: Buffer;
  main: number;
  tombstone: boolean;
  /** The user key (a view into `value`). */
  key: Buffer;
}

const KEY_TAG = 0x0a; // field 1, length-delimited

/** The user key of stored KeyValue bytes (field 1), as a view; throws KvRecordError when there is none. */
export function keyOfKeyValue(value: Buffer, where: string): Buffer {
  // etcd writes the key first; anything else goes through the general reader.
  if (value.length > 1 && value[0] === KEY_TAG) {
    let len = 0;
    let shift = 0;
    let i = 1;
    for (; i < value.length && i < 6; i++) {
      const b = value[i]!;
      len += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if (b < 0x80) {
        i++;
        if (i + len <= value.length) return value.subarray(i, i + len);
        break;
      }
    }
  }
  const r = new ProtoReader(value);
  while (r.next()) {
    if (r.field === 1) {
      const [s, e] = r.bytes();
      return value.subarray(s, e);
    }
    r.skip();
  }
  throw new KvRecordError(`${where}: a KeyValue without a key`);
}

/** Fills `out` from a `key` bucket entry of a backend file. */
export function recordOfEntry(revKey: Buffer, value: Buffer, out: KvRecord, where: string): KvRecord {
  const main = mainRevisionOf(revKey);
  if (main === undefined) throw new KvRecordError(`${where}: a key bucket entry whose key is no revision (${revKey.length} bytes)`);
  out.revKey = revKey;
  out.value = value;
  out.main = main;
  out.tombstone = isTombstoneKey(revKey);
  out.key = keyOfKeyValue(value, where);
  return out;
}

/** Fills `out` with the entry etcd wrote for the delta event `ev` as the `sub`-th op of its revision. */
export function recordOfEvent(ev: DeltaEvent, sub: number, out: KvRecord): KvRecord {
  const tombstone = ev.type === 'DELETE';
  out.revKey = revisionKey(ev.modRevision, sub, tombstone);
  out.value = tombstone
    ? encodeTombstoneValue(ev.key)
    : encodePutValue({
        key: ev.key,
        createRevision: ev.createRevision,
        modRevision: ev.modRevision,
        version: ev.version,
        value: ev.value,
        lease: ev.lease,
      });
  out.main = ev.modRevision;
  out.tombstone = tombstone;
  out.key = ev.key;
  return out;
}

const EMPTY = Buffer.alloc(0);

/** A fresh record to fill. */
export function emptyRecord(): KvRecord {
  return { revKey: EMPTY, value: EMPTY, main: 0, tombstone: false, key: EMPTY };
}
