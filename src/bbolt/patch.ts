/**
 * One narrowly scoped in-place write into a bbolt file: a one-byte flag value ([0] or [1]) of a key in a
 * top-level bucket, overwritten where it lies. What it is for (etcd's auth flag) is src/backend/auth-flag.ts's.
 *
 * Why this is safe for bbolt: only meta pages carry a checksum; branch and leaf pages do not. Changing one
 * byte of a leaf value keeps every length, offset and key intact, so the tree stays valid as long as the
 * page is live (reachable from the current meta and not on the freelist) and no process has the file open.
 * We check all of that and refuse anything unexpected: a value that is not a single 0 or 1 byte, a page
 * that is not a leaf, a page on the freelist, a visible flock holder, a byte on disk that changed since it
 * was located.
 */
import { CodedError } from '../errors.js';
import { open } from 'node:fs/promises';
import { BoltDB, BoltError, bucketFromValue, element, isLeaf } from './db.js';
import type { Bucket, Page } from './db.js';
import { ELEMENT_SIZE, FLAG_FREELIST, LEAF_FLAG_BUCKET, PAGE_HEADER_SIZE, readU64 } from './format.js';
import type { U64 } from './format.js';
import { findFlockHolder } from './lock.js';

export class BoltPatchError extends CodedError {
  readonly code = 'E_BOLT_PATCH';
  override readonly name = 'BoltPatchError';
}

/** Which flag: a key in a top-level bucket. */
export interface FlagKey {
  bucket: Buffer;
  key: Buffer;
}

/** Where the flag's byte lives, as found from the current meta. */
export interface FlagLocation {
  /** Byte offset of the one-byte value in the file. */
  fileOffset: number;
  /** The value there: true for [1], false for [0]. */
  set: boolean;
  /** The page that holds the byte (for an inline bucket: the page holding the bucket). */
  pageId: number;
  inlineBucket: boolean;
}

/** How messages name the flag: bucket/key. */
function flagName(flag: FlagKey): string {
  return `${flag.bucket.toString('latin1')}/${flag.key.toString('latin1')}`;
}

/** A leaf element found by key, with the file position of its page's buffer so offsets map to the file. */
interface Found {
  page: Page;
  index: number;
  /** File offset of `page.buf[0]`. */
  bufFileOffset: number;
  /** Real page id that contains the element (the owner page for inline buckets). */
  pageId: number;
}

/** Offset in `page.buf` where the value of leaf element `index` starts. */
function valueStart(page: Page, index: number): number {
  const e = page.base + PAGE_HEADER_SIZE + index * ELEMENT_SIZE;
  return e + page.buf.readUInt32LE(e + 4) + page.buf.readUInt32LE(e + 8);
}

async function findLeafElement(
  db: BoltDB,
  bucket: Bucket,
  inlineFileOffset: number,
  ownerPageId: number,
  key: Buffer,
): Promise<Found | undefined> {
  if (bucket.inline) {
    const page = bucket.inline;
    for (let i = 0; i < page.count; i++) {
      const c = element(page, i).key.compare(key);
      if (c === 0) return { page, index: i, bufFileOffset: inlineFileOffset, pageId: ownerPageId };
      if (c > 0) return undefined;
    }
    return undefined;
  }
  let page = await db.treePage(bucket.root);
  for (;;) {
    if (isLeaf(page)) {
      for (let i = 0; i < page.count; i++) {
        const c = element(page, i).key.compare(key);
        if (c === 0) return { page, index: i, bufFileOffset: page.id * db.pageSize, pageId: page.id };
        if (c > 0) return undefined;
      }
      return undefined;
    }
    if (page.count === 0) throw new BoltError('E_BOLT_CORRUPT', `page ${page.id}: branch page without elements`, page.id);
    let lo = 0;
    let hi = page.count - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (element(page, mid).key.compare(key) <= 0) lo = mid;
      else hi = mid - 1;
    }
    page = await db.childPage(page, lo);
  }
}

/** Page ids on the persisted freelist (empty when bbolt does not persist it). */
async function freePages(db: BoltDB): Promise<Set<number>> {
  const out = new Set<number>();
  const fl = db.meta.freelist;
  if (fl === undefined) return out;
  const first = await db.page(fl);
  if (!(first.flags & FLAG_FREELIST)) {
    throw new BoltPatchError(`${db.path}: page ${fl} named as the freelist is not a freelist page`);
  }
  let count: U64 = first.count;
  let at = PAGE_HEADER_SIZE;
  if (count === 0xffff) {
    count = readU64(first.buf, at);
    at += 8;
  }
  if (typeof count !== 'number' || at + count * 8 > first.buf.length) {
    throw new BoltPatchError(`${db.path}: freelist page ${fl} is truncated (${count} ids)`);
  }
  for (let i = 0; i < count; i++) {
    const id = readU64(first.buf, at + i * 8);
    // Not a page of this file: the freelist is corrupt, and so may be what it says about the flag's page.
    if (typeof id !== 'number') {
      const offset = fl * db.pageSize + at + i * 8;
      throw new BoltPatchError(`${db.path}: freelist page ${fl} holds page id ${id} (file offset ${offset}), out of range`);
    }
    out.add(id);
  }
  return out;
}

