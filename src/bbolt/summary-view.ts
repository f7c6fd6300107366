/**
 * What a caller reads from the page summaries of a file that checked out (stream-check.ts): the values and
 * sub-buckets its SummaryWatch asked for, and the trees they lead to, walked through the summaries instead of
 * the pages (which a streamed check no longer has). The etcd backend layer reads the store revision this way
 * (src/backend/summary-revision.ts).
 */
import { KIND_BRANCH, KIND_LEAF, type Summaries, type WatchedBucket, type WatchedValue } from './page-summaries.js';

export class SummaryView {
  constructor(
    private readonly sums: Summaries,
    /** The root bucket's page, from the meta the check used. */
    readonly rootPage: number,
  ) {}

  /** The watched leaf values, in file order. */
  get values(): readonly WatchedValue[] {
    return this.sums.watchedValues;
  }

  /** The watched sub-buckets, in file order. */
  get buckets(): readonly WatchedBucket[] {
    return this.sums.watchedBuckets;
  }

  /** The leaf pages of the tree under `root`. */
  leafPagesUnder(root: number): Set<number> {
    const sums = this.sums;
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

  /** The last key of the tree under `root` (of its rightmost non-empty leaf); undefined for an empty tree. */
  lastKeyUnder(root: number): Buffer | undefined {
    const sums = this.sums;
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
        const at = sums.lastOff.a[s]!;
        return sums.keys.buf.subarray(at, at + sums.lastLen.a[s]!);
      }
    }
    return undefined;
  }
}
