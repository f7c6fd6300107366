/**
 * Full consistency check of a bbolt file, the equivalent of bbolt's `tx.Check()` on the current meta:
 *
 * - every page below the high-water mark is either reachable exactly once (meta pages, the freelist, the
 *   pages of every bucket's tree) or on the freelist, never both; nothing reaches past the mark;
 * - pages reached from a tree are branch or leaf pages whose header agrees with their position;
 * - keys are strictly sorted within each page and each child's keys lie in [its key, next key) of the parent;
 * - freelist ids are distinct and lie between the meta pages and the mark.
 *
 * It returns every problem found (page id + what), not just the first.
 *
 * Large files: the file is read once, sequentially, in big chunks (cheap on disks and page cache alike), and
 * each page that identifies itself as a branch or leaf at its own position is summarised: its children, its
 * first and last keys and its sub-bucket roots. Sortedness within a page is checked during the scan. The tree
 * walk then runs on those compact summaries, so memory grows with the number of pages and keys held in
 * branch pages, not with the data. A page whose header does not match its position is only looked at again
 * if the tree reaches it (then it is corrupt).
 */
import { BoltDB, BoltError } from './db.js';
import {
  BUCKET_HEADER_SIZE,
  compareBytes,
  copyBytes,
  ELEMENT_SIZE,
  FLAG_BRANCH,
  FLAG_FREELIST,
  FLAG_LEAF,
  LEAF_FLAG_BUCKET,
  PAGE_HEADER_SIZE,
  pageTypeName,
  readPageHeader,
  readU64,
  u16,
  u32,
  u64,
} from './format.js';
import type { Meta, PageHeader, U64 } from './format.js';
import {
  FINISHED_COMPACT_REV_KEY as FINISHED_COMPACT_REV,
  isFinishedCompactRevKey,
  revisionBucketNamed,
  type RevisionBucket,
} from '../etcd-schema.js';

export interface CheckProblem {
  /** The page the problem is about, when there is one. */
  pageId?: number;
  message: string;
}

export interface CheckResult {
  ok: boolean;
  /** At most `maxProblems` problems, in the order found. */
  problems: CheckProblem[];
  /** All problems found, including those not listed. */
  problemCount: number;
  /** Not errors for bbolt, but worth a log line (e.g. the older meta page is invalid). */
  warnings: string[];
  pageSize: number;
  /** High-water mark of the current meta. */
  pageCount: number;
  txid: number;
  reachablePages: number;
  freePages: number;
  /** Non-inline plus inline buckets, the root bucket included. */
  buckets: number;
  /** Entries of the reachable leaf pages (keys and sub-buckets; entries inside inline buckets not counted). */
  keys: number;
  /** Bytes read from the file. */
  bytesRead: number;
}

export interface CheckOptions {
  /** Default 1000. */
  maxProblems?: number;
  /** Sequential read size. Default 8 MiB. */
  chunkBytes?: number;
}