async function locateIn(db: BoltDB, flagKey: FlagKey): Promise<FlagLocation | undefined> {
  const name = flagName(flagKey);
  const rootId = db.meta.root;
  const bucketEl = await findLeafElement(db, db.rootBucket(), 0, rootId, flagKey.bucket);
  if (!bucketEl) return undefined;
  const e = element(bucketEl.page, bucketEl.index);
  if (!(e.flags & LEAF_FLAG_BUCKET)) {
    throw new BoltPatchError(`${db.path}: top-level key ${JSON.stringify(flagKey.bucket.toString('latin1'))} is not a bucket`);
  }
  const bucket = bucketFromValue(e.value, bucketEl.pageId);
  const bucketValueOffset = bucketEl.bufFileOffset + valueStart(bucketEl.page, bucketEl.index);
  const flag = await findLeafElement(db, bucket, bucketValueOffset, bucketEl.pageId, flagKey.key);
  if (!flag) return undefined;
  const fe = element(flag.page, flag.index);
  if (fe.flags & LEAF_FLAG_BUCKET) throw new BoltPatchError(`${db.path}: ${name} is a bucket, not a value`);
  if (fe.value.length !== 1 || (fe.value[0] !== 0 && fe.value[0] !== 1)) {
    throw new BoltPatchError(
      `${db.path}: ${name} holds ${fe.value.length} byte(s) [${fe.value.toString('hex')}], expected one byte 00 or 01`,
    );
  }
  const fileOffset = flag.bufFileOffset + valueStart(flag.page, flag.index);
  // The byte must lie inside the page that holds it (plus its overflow) and below the high-water mark.
  const pageStart = flag.pageId * db.pageSize;
  const pageEnd = pageStart + (flag.page.overflow + 1) * db.pageSize;
  const ownerEnd = bucket.inline ? pageStart + (bucketEl.page.overflow + 1) * db.pageSize : pageEnd;
  if (fileOffset < pageStart || fileOffset >= ownerEnd || fileOffset >= db.meta.pgid * db.pageSize || flag.pageId < 2) {
    throw new BoltPatchError(`${db.path}: ${name} resolved to offset ${fileOffset}, outside its page ${flag.pageId}`);
  }
  return { fileOffset, set: fe.value[0] === 1, pageId: flag.pageId, inlineBucket: bucket.inline !== undefined };
}

/** Finds the flag in `dbPath` from the current meta; undefined when its bucket or key is absent. */
export async function locateFlag(dbPath: string, flag: FlagKey): Promise<FlagLocation | undefined> {
  const db = await BoltDB.open(dbPath);
  try {
    return await locateIn(db, flag);
  } finally {
    await db.close();
  }
}

/**
 * Sets the flag in a bbolt file no process has open by overwriting its one byte in place (positional write +
 * fsync), then reads it back through the tree. Returns the previous value; does nothing when the flag already
 * has the wanted value. An absent flag: nothing to do when clearing it, refused when setting it (creating a
 * key is no one-byte write).
 */
export async function setFlag(dbPath: string, flagKey: FlagKey, set: boolean): Promise<{ previous: boolean; changed: boolean }> {
  const name = flagName(flagKey);
  const holder = await findFlockHolder(dbPath);
  if (holder) throw new BoltPatchError(`${dbPath} is open in process ${holder.pid} (bbolt lock held): refusing to patch it`);
  const db = await BoltDB.open(dbPath);
  let loc: FlagLocation | undefined;
  try {
    loc = await locateIn(db, flagKey);
    if (!loc) {
      if (!set) return { previous: false, changed: false };
      throw new BoltPatchError(`${dbPath}: no ${name} key; refusing to create one in place`);
    }
    if (loc.set === set) return { previous: loc.set, changed: false };
    const free = await freePages(db);
    if (free.has(loc.pageId)) throw new BoltPatchError(`${dbPath}: page ${loc.pageId} holding ${name} is on the freelist`);
  } finally {
    await db.close();
  }

  const fh = await open(dbPath, 'r+');
  try {
    const cur = Buffer.alloc(1);
    await fh.read(cur, 0, 1, loc.fileOffset);
    if (cur[0] !== (loc.set ? 1 : 0)) {
      throw new BoltPatchError(`${dbPath}: byte at ${loc.fileOffset} changed under us (0x${cur[0]!.toString(16)}); not patched`);
    }
    const { bytesWritten } = await fh.write(Buffer.from([set ? 1 : 0]), 0, 1, loc.fileOffset);
    if (bytesWritten !== 1) throw new BoltPatchError(`${dbPath}: short write at ${loc.fileOffset}`);
    await fh.sync();
  } finally {
    await fh.close();
  }
  const after = await locateFlag(dbPath, flagKey);
  if (!after || after.set !== set || after.fileOffset !== loc.fileOffset) {
    throw new BoltPatchError(`${dbPath}: ${name} did not read back as ${set ? 1 : 0} after the write`);
  }
  return { previous: loc.set, changed: true };
}
