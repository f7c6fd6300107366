/**
 * etcd's store revision from the page summaries of a streamed bbolt check (src/bbolt/stream-check.ts), for a
 * file that is no longer there to read: what the check must note on the way (`STORE_REVISION_WATCH`), and the
 * revision made of it, as store-revision.ts `storeRevisionOf` makes it from the pages.
 */
import { BoltError } from '../bbolt/db.js';
import type { SummaryWatch, WatchedBucket } from '../bbolt/page-summaries.js';
import type { SummaryView } from '../bbolt/summary-view.js';
import { FINISHED_COMPACT_REV_KEY, KEY_BUCKET, mainRevisionOf, META_BUCKET } from './schema.js';

/** The buckets `key` and `meta`, and `meta`'s finishedCompactRev: indexes into the watch below. */
const KEY = 0;
const META = 1;
const FINISHED_COMPACT_REV = 0;

export const STORE_REVISION_WATCH: SummaryWatch = { values: [FINISHED_COMPACT_REV_KEY], buckets: [KEY_BUCKET, META_BUCKET] };

/**
 * The store revision of a file checked with STORE_REVISION_WATCH: the main revision of the last key of bucket
 * `key`, or the finished compaction's where that is higher, at least 1. Throws BoltError E_BOLT_NO_BUCKET
 * without a `key` bucket.
 */
export function storeRevisionFromSummaries(view: SummaryView): number {
  const rootLeaves = view.leafPagesUnder(view.rootPage);
  const inRoot = (name: number): WatchedBucket | undefined => view.buckets.find((b) => b.name === name && rootLeaves.has(b.page));
  const key = inRoot(KEY);
  if (!key) throw new BoltError('E_BOLT_NO_BUCKET', 'bucket "key" not found');
  const lastKey = key.inline ? key.inline.lastKey : view.lastKeyUnder(key.root);
  let revision = Math.max(1, lastKey === undefined ? 0 : (mainRevisionOf(lastKey) ?? 0));
  const meta = inRoot(META);
  if (meta?.inline) {
    for (const v of meta.inline.values) if (v.key === FINISHED_COMPACT_REV) revision = Math.max(revision, compactRevision(v.value));
  } else if (meta) {
    const leaves = view.leafPagesUnder(meta.root);
    for (const v of view.values) {
      if (v.key === FINISHED_COMPACT_REV && leaves.has(v.page)) revision = Math.max(revision, compactRevision(v.value));
    }
  }
  return revision;
}

/** The main revision a finishedCompactRev value holds (a revision key); 0 for a value too short to hold one. */
function compactRevision(value: Buffer): number {
  return mainRevisionOf(value) ?? 0;
}
