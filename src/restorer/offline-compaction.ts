/**
 * The offline replay's compaction, the effects around compaction.ts: the first pass over the base's `key`
 * bucket and the delta files that fills the CompactionIndex, and the filters the writer's buckets go through.
 */
import { createReadStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import type { DeltaEvent } from '../backup/delta-format.js';
import { DELTA_READ_BYTES, DeltaPayloadDecoder } from '../backup/delta-parse.js';
import { Cursor } from '../bbolt/cursor.js';
import type { BoltDB, Bucket } from '../bbolt/db.js';
import type { WriterEntry } from '../bbolt/writer.js';
import { CompactionIndex, compactRevisionOf, compactRevisionValue, storedKeyId } from './compaction.js';
import type { KeyStates } from './key-states.js';
import { FINISHED_COMPACT_REV_KEY, KEY_BUCKET, META_BUCKET, SCHEDULED_COMPACT_REV_KEY } from '../backend/schema.js';
import { mainRevisionOf } from './mvcc.js';
import type { FetchedDelta } from './fetch.js';

export interface PreparedCompaction {
  /** The deltas, all fetched to disk (the replay reads them again, and removes each once read). */
  deltas: FetchedDelta[];
  /** Undefined when the base is already compacted at or above the revision asked for: nothing to do. */
  index?: CompactionIndex;
}

/** Every delta fetched to disk, in order (the compaction's first pass and the quota rule read them first). */
export async function fetchAll(deltas: AsyncIterable<FetchedDelta> | Iterable<FetchedDelta>): Promise<FetchedDelta[]> {
  const all: FetchedDelta[] = [];
  for await (const d of deltas) all.push(d);
  return all;
}

/**
 * Finds the compaction revision (the one asked for, or the result's revision when that
 * is lower) and notes each key's newest write at or below it, base first, then the deltas: each delta as
 * soon as it is fetched (the pass runs while the next ones are fetched and decompressed).
 */
export async function prepareCompaction(
  db: BoltDB,
  keyBucket: Bucket,
  metaBucket: Bucket,
  baseRevision: number,
  input: { targetRevision: number; deltas: AsyncIterable<FetchedDelta> | Iterable<FetchedDelta> },
  asked: number,
  keys: KeyStates,
): Promise<PreparedCompaction> {
  // Every write noted is at or below `limit`, and the compaction revision is at or above each of them (the
  // asked one, or the result's newest revision when lower), so one pass each suffices: base first, then deltas.
  const limit = Math.min(asked, input.targetRevision);
  const index = new CompactionIndex(limit, keys);
  for await (const e of new Cursor(db, keyBucket)) {
    const main = mainRevisionOf(e.key);
    if (main === undefined) continue;
    if (main > limit) break;
    const id = storedKeyId(e.value);
    if (id !== undefined) index.note(id, main);
  }
  let head = baseRevision;
  const deltas: FetchedDelta[] = [];
  try {
    for await (const d of input.deltas) {
      deltas.push(d);
      // A delta named from the revision after the limit may still continue the limit's revision (a cut
      // transaction); one starting later holds nothing at or below it (it is still fetched for the replay).
      if (limit <= baseRevision || d.snap.startRevision > limit + 1) continue;
      await eachEvent(d, (ev) => {
        if (ev.modRevision <= baseRevision || ev.modRevision > limit) return;
        head = Math.max(head, ev.modRevision);
        index.note(ev.key.toString('latin1'), ev.modRevision);
      });
    }
  } catch (err) {
    for (const d of deltas) await rm(d.file, { force: true });
    throw err;
  }
  index.settle(Math.min(asked, head));
  if (index.revision <= (await compactedAt(db, metaBucket))) return { deltas };
  return { deltas, index };
}

async function eachEvent(d: FetchedDelta, take: (ev: DeltaEvent) => void): Promise<void> {
  // Keys and revisions are all this pass needs: values are checked, not decoded (the replay decodes them).
  const decoder = new DeltaPayloadDecoder(`delta snapshot ${d.snap.snapName}`, {
    hashChecked: true,
    times: false,
    values: false,
    skipEvents: d.skipEvents ?? 0,
  });
  const stream = createReadStream(d.file, { highWaterMark: DELTA_READ_BYTES });
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) decoder.write(chunk, take);
    decoder.end();
  } finally {
    stream.destroy();
  }
}

/** The newest compaction the base's `meta` records (scheduled or finished), 0 without one. */
async function compactedAt(db: BoltDB, meta: Bucket): Promise<number> {
  let at = 0;
  for await (const e of new Cursor(db, meta)) {
    if (e.key.equals(FINISHED_COMPACT_REV_KEY) || e.key.equals(SCHEDULED_COMPACT_REV_KEY))
      at = Math.max(at, compactRevisionOf(e.value) ?? 0);
  }
  return at;
}

/**
 * A base bucket's entries as the compaction leaves them: `key` without the revisions it removes (the replay
 * leaves out the deltas' own), `meta` with the compaction recorded as finished (scheduled and finished at the
 * same revision, as etcd leaves it once its background deletion is done); other buckets as they are.
 */
export function withCompaction(
  bucket: Buffer,
  entries: AsyncIterable<WriterEntry[]>,
  index: CompactionIndex,
): AsyncIterable<WriterEntry[]> {
  if (bucket.equals(KEY_BUCKET)) return keptEntries(entries, index);
  if (bucket.equals(META_BUCKET)) return metaWithCompaction(entries, index.revision);
  return entries;
}

async function* keptEntries(entries: AsyncIterable<WriterEntry[]>, index: CompactionIndex): AsyncGenerator<WriterEntry[]> {
  for await (const batch of entries) {
    const kept = batch.filter((e) => index.keeps(e.key, e.value));
    if (kept.length > 0) yield kept;
  }
}

async function* metaWithCompaction(entries: AsyncIterable<WriterEntry[]>, revision: number): AsyncGenerator<WriterEntry[]> {
  const all: WriterEntry[] = [];
  for await (const batch of entries) {
    for (const e of batch) if (!e.key.equals(FINISHED_COMPACT_REV_KEY) && !e.key.equals(SCHEDULED_COMPACT_REV_KEY)) all.push(e);
  }
  const value = compactRevisionValue(revision);
  all.push({ key: FINISHED_COMPACT_REV_KEY, value }, { key: SCHEDULED_COMPACT_REV_KEY, value });
  all.sort((a, b) => Buffer.compare(a.key, b.key));
  yield all;
}
