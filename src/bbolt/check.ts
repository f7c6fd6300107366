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
import { FLAG_BRANCH, FLAG_FREELIST, FLAG_LEAF, PAGE_HEADER_SIZE, pageTypeName, readPageHeader, readU64 } from './format.js';
import type { Meta, PageHeader, U64 } from './format.js';
import { KIND_BAD, KIND_BRANCH, Summaries, summarise, overflowTooLong } from './page-summaries.js';

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
