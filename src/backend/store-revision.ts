/**
 * The revision an etcd backend file holds, read without etcd: the main revision in the last key of bucket
 * `key`. etcd's mvcc keys are revisions, 8-byte big-endian main revision + '_' + 8-byte sub revision
 * (+ 't' for a tombstone), so the last key is the newest write. Upstream's sanity check does exactly this,
 * with 1 for a key shorter than 8 bytes (an empty store).
 */
import { Cursor } from '../bbolt/cursor.js';
import { BoltDB, BoltError } from '../bbolt/db.js';
import { FINISHED_COMPACT_REV_KEY, KEY_BUCKET, META_BUCKET } from './schema.js';

/** Latest main revision of the etcd backend at `dbPath`. Throws BoltError (E_BOLT_NO_BUCKET without `key`). */
export async function latestRevision(dbPath: string): Promise<number> {
  const db = await BoltDB.open(dbPath);
  try {
    return await latestRevisionOf(db);
  } finally {
    await db.close();
  }
}

export async function latestRevisionOf(db: BoltDB): Promise<number> {
  const bucket = await db.bucket(KEY_BUCKET);
  if (!bucket) throw new BoltError('E_BOLT_NO_BUCKET', `${db.path}: bucket "key" not found`);
  const last = await new Cursor(db, bucket).last();
  if (!last || last.key.length < 8) return 1;
  return Number(last.key.readBigUInt64BE(0));
}

/**
 * The store revision etcd would report on this backend: the last key's main revision, or the finished
 * compaction's where that is higher (a compaction removes tombstones at or below it, so deletes that were
 * the newest writes leave no key behind), and at least 1 (etcd's revision before the first write).
 */
export async function storeRevisionOf(db: BoltDB): Promise<number> {
  const key = await db.bucket(KEY_BUCKET);
  if (!key) throw new BoltError('E_BOLT_NO_BUCKET', `${db.path}: bucket "key" not found`);
  const last = await new Cursor(db, key).last();
  let revision = Math.max(1, last && last.key.length >= 8 ? Number(last.key.readBigUInt64BE(0)) : 0);
  const meta = await db.bucket(META_BUCKET);
  if (meta) {
    for await (const e of new Cursor(db, meta)) {
      if (e.key.equals(FINISHED_COMPACT_REV_KEY) && e.value.length >= 8) revision = Math.max(revision, Number(e.value.readBigUInt64BE(0)));
    }
  }
  return revision;
}