const KIND_BRANCH = 1;
const KIND_LEAF = 2;
/** Parsed, but malformed beyond use: reported when reached, never descended into. */
const KIND_BAD = 3;

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
  /**
   * What etcd's store revision needs, so that a streamed check can tell it without reading pages again:
   * every sub-bucket element named `key` or `meta` (its page, and its root or, inline, what it holds), and
   * every leaf element `finishedCompactRev` with its value.
   */
  etcdBuckets: Array<{ page: number; name: RevisionBucket; root: number; inlineRevision: number }> = [];
  compactRevs: Array<{ page: number; revision: number }> = [];

  constructor(
    pageCount: number,
    readonly pageSize: number,
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

/** Checks the bbolt file at `dbPath`. Throws BoltError when it cannot be opened as bbolt at all. */
export async function checkConsistency(dbPath: string, opts: CheckOptions = {}): Promise<CheckResult> {
  const db = await BoltDB.open(dbPath);
  try {
    return await checkDB(db, opts);
  } finally {
    await db.close();
  }
}

export async function checkDB(db: BoltDB, opts: CheckOptions = {}): Promise<CheckResult> {
  const sums = new Summaries(db.pageCount, db.pageSize);
  const scanned = await scan(db, sums, opts.chunkBytes ?? 8 << 20);
  const result = await walkSummaries(
    sums,
    {
      pageSize: db.pageSize,
      meta: db.meta,
      otherMeta: db.otherMetaProblem === undefined ? undefined : { page: 1 - db.metaPage, problem: db.otherMetaProblem },
      header: async (id) => {
        const head = Buffer.alloc(PAGE_HEADER_SIZE);
        const bytes = await db.read(head, id * db.pageSize);
        return { header: readPageHeader(head, 0), bytes };
      },
      read: (buf, position) => db.read(buf, position),
    },
    opts.maxProblems ?? 1000,
  );
  result.bytesRead += scanned;
  return result;
}

/** What the tree walk needs besides the summaries: the current meta, and the few pages it reads itself. */
export interface WalkSource {
  pageSize: number;
  meta: Meta;
  /** The other meta page and why it is invalid, when it is. */
  otherMeta?: { page: number; problem: string } | undefined;
  /** The header of a page the scan did not summarise (only looked at when the tree reaches it). */
  header(id: number): Promise<{ header: PageHeader; bytes: number }>;
  /** Reads bytes of the freelist page(s); returns how many it could. */
  read(buf: Buffer, position: number): Promise<number>;
}

/** Pass 2: the freelist and the tree walk over the summaries. */
export async function walkSummaries(sums: Summaries, src: WalkSource, maxProblems: number): Promise<CheckResult> {
  const ps = src.pageSize;
  const meta = src.meta;
  const hwm = meta.pgid;
  const result: CheckResult = {
    ok: false,
    problems: [],
    problemCount: 0,
    warnings: [],
    pageSize: ps,
    pageCount: hwm,
    txid: meta.txid,
    reachablePages: 0,
    freePages: 0,
    buckets: 0,
    keys: 0,
    bytesRead: 0,
  };
  const problem = (pageId: number | undefined, message: string): void => {
    result.problemCount++;
    if (result.problems.length < maxProblems) result.problems.push(pageId === undefined ? { message } : { pageId, message });
  };
  if (src.otherMeta) result.warnings.push(`meta page ${src.otherMeta.page} is invalid: ${src.otherMeta.problem}`);
  const reached = new Uint8Array(hwm);
  const freed = new Uint8Array(hwm);
  reached[0] = 1;
  reached[1] = 1;

  // The freelist page(s) and the ids on them.
  const freelistPersisted = meta.freelist !== undefined;
  if (meta.freelist !== undefined) {
    result.bytesRead += await readFreelist(src, meta.freelist, reached, freed, problem);
  }

  // Tree walk over the summaries: stack of (page, min key, max key); -1 offsets mean unbounded.
  const stack: number[] = [meta.root, -1, 0, -1, 0];
  result.buckets = 1;
  const arena = sums.keys;
  let visited = 0;
  while (stack.length > 0) {
    const maxLen = stack.pop()!;
    const maxOff = stack.pop()!;
    const minLen = stack.pop()!;
    const minOff = stack.pop()!;
    const id = stack.pop()!;
    if (++visited % 65536 === 0) await new Promise<void>((r) => setImmediate(r));

    if (id < 0) {
      // A page id of 2^53 or more: reported at the page that holds it, with its exact value.
      const o = sums.outOfRange[-id - 1]!;
      problem(o.page, `page ${o.page}: ${o.what} ${o.value} (file offset ${o.fileOffset}) is out of bounds (high-water mark ${hwm})`);
      continue;
    }
    if (!Number.isSafeInteger(id) || id < 2 || id >= hwm) {
      problem(Number.isSafeInteger(id) ? id : undefined, `page ${id}: out of bounds (high-water mark ${hwm})`);
      continue;
    }
    const s = sums.index[id]!;
    if (s < 0) {
      // Never identified itself as a tree page at this position: look at what is there.
      if (reached[id]) {
        problem(id, `page ${id}: multiple references`);
        continue;
      }
      reached[id] = 1;
      const { header: h, bytes } = await src.header(id);
      result.bytesRead += bytes;
      if (h.id !== id) problem(id, `page ${id}: header identifies as page ${h.id}`);
      else problem(id, `page ${id}: invalid type ${pageTypeName(h.flags)} where a branch or leaf was expected`);
      if (freed[id]) problem(id, `page ${id}: reachable freed`);
      continue;
    }
    const overflow = sums.overflow.a[s]!;
    let again = false;
    for (let j = 0; j <= overflow; j++) {
      const pid = id + j;
      if (reached[pid]) {
        problem(pid, `page ${pid}: multiple references`);
        again = true;
      }
      reached[pid] = 1;
    }
    if (freed[id]) problem(id, `page ${id}: reachable freed`);
    // Descending twice could loop forever on a cycle; the duplicate is already reported.
    if (again) continue;
    const notes = sums.deferred.get(id);
    if (notes) {
      for (const m of notes) problem(id, `page ${id}: ${m}`);
      sums.deferred.delete(id);
    }
    const kind = sums.kind[s]!;
    if (kind === KIND_BAD) continue;
    const count = sums.count.a[s]!;
    if (count > 0) {
      const fo = sums.firstOff.a[s]!;
      const fl = sums.firstLen.a[s]!;
      const lo = sums.lastOff.a[s]!;
      const ll = sums.lastLen.a[s]!;
      if (minOff >= 0 && arena.cmp(fo, fl, minOff, minLen) < 0) {
        problem(id, `page ${id}: first key ${arena.hex(fo, fl)} is smaller than its key in the parent ${arena.hex(minOff, minLen)}`);
      }
      if (maxOff >= 0 && arena.cmp(lo, ll, maxOff, maxLen) >= 0) {
        problem(id, `page ${id}: last key ${arena.hex(lo, ll)} is not below the parent's next key ${arena.hex(maxOff, maxLen)}`);
      }
    }
    if (kind === KIND_BRANCH) {
      const c0 = sums.start.a[s]!;
      for (let i = 0; i < count; i++) {
        const c = c0 + i;
        const next = i + 1 < count;
        stack.push(
          sums.children.a[c]!,
          sums.childKeyOff.a[c]!,
          sums.childKeyLen.a[c]!,
          next ? sums.childKeyOff.a[c + 1]! : maxOff,
          next ? sums.childKeyLen.a[c + 1]! : maxLen,
        );
      }
    } else {
      result.keys += count;
      const b0 = sums.start.a[s]!;
      const nb = sums.nBuckets.a[s]!;
      for (let i = 0; i < nb; i++) stack.push(sums.bucketRoots.a[b0 + i]!, -1, 0, -1, 0);
      result.buckets += nb + sums.nInline.a[s]!;
    }
  }

  for (let id = 0; id < hwm; id++) {
    if (reached[id]) result.reachablePages++;
    if (freed[id]) result.freePages++;
    else if (!reached[id] && freelistPersisted) problem(id, `page ${id}: unreachable unfreed`);
  }
  if (!freelistPersisted) result.freePages = hwm - result.reachablePages;
  result.ok = result.problemCount === 0;
  return result;
}

/** Pass 1: reads the file sequentially and summarises every page that is a branch or leaf at its own position. */
async function scan(db: BoltDB, sums: Summaries, chunkBytes: number): Promise<number> {
  const ps = db.pageSize;
  const hwm = db.pageCount;
  const chunkPages = Math.max(1, Math.floor(chunkBytes / ps));
  const buf = Buffer.allocUnsafeSlow(chunkPages * ps);
  let bytesRead = 0;
  for (let pos = 2; pos < hwm; pos += chunkPages) {
    const n = Math.min(chunkPages, hwm - pos);
    const len = n * ps;
    const got = await db.read(buf.subarray(0, len), pos * ps);
    bytesRead += got;
    if (got < len) throw new BoltError('E_BOLT_CORRUPT', `${db.path}: file ends at ${pos * ps + got}, inside the pages in use`);
    for (let k = 0; k < n; k++) {
      const id = pos + k;
      const off = k * ps;
      if (readU64(buf, off) !== id) continue;
      const flags = buf.readUInt16LE(off + 8);
      if (!(flags & (FLAG_BRANCH | FLAG_LEAF))) continue;
      const overflow = buf.readUInt32LE(off + 12);
      if (overflowTooLong(sums, id, overflow, hwm)) continue;
      const span = (overflow + 1) * ps;
      if (off + span <= len) {
        summarise(sums, id, flags, buf, off, off + span);
      } else {
        // Spans the end of this chunk: read it whole (at most one such page per chunk).
        const big = Buffer.allocUnsafe(span);
        bytesRead += await db.read(big, id * ps);
        summarise(sums, id, flags, big, 0, span);
      }
    }
  }
  return bytesRead;
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
      // Tombstone revision keys are 18 bytes too; the first byte tells them apart without a compare.
      if (!nested && ke - ks === FINISHED_COMPACT_REV.length && buf[ks] === FINISHED_COMPACT_REV[0] && ve - ke >= 8) {
        if (buf.compare(FINISHED_COMPACT_REV, 0, FINISHED_COMPACT_REV.length, ks, ke) === 0) {
          sums.compactRevs.push({ page: id, revision: Number(buf.readBigUInt64BE(ke)) });
        }
      }
    } else {
      if (ve - ke < BUCKET_HEADER_SIZE) {
        sums.defer(id, `sub-bucket value of element ${i} is too short`);
        continue;
      }
      const name = nested ? undefined : revisionBucketNamed(buf, ks, ke);
      const read = u64(buf, ke);
      if (read !== 0) {
        const root = sums.idAt(read, id, `element ${i}: sub-bucket root page id`, ke);
        sums.bucketRoots.push(root);
        if (name) sums.etcdBuckets.push({ page: id, name, root, inlineRevision: 0 });
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
      if (name) sums.etcdBuckets.push({ page: id, name, root: 0, inlineRevision: inlineRevision(buf, ps, ve, icount, name) });
    }
  }
  return false;
}

