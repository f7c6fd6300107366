/**
 * Per-page summaries of a bbolt file, made in one sequential read (check.ts's first pass, and the streamed check
 * in stream-check.ts): for each page that identifies itself as a branch or leaf at its own position, its children,
 * its first and last keys, its sub-bucket roots, and the values and sub-buckets a caller asked to have noted on
 * the way (`SummaryWatch`; summary-view.ts reads them back). Struct-of-arrays, so memory grows with the number of
 * pages and branch keys, not with the data.
 */
import {
  BUCKET_HEADER_SIZE,
  compareBytes,
  copyBytes,
  ELEMENT_SIZE,
  FLAG_BRANCH,
  FLAG_LEAF,
  LEAF_FLAG_BUCKET,
  PAGE_HEADER_SIZE,
  pageTypeName,
  u16,
  u32,
  u64,
} from './format.js';
import type { U64 } from './format.js';

/**
 * What a caller wants noted while the pages are summarised, to be read after the check without reading pages
 * again (the etcd backend layer asks for what tells the store revision): leaf values whose key is one of
 * `values`, and sub-buckets whose name is one of `buckets`. Only the elements of the file's own pages are
 * looked at, not those inside an inline bucket; of a watched inline bucket, its content is noted instead.
 */
export interface SummaryWatch {
  values: readonly Buffer[];
  buckets: readonly Buffer[];
}

export const NO_WATCH: SummaryWatch = { values: [], buckets: [] };

/** A watched leaf value: the page it is on, which of SummaryWatch.values its key is, and a copy of the value. */
export interface WatchedValue {
  page: number;
  key: number;
  value: Buffer;
}

/** A watched sub-bucket: the page holding its element, which of SummaryWatch.buckets it is, and its root page. */
export interface WatchedBucket {
  page: number;
  name: number;
  /** 0 for an inline bucket, whose content is `inline`. */
  root: number;
  /**
   * What an inline bucket holds, as far as its elements lie inside the page: its last key (undefined when it
   * is empty or an element runs past the page) and its values whose key is watched, as WatchedValue without
   * the page.
   */
  inline?: { lastKey: Buffer | undefined; values: Array<{ key: number; value: Buffer }> };
}

export const KIND_BRANCH = 1;
export const KIND_LEAF = 2;
/** Parsed, but malformed beyond use: reported when reached, never descended into. */
export const KIND_BAD = 3;

/** Growable typed array of unsigned 32-bit values. */
class U32List {
  a: Uint32Array;
  length = 0;
  constructor(cap = 1024) {
    this.a = new Uint32Array(cap);
  }
  push(v: number): number {
    if (this.length === this.a.length) {
      const b = new Uint32Array(this.a.length * 2);
      b.set(this.a);
      this.a = b;
    }
    this.a[this.length] = v;
    return this.length++;
  }
}

/**
 * Growable array of page ids (doubles: ids read from disk may be garbage beyond 2^32). An id of 2^53 or more
 * is held as a negative reference to its entry in Summaries.outOfRange (see Summaries.refOutOfRange).
 */
class IdList {
  a: Float64Array;
  length = 0;
  constructor(cap = 1024) {
    this.a = new Float64Array(cap);
  }
  push(v: number): number {
    if (this.length === this.a.length) {
      const b = new Float64Array(this.a.length * 2);
      b.set(this.a);
      this.a = b;
    }
    this.a[this.length] = v;
    return this.length++;
  }
}

