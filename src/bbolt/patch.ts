/**
 * One narrowly scoped in-place write into an etcd backend file: the value of key `authEnabled` in bucket
 * `auth` (etcd's `authEnabled` = [1], `authDisabled` = [0]).
 *
 * Why this is safe for bbolt: only meta pages carry a checksum; branch and leaf pages do not. Changing one
 * byte of a leaf value keeps every length, offset and key intact, so the tree stays valid as long as the
 * page is live (reachable from the current meta and not on the freelist) and no process has the file open.
 * We check all of that and refuse anything unexpected: a value that is not a single 0 or 1 byte, a page
 * that is not a leaf, a page on the freelist, a visible flock holder, a byte on disk that changed since it
 * was located.
 *
 * Why the restorer needs it: etcd reads the flag once at start (auth store construction) and keeps it in
 * memory (etcd's NewAuthStore; etcd-io/etcd#7260), so a local etcd started on a db with the byte at 0
 * runs without auth, and one started after the byte is back at 1 enforces auth again.
 *
 * Only for data dirs fresh from `snapshot restore`: their WAL holds no auth entry. A data dir that ran
 * `auth enable` itself may have that entry above the backend's consistent index, and etcd re-applies it
 * at start, over the flag.
 */
import { CodedError } from '../errors.js';
import { open } from 'node:fs/promises';
import { BoltDB, BoltError, bucketFromValue, element, isLeaf } from './db.js';
import type { Bucket, Page } from './db.js';
import { ELEMENT_SIZE, FLAG_FREELIST, LEAF_FLAG_BUCKET, PAGE_HEADER_SIZE, readU64 } from './format.js';
import type { U64 } from './format.js';
import { findFlockHolder } from './lock.js';
import { AUTH_BUCKET, AUTH_ENABLED_KEY } from '../etcd-schema.js';

export class BoltPatchError extends CodedError {
  readonly code = 'E_BOLT_PATCH';
  override readonly name = 'BoltPatchError';
}

/** Where the flag's byte lives, as found from the current meta. */
export interface AuthFlagLocation {
  /** Byte offset of the one-byte value in the file. */
  fileOffset: number;
  /** The value there: true for [1], false for [0]. */
  enabled: boolean;
  /** The page that holds the byte (for an inline `auth` bucket: the page holding the bucket). */
  pageId: number;
  inlineBucket: boolean;
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

async function locateIn(db: BoltDB): Promise<AuthFlagLocation | undefined> {
  const rootId = db.meta.root;
  const authEl = await findLeafElement(db, db.rootBucket(), 0, rootId, AUTH_BUCKET);
  if (!authEl) return undefined;
  const e = element(authEl.page, authEl.index);
  if (!(e.flags & LEAF_FLAG_BUCKET)) throw new BoltPatchError(`${db.path}: top-level key "auth" is not a bucket`);
  const bucket = bucketFromValue(e.value, authEl.pageId);
  const bucketValueOffset = authEl.bufFileOffset + valueStart(authEl.page, authEl.index);
  const flag = await findLeafElement(db, bucket, bucketValueOffset, authEl.pageId, AUTH_ENABLED_KEY);
  if (!flag) return undefined;
  const fe = element(flag.page, flag.index);
  if (fe.flags & LEAF_FLAG_BUCKET) throw new BoltPatchError(`${db.path}: auth/authEnabled is a bucket, not a value`);
  if (fe.value.length !== 1 || (fe.value[0] !== 0 && fe.value[0] !== 1)) {
    throw new BoltPatchError(
      `${db.path}: auth/authEnabled holds ${fe.value.length} byte(s) [${fe.value.toString('hex')}], expected one byte 00 or 01`,
    );
  }
  const fileOffset = flag.bufFileOffset + valueStart(flag.page, flag.index);
  // The byte must lie inside the page that holds it (plus its overflow) and below the high-water mark.
  const pageStart = flag.pageId * db.pageSize;
  const pageEnd = pageStart + (flag.page.overflow + 1) * db.pageSize;
  const ownerEnd = bucket.inline ? pageStart + (authEl.page.overflow + 1) * db.pageSize : pageEnd;
  if (fileOffset < pageStart || fileOffset >= ownerEnd || fileOffset >= db.meta.pgid * db.pageSize || flag.pageId < 2) {
    throw new BoltPatchError(`${db.path}: auth/authEnabled resolved to offset ${fileOffset}, outside its page ${flag.pageId}`);
  }
  return { fileOffset, enabled: fe.value[0] === 1, pageId: flag.pageId, inlineBucket: bucket.inline !== undefined };
}

/** Finds etcd's auth flag in `dbPath` from the current meta; undefined when auth was never set up. */
export async function locateAuthFlag(dbPath: string): Promise<AuthFlagLocation | undefined> {
  const db = await BoltDB.open(dbPath);
  try {
    return await locateIn(db);
  } finally {
    await db.close();
  }
}

/** The flag as etcd would read it at start: false when the bucket or key is absent. */
export async function readAuthEnabled(dbPath: string): Promise<boolean> {
  return (await locateAuthFlag(dbPath))?.enabled ?? false;
}

/**
 * Sets etcd's auth flag in a stopped etcd's backend file by overwriting its one byte in place (positional
 * write + fsync), then reads it back through the tree. Returns the previous value; does nothing when the
 * flag already has the wanted value. Absent flag and `enabled = false`: nothing to do. Absent flag and
 * `enabled = true`: refused (etcd would also need a root user; that is not ours to create).
 */
export async function setAuthEnabled(dbPath: string, enabled: boolean): Promise<{ previous: boolean; changed: boolean }> {
  const holder = await findFlockHolder(dbPath);
  if (holder) throw new BoltPatchError(`${dbPath} is open in process ${holder.pid} (bbolt lock held): refusing to patch it`);
  const db = await BoltDB.open(dbPath);
  let loc: AuthFlagLocation | undefined;
  try {
    loc = await locateIn(db);
    if (!loc) {
      if (!enabled) return { previous: false, changed: false };
      throw new BoltPatchError(`${dbPath}: no auth/authEnabled key; refusing to create one in place`);
    }
    if (loc.enabled === enabled) return { previous: loc.enabled, changed: false };
    const free = await freePages(db);
    if (free.has(loc.pageId)) throw new BoltPatchError(`${dbPath}: page ${loc.pageId} holding auth/authEnabled is on the freelist`);
  } finally {
    await db.close();
  }

  const fh = await open(dbPath, 'r+');
  try {
    const cur = Buffer.alloc(1);
    await fh.read(cur, 0, 1, loc.fileOffset);
    if (cur[0] !== (loc.enabled ? 1 : 0)) {
      throw new BoltPatchError(`${dbPath}: byte at ${loc.fileOffset} changed under us (0x${cur[0]!.toString(16)}); not patched`);
    }
    const { bytesWritten } = await fh.write(Buffer.from([enabled ? 1 : 0]), 0, 1, loc.fileOffset);
    if (bytesWritten !== 1) throw new BoltPatchError(`${dbPath}: short write at ${loc.fileOffset}`);
    await fh.sync();
  } finally {
    await fh.close();
  }
  const after = await locateAuthFlag(dbPath);
  if (!after || after.enabled !== enabled || after.fileOffset !== loc.fileOffset) {
    throw new BoltPatchError(`${dbPath}: auth/authEnabled did not read back as ${enabled ? 1 : 0} after the write`);
  }
  return { previous: loc.enabled, changed: true };
}