/**
 * What an inline `key` or `meta` bucket tells of the store revision (0: nothing): the main revision of
 * its last key, or its `finishedCompactRev`. Elements that run past the page are left out (the check
 * reports them).
 */
function inlineRevision(buf: Buffer, start: number, end: number, count: number, name: RevisionBucket): number {
  let out = 0;
  for (let i = 0; i < count; i++) {
    const e = start + PAGE_HEADER_SIZE + i * ELEMENT_SIZE;
    const ks = e + buf.readUInt32LE(e + 4);
    const ke = ks + buf.readUInt32LE(e + 8);
    const ve = ke + buf.readUInt32LE(e + 12);
    if (ve > end) break;
    if (name === 'key') out = i === count - 1 && ke - ks >= 8 ? Number(buf.readBigUInt64BE(ks)) : 0;
    else if (ve - ke >= 8 && isFinishedCompactRevKey(buf, ks, ke)) {
      out = Math.max(out, Number(buf.readBigUInt64BE(ke)));
    }
  }
  return out;
}

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

/** Marks the freelist page(s) reachable and its ids freed; returns the bytes read. */
async function readFreelist(
  db: WalkSource,
  fl: number,
  reached: Uint8Array,
  freed: Uint8Array,
  problem: (pageId: number | undefined, message: string) => void,
): Promise<number> {
  const ps = db.pageSize;
  const hwm = db.meta.pgid;
  if (!Number.isSafeInteger(fl) || fl < 2 || fl >= hwm) {
    problem(undefined, `freelist page ${fl}: out of bounds (high-water mark ${hwm})`);
    return 0;
  }
  const head = Buffer.alloc(ps);
  let bytes = await db.read(head, fl * ps);
  const h = readPageHeader(head, 0);
  if (h.id !== fl) {
    problem(fl, `freelist page ${fl}: header identifies as page ${h.id}`);
    reached[fl] = 1;
    return bytes;
  }
  if (!(h.flags & FLAG_FREELIST)) {
    problem(fl, `freelist page ${fl}: invalid type ${pageTypeName(h.flags)}`);
    reached[fl] = 1;
    return bytes;
  }
  if (fl + h.overflow >= hwm) {
    problem(fl, `freelist page ${fl}: overflow ${h.overflow} runs past the high-water mark ${hwm}`);
    reached[fl] = 1;
    return bytes;
  }
  for (let j = 0; j <= h.overflow; j++) reached[fl + j] = 1;
  let page = head;
  if (h.overflow > 0) {
    page = Buffer.allocUnsafe((h.overflow + 1) * ps);
    head.copy(page, 0);
    bytes += await db.read(page.subarray(ps), (fl + 1) * ps);
  }
  let idsAt = PAGE_HEADER_SIZE;
  let count: U64 = h.count;
  if (count === 0xffff) {
    // More ids than a u16 can count: the count is the first u64.
    count = readU64(page, PAGE_HEADER_SIZE);
    idsAt += 8;
  }
  if (typeof count !== 'number' || idsAt + count * 8 > page.length) {
    problem(fl, `freelist page ${fl}: ${count} ids do not fit in ${h.overflow + 1} page(s)`);
    return bytes;
  }
  for (let i = 0; i < count; i++) {
    const id = readU64(page, idsAt + i * 8);
    if (typeof id !== 'number' || id < 2 || id >= hwm) {
      problem(undefined, `freelist page ${fl}: free id ${id} out of bounds (high-water mark ${hwm})`);
      continue;
    }
    if (freed[id]) problem(id, `page ${id}: already freed`);
    freed[id] = 1;
  }
  for (let j = 0; j <= h.overflow; j++) {
    if (freed[fl + j]) problem(fl + j, `page ${fl + j}: freelist page is itself on the freelist`);
  }
  return bytes;
}