/** Copies of keys the tree walk needs, addressed by (offset, length). */
class KeyArena {
  buf = Buffer.allocUnsafe(1 << 16);
  length = 0;
  add(src: Buffer, start: number, end: number): number {
    const n = end - start;
    if (this.length + n > this.buf.length) {
      const b = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.length + n));
      this.buf.copy(b, 0, 0, this.length);
      this.buf = b;
    }
    copyBytes(src, start, end, this.buf, this.length);
    const off = this.length;
    this.length += n;
    return off;
  }
  /** Sign of key(a) - key(b). */
  cmp(aOff: number, aLen: number, bOff: number, bLen: number): number {
    return compareBytes(this.buf, aOff, aOff + aLen, this.buf, bOff, bOff + bLen);
  }
  hex(off: number, len: number): string {
    const s = this.buf.toString('hex', off, off + Math.min(len, 32));
    return len > 32 ? `${s}…` : s;
  }
}

/** Per-page summaries from the scan, struct-of-arrays indexed through `index[pageId]`. */
export class Summaries {
  readonly index: Int32Array;
  kind = new Uint8Array(1024);
  overflow = new U32List();
  count = new U32List();
  /** Branch: first child in `children`; leaf: first sub-bucket root in `bucketRoots`. */
  start = new U32List();
  /** Leaf: number of sub-bucket roots, and of inline sub-buckets. */
  nBuckets = new U32List();
  nInline = new U32List();
  /** First and last key in the arena (branch and leaf). */
  firstOff = new U32List();
  firstLen = new U32List();
  lastOff = new U32List();
  lastLen = new U32List();
  length = 0;

  children = new IdList();
  childKeyOff = new U32List();
  childKeyLen = new U32List();
  bucketRoots = new IdList();
  keys = new KeyArena();
  /** Inline buckets met while summarising the current page. */
  inlineBuckets = 0;
  /** Where the page being summarised starts in its buffer (for file offsets in messages). */
  pageStart = 0;
  /** Page ids of 2^53 or more met in pages (a corrupt file): reported when the tree reaches them. */
  outOfRange: Array<{ page: number; what: string; value: bigint; fileOffset: number }> = [];
  /** Problems inside a page, reported only if the page turns out to be reachable. */
  deferred = new Map<number, string[]>();
  /** What `watch` asked for, in the order the pages were summarised. */
  watchedValues: WatchedValue[] = [];
  watchedBuckets: WatchedBucket[] = [];

  constructor(
    pageCount: number,
    readonly pageSize: number,
    readonly watch: SummaryWatch = NO_WATCH,
  ) {
    this.index = new Int32Array(pageCount).fill(-1);
  }

  /**
   * The page id `value` read at `buf[at]` of page `page` as an IdList entry: itself when below 2^53, else a
   * negative reference to a record of it, so that the walk reports the exact value and where it lies.
   */
  idAt(value: U64, page: number, what: string, at: number): number {
    if (typeof value === 'number') return value;
    const fileOffset = page * this.pageSize + (at - this.pageStart);
    return -this.outOfRange.push({ page, what, value, fileOffset });
  }

  add(id: number, kind: number, overflow: number, count: number): number {
    const s = this.length++;
    if (s === this.kind.length) {
      const b = new Uint8Array(this.kind.length * 2);
      b.set(this.kind);
      this.kind = b;
    }
    this.kind[s] = kind;
    this.overflow.push(overflow);
    this.count.push(count);
    this.start.push(0);
    this.nBuckets.push(0);
    this.nInline.push(0);
    this.firstOff.push(0);
    this.firstLen.push(0);
    this.lastOff.push(0);
    this.lastLen.push(0);
    this.index[id] = s;
    return s;
  }

  defer(id: number, message: string): void {
    const list = this.deferred.get(id);
    if (list) {
      if (list.length < 20) list.push(message);
    } else this.deferred.set(id, [message]);
  }
}

/** A tree page whose overflow runs past the mark is recorded as unusable (reported if the tree reaches it). */
export function overflowTooLong(sums: Summaries, id: number, overflow: number, hwm: number): boolean {
  if (id + overflow < hwm) return false;
  sums.add(id, KIND_BAD, 0, 0);
  sums.defer(id, `overflow ${overflow} runs past the high-water mark ${hwm}`);
  return true;
}

