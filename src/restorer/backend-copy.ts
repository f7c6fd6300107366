/**
 * An etcd backend read bucket by bucket for a rewrite by our bbolt writer (the offline replay's, and the lease
 * bucket's after an online replay): etcd's backends are flat, top-level buckets of plain keys, and a layout
 * other than that is refused.
 */
import { rename, rm } from 'node:fs/promises';
import { CodedError } from '../errors.js';
import { Cursor } from '../bbolt/cursor.js';
import { BoltDB, bucketFromValue, type Bucket } from '../bbolt/db.js';
import { BoltWriter, type WriterEntry } from '../bbolt/writer.js';

/** The backend is not one the offline replay knows how to write (auto then replays online). */
export class OfflineReplayNotApplicable extends CodedError {
  override readonly name = 'OfflineReplayNotApplicable';
  readonly code = 'E_OFFLINE_NOT_APPLICABLE';
}

export interface NamedBucket {
  name: Buffer;
  bucket: Bucket;
  sequence: number;
}

export async function topLevelBuckets(db: BoltDB): Promise<NamedBucket[]> {
  const out: NamedBucket[] = [];
  for await (const e of new Cursor(db, db.rootBucket())) {
    if (!e.isBucket) {
      throw new OfflineReplayNotApplicable(`${db.path}: a plain key ${JSON.stringify(e.key.toString())} among the top-level buckets`);
    }
    const sequence = Number(e.value.readBigUInt64LE(8));
    out.push({ name: Buffer.from(e.key), bucket: bucketFromValue(e.value, 0), sequence });
  }
  return out;
}

/** Entries handed to the writer per batch (one await per batch instead of one per entry). */
const COPY_BATCH = 256;

export async function* copyEntries(db: BoltDB, b: NamedBucket, signal: AbortSignal | undefined): AsyncGenerator<WriterEntry[]> {
  let batch: WriterEntry[] = [];
  for await (const e of new Cursor(db, b.bucket)) {
    if (e.isBucket) {
      throw new OfflineReplayNotApplicable(`${db.path}: bucket ${JSON.stringify(b.name.toString())} has nested buckets`);
    }
    batch.push({ key: e.key, value: e.value });
    if (batch.length === COPY_BATCH) {
      signal?.throwIfAborted();
      yield batch;
      batch = [];
    }
  }
  if (batch.length > 0) yield batch;
}

/**
 * Rewrites the backend at `dbPath` (no process may have it open) with the entries of bucket `name` passed
 * through `transform` (given an empty stream when the base has no such bucket, which is then created), every
 * other bucket copied as it is: written beside it, fsynced and renamed over it, so a failure leaves it as it was.
 */
export async function rewriteBucket(
  dbPath: string,
  name: Buffer,
  transform: (entries: AsyncIterable<WriterEntry[]>) => AsyncIterable<WriterEntry[]>,
  signal?: AbortSignal,
): Promise<void> {
  const tmp = `${dbPath}.rewrite`;
  const db = await BoltDB.open(dbPath);
  let writer: BoltWriter | undefined;
  try {
    const buckets: Array<Omit<NamedBucket, 'bucket'> & { bucket?: Bucket }> = await topLevelBuckets(db);
    if (!buckets.some((b) => b.name.equals(name))) {
      buckets.push({ name, sequence: 0 });
      buckets.sort((a, b) => Buffer.compare(a.name, b.name));
    }
    writer = await BoltWriter.create(tmp, { pageSize: db.pageSize, txid: Math.max(2, db.meta.txid + 1) });
    for (const b of buckets) {
      const entries = b.bucket ? copyEntries(db, b as NamedBucket, signal) : noEntries();
      await writer.writeBucket(b.name, b.name.equals(name) ? transform(entries) : entries, b.sequence);
    }
    await writer.finish();
    writer = undefined;
    await rename(tmp, dbPath);
  } finally {
    await writer?.abort();
    await rm(tmp, { force: true });
    await db.close();
  }
}

/** The entries of a bucket the base does not have. */
export async function* noEntries(): AsyncGenerator<WriterEntry[]> {}
