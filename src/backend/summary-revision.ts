/** etcd's store revision from the page summaries of a bbolt file that checked out (stream-check.ts). */
import { BoltError } from './db.js';
import { KIND_BRANCH, KIND_LEAF, type Summaries } from './page-summaries.js';
import type { RevisionBucket } from '../etcd-schema.js';

/**
 * etcd's store revision from the summaries of a file that checked out (see revision.ts `storeRevisionOf`,
 * which reads the pages instead): the main revision of the last key of bucket `key`, or the finished
 * compaction's where that is higher, at least 1. Throws BoltError E_BOLT_NO_BUCKET without a `key` bucket.
 */
export function storeRevisionFromSummaries(sums: Summaries, rootPage: number): number {
  const rootLeaves = leavesOf(sums, rootPage);
  const inRoot = (name: RevisionBucket) => sums.etcdBuckets.find((b) => b.name === name && rootLeaves.has(b.page));
  const key = inRoot('key');
  if (!key) throw new BoltError('E_BOLT_NO_BUCKET', 'bucket "key" not found');
  let revision = Math.max(1, key.root === 0 ? key.inlineRevision : lastKeyRevision(sums, key.root));
  const meta = inRoot('meta');
  if (meta && meta.root === 0) revision = Math.max(revision, meta.inlineRevision);
  else if (meta) {
    const leaves = leavesOf(sums, meta.root);
    for (const c of sums.compactRevs) if (leaves.has(c.page)) revision = Math.max(revision, c.revision);
  }
  return revision;
}

/** The leaf pages of the tree under `root`, through the summaries. */
function leavesOf(sums: Summaries, root: number): Set<number> {
  const out = new Set<number>();
  const stack = [root];
  while (stack.length > 0) {
    const id = stack.pop()!;
    const s = sums.index[id] ?? -1;
    if (s < 0) continue;
    if (sums.kind[s] === KIND_LEAF) out.add(id);
    else if (sums.kind[s] === KIND_BRANCH) {
      const c0 = sums.start.a[s]!;
      for (let i = 0; i < sums.count.a[s]!; i++) stack.push(sums.children.a[c0 + i]!);
    }
  }
  return out;
}

/** The main revision of the last key under `root` (rightmost non-empty leaf), 0 for an empty tree or a short key. */
function lastKeyRevision(sums: Summaries, root: number): number {
  const stack = [root];
  while (stack.length > 0) {
    const id = stack.pop()!;
    const s = sums.index[id] ?? -1;
    if (s < 0) continue;
    if (sums.kind[s] === KIND_BRANCH) {
      // Pushed left to right, so the rightmost child is looked at first.
      const c0 = sums.start.a[s]!;
      for (let i = 0; i < sums.count.a[s]!; i++) stack.push(sums.children.a[c0 + i]!);
    } else if (sums.kind[s] === KIND_LEAF && sums.count.a[s]! > 0) {
      const len = sums.lastLen.a[s]!;
      return len >= 8 ? Number(sums.keys.buf.readBigUInt64BE(sums.lastOff.a[s]!)) : 0;
    }
  }
  return 0;
}