/** Summarises the branch or leaf page held in `buf[start, end)`. */
export function summarise(sums: Summaries, id: number, flags: number, buf: Buffer, start: number, end: number): void {
  sums.pageStart = start;
  const count = u16(buf, start + 10);
  const overflow = u32(buf, start + 12);
  if (start + PAGE_HEADER_SIZE + count * ELEMENT_SIZE > end) {
    sums.add(id, KIND_BAD, overflow, 0);
    sums.defer(id, `${count} elements do not fit in the page`);
    return;
  }
  if (flags & FLAG_BRANCH) {
    if (count === 0) {
      sums.add(id, KIND_BAD, overflow, 0);
      sums.defer(id, 'branch page without elements');
      return;
    }
    const s = sums.add(id, KIND_BRANCH, overflow, count);
    sums.start.a[s] = sums.children.length;
    let prevS = -1;
    let prevE = -1;
    for (let i = 0; i < count; i++) {
      const e = start + PAGE_HEADER_SIZE + i * ELEMENT_SIZE;
      const ks = e + u32(buf, e);
      const ke = ks + u32(buf, e + 4);
      if (ke > end) {
        sums.kind[s] = KIND_BAD;
        sums.defer(id, `key of element ${i} runs past the page end`);
        return;
      }
      if (prevS >= 0 && compareBytes(buf, ks, ke, buf, prevS, prevE) <= 0) {
        sums.defer(id, `branch keys ${i - 1} and ${i} are not sorted`);
      }
      prevS = ks;
      prevE = ke;
      const off = sums.keys.add(buf, ks, ke);
      sums.children.push(sums.idAt(u64(buf, e + 8), id, `element ${i}: child page id`, e + 8));
      sums.childKeyOff.push(off);
      sums.childKeyLen.push(ke - ks);
      if (i === 0) {
        sums.firstOff.a[s] = off;
        sums.firstLen.a[s] = ke - ks;
      }
      if (i === count - 1) {
        sums.lastOff.a[s] = off;
        sums.lastLen.a[s] = ke - ks;
      }
    }
    return;
  }
  const s = sums.add(id, KIND_LEAF, overflow, count);
  sums.start.a[s] = sums.bucketRoots.length;
  sums.inlineBuckets = 0;
  const bad = leafElements(sums, id, buf, start, end, count, (ks, ke, i) => {
    if (i === 0) {
      sums.firstOff.a[s] = sums.keys.add(buf, ks, ke);
      sums.firstLen.a[s] = ke - ks;
    }
    if (i === count - 1) {
      sums.lastOff.a[s] = sums.keys.add(buf, ks, ke);
      sums.lastLen.a[s] = ke - ks;
    }
  });
  sums.nBuckets.a[s] = sums.bucketRoots.length - sums.start.a[s]!;
  sums.nInline.a[s] = sums.inlineBuckets;
  if (bad) sums.kind[s] = KIND_BAD;
}

/**
 * Walks the elements of a leaf page (or an inline bucket's page) at `buf[start, end)`: bounds, strict key
 * order, sub-buckets (roots collected, inline ones checked in place). Returns true if the page is unusable.
 */
function leafElements(
  sums: Summaries,
  id: number,
  buf: Buffer,
  start: number,
  end: number,
  count: number,
  onKey: (ks: number, ke: number, i: number) => void,
  nested = false,
): boolean {
  let prevS = -1;
  let prevE = -1;
  for (let i = 0; i < count; i++) {
    const e = start + PAGE_HEADER_SIZE + i * ELEMENT_SIZE;
    const flags = u32(buf, e);
    const ks = e + u32(buf, e + 4);
    const ke = ks + u32(buf, e + 8);
    const ve = ke + u32(buf, e + 12);
    if (ve > end) {
      sums.defer(id, `key/value of element ${i} run past the page end`);
      return true;
    }
    if (prevS >= 0) {
      const c = compareBytes(buf, ks, ke, buf, prevS, prevE);
      if (c <= 0) sums.defer(id, `keys ${i - 1} and ${i} are ${c === 0 ? 'equal' : 'not sorted'}`);
    }
    prevS = ks;
    prevE = ke;
    onKey(ks, ke, i);
    if (!(flags & LEAF_FLAG_BUCKET)) {
      if (!nested && sums.watch.values.length > 0) {
        const key = watchedIndex(sums.watch.values, buf, ks, ke);
        if (key >= 0) sums.watchedValues.push({ page: id, key, value: Buffer.from(buf.subarray(ke, ve)) });
      }
    } else {
      if (ve - ke < BUCKET_HEADER_SIZE) {
        sums.defer(id, `sub-bucket value of element ${i} is too short`);
        continue;
      }
      const name = nested ? -1 : watchedIndex(sums.watch.buckets, buf, ks, ke);
      const read = u64(buf, ke);
      if (read !== 0) {
        const root = sums.idAt(read, id, `element ${i}: sub-bucket root page id`, ke);
        sums.bucketRoots.push(root);
        if (name >= 0) sums.watchedBuckets.push({ page: id, name, root });
        continue;
      }
      // Inline bucket: a leaf page inside the value; bbolt's check skips its (impossible) sub-trees too.
      sums.inlineBuckets++;
      const ps = ke + BUCKET_HEADER_SIZE;
      if (ps + PAGE_HEADER_SIZE > ve) {
        sums.defer(id, `inline bucket of element ${i} has no page header`);
        continue;
      }
      const iflags = u16(buf, ps + 8);
      const icount = u16(buf, ps + 10);
      if (!(iflags & FLAG_LEAF)) {
        sums.defer(id, `inline bucket of element ${i} is a ${pageTypeName(iflags)} page, not a leaf`);
        continue;
      }
      if (ps + PAGE_HEADER_SIZE + icount * ELEMENT_SIZE > ve) {
        sums.defer(id, `inline bucket of element ${i}: ${icount} elements do not fit`);
        continue;
      }
      leafElements(sums, id, buf, ps, ve, icount, () => undefined, true);
      if (name >= 0) sums.watchedBuckets.push({ page: id, name, root: 0, inline: inlineContent(sums.watch.values, buf, ps, ve, icount) });
    }
  }
  return false;
}

/** Which of `names` the key at `buf[ks, ke)` is, -1 for none. The length and first byte rule most keys out without a compare. */
function watchedIndex(names: readonly Buffer[], buf: Buffer, ks: number, ke: number): number {
  for (let n = 0; n < names.length; n++) {
    const name = names[n]!;
    if (ke - ks === name.length && buf[ks] === name[0] && buf.compare(name, 0, name.length, ks, ke) === 0) return n;
  }
  return -1;
}

/**
 * What the inline bucket whose page is `buf[start, end)` holds for a watch (WatchedBucket.inline). Elements from
 * the first that runs past the page on are left out (the check reports them).
 */
function inlineContent(values: readonly Buffer[], buf: Buffer, start: number, end: number, count: number): WatchedBucket['inline'] {
  const out: NonNullable<WatchedBucket['inline']> = { lastKey: undefined, values: [] };
  for (let i = 0; i < count; i++) {
    const e = start + PAGE_HEADER_SIZE + i * ELEMENT_SIZE;
    const ks = e + u32(buf, e + 4);
    const ke = ks + u32(buf, e + 8);
    const ve = ke + u32(buf, e + 12);
    if (ve > end) break;
    if (i === count - 1) out.lastKey = Buffer.from(buf.subarray(ks, ke));
    if (u32(buf, e) & LEAF_FLAG_BUCKET) continue;
    const key = watchedIndex(values, buf, ks, ke);
    if (key >= 0) out.values.push({ key, value: Buffer.from(buf.subarray(ke, ve)) });
  }
  return out;
}
