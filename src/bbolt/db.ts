/**
 * A read-only bbolt database over a file handle. Pages are read on demand with positional reads, so opening
 * and walking one path of an 8 GiB file costs a few KiB of I/O and memory, never the whole file.
 *
 * No flock is taken: Node cannot flock (see lock.ts for how a lock held by etcd is detected instead), and a
 * reader that never writes does not need one. Reading while etcd writes is unsafe the same way it is for
 * bbolt's read-only mode without the lock: callers check for a running etcd first.
 */
import { CodedError } from '../errors.js';
import { open } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import {
  BUCKET_HEADER_SIZE,
  ELEMENT_SIZE,
  FLAG_BRANCH,
  FLAG_LEAF,
  LEAF_FLAG_BUCKET,
  META_SIZE,
  PAGE_HEADER_SIZE,
  metaOutOfRange,
  metaProblem,
  pageTypeName,
  readMeta,
  readU64,
} from './format.js';
import type { Meta, U64 } from './format.js';

export type BoltErrorCode =
  /** The file cannot be opened or read. */
  | 'E_BOLT_OPEN'
  /**
   * Not a usable bbolt file: too small, neither meta page is valid (bbolt's Open fails), or the current meta
   * names pages the file cannot have (a page id of 2^53 or more, a high-water mark beyond the file).
   */
  | 'E_BOLT_INVALID'
  /** A page reached from the current meta is malformed (bbolt would panic or read garbage). */
  | 'E_BOLT_CORRUPT'
  /** A bucket the caller requires is absent. */
  | 'E_BOLT_NO_BUCKET';

export class BoltError extends CodedError {
  override readonly name = 'BoltError';
  constructor(
    readonly code: BoltErrorCode,
    message: string,
    readonly pageId?: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** A branch or leaf page (or an inline bucket's leaf) held in `buf[base, end)`. */
export interface Page {
  id: number;
  flags: number;
  count: number;
  overflow: number;
  buf: Buffer;
  /** Offset of the page header in buf. */
  base: number;
  /** End of the bytes that belong to this page (page + overflow, or the inline value). */
  end: number;
}

export interface Element {
  key: Buffer;
  /** For a leaf element; empty for branch elements. */
  value: Buffer;
  /** Leaf flags (0x01 = sub-bucket); 0 for branch elements. */
  flags: number;
  /** Child page for branch elements (a bigint only when corrupt: see U64); 0 for leaf elements. */
  child: U64;
}

export function isBranch(p: Page): boolean {
  return (p.flags & FLAG_BRANCH) !== 0;
}

export function isLeaf(p: Page): boolean {
  return (p.flags & FLAG_LEAF) !== 0;
}

/** Element i of a branch or leaf page, bounds-checked against the page. */
export function element(p: Page, i: number): Element {
  const e = p.base + PAGE_HEADER_SIZE + i * ELEMENT_SIZE;
  if (i < 0 || i >= p.count || e + ELEMENT_SIZE > p.end) {
    throw new BoltError('E_BOLT_CORRUPT', `page ${p.id}: element ${i} of ${p.count} lies outside the page`, p.id);
  }
  const buf = p.buf;
  if (p.flags & FLAG_BRANCH) {
    const pos = buf.readUInt32LE(e);
    const ksize = buf.readUInt32LE(e + 4);
    const ks = e + pos;
    if (ks + ksize > p.end) {
      throw new BoltError('E_BOLT_CORRUPT', `page ${p.id}: key of element ${i} runs past the page end`, p.id);
    }
    return { key: buf.subarray(ks, ks + ksize), value: EMPTY, flags: 0, child: readU64(buf, e + 8) };
  }
  const flags = buf.readUInt32LE(e);
  const pos = buf.readUInt32LE(e + 4);
  const ksize = buf.readUInt32LE(e + 8);
  const vsize = buf.readUInt32LE(e + 12);
  const ks = e + pos;
  if (ks + ksize + vsize > p.end) {
    throw new BoltError('E_BOLT_CORRUPT', `page ${p.id}: key/value of element ${i} run past the page end`, p.id);
  }
  return { key: buf.subarray(ks, ks + ksize), value: buf.subarray(ks + ksize, ks + ksize + vsize), flags, child: 0 };
}

const EMPTY = Buffer.alloc(0);

/** A bucket: its tree's root page, or its inline leaf page (root 0). */
export interface Bucket {
  root: number;
  inline?: Page;
}

/** Parses a bucket value (bucket header + optional inline page). */
export function bucketFromValue(value: Buffer, ownerPage: number): Bucket {
  if (value.length < BUCKET_HEADER_SIZE) {
    throw new BoltError('E_BOLT_CORRUPT', `page ${ownerPage}: bucket value of ${value.length} bytes is too short`, ownerPage);
  }
  const root = readU64(value, 0);
  if (typeof root === 'bigint') {
    throw new BoltError('E_BOLT_CORRUPT', `page ${ownerPage}: sub-bucket root page id ${root} is out of range`, ownerPage);
  }
  if (root !== 0) return { root };
  const base = BUCKET_HEADER_SIZE;
  if (value.length < base + PAGE_HEADER_SIZE) {
    throw new BoltError('E_BOLT_CORRUPT', `page ${ownerPage}: inline bucket without a page header`, ownerPage);
  }
  const inline: Page = {
    // Inline pages carry no id of their own; report problems against the page that holds them.
    id: ownerPage,
    flags: value.readUInt16LE(base + 8),
    count: value.readUInt16LE(base + 10),
    overflow: 0,
    buf: value,
    base,
    end: value.length,
  };
  if (!(inline.flags & FLAG_LEAF)) {
    throw new BoltError('E_BOLT_CORRUPT', `page ${ownerPage}: inline bucket page is ${pageTypeName(inline.flags)}, not leaf`, ownerPage);
  }
  return { root: 0, inline };
}

export class BoltDB {
  private constructor(
    private readonly fh: FileHandle,
    readonly path: string,
    readonly fileSize: number,
    readonly pageSize: number,
    /** The current meta: the valid one with the higher txid. */
    readonly meta: Meta,
    /** Which meta page (0 or 1) is current. */
    readonly metaPage: 0 | 1,
    /** Why the other meta page is not usable, if it is not. */
    readonly otherMetaProblem: string | undefined,
  ) {}

  /** Opens `path` read-only and selects the current meta. Throws BoltError E_BOLT_OPEN or E_BOLT_INVALID. */
  static async open(path: string): Promise<BoltDB> {
    let fh: FileHandle;
    try {
      fh = await open(path, 'r');
    } catch (err) {
      throw new BoltError('E_BOLT_OPEN', `cannot open ${path}: ${(err as Error).message}`, undefined, { cause: err });
    }
    try {
      return await BoltDB.init(fh, path);
    } catch (err) {
      await fh.close();
      if (err instanceof BoltError) throw err;
      throw new BoltError('E_BOLT_OPEN', `cannot read ${path}: ${(err as Error).message}`, undefined, { cause: err });
    }
  }

  private static async init(fh: FileHandle, path: string): Promise<BoltDB> {
    const fileSize = (await fh.stat()).size;
    const m = await selectMeta((buf, pos) => readFully(fh, buf, pos), fileSize, path);
    if (m.meta.pgid * m.pageSize > fileSize) {
      throw new BoltError('E_BOLT_INVALID', `${path}: high-water mark ${m.meta.pgid} pages lies beyond the file size ${fileSize}`);
    }
    return new BoltDB(fh, path, fileSize, m.pageSize, m.meta, m.metaPage, m.otherMetaProblem);
  }

  /** Number of pages in use (the high-water mark). */
  get pageCount(): number {
    return this.meta.pgid;
  }

  /** Reads page `id` with its overflow pages; checks that the header agrees and the page lies within the mark. */
  async page(id: U64): Promise<Page> {
    if (typeof id !== 'number' || id < 2 || id >= this.meta.pgid) {
      throw new BoltError(
        'E_BOLT_CORRUPT',
        `page ${id}: out of bounds (high-water mark ${this.meta.pgid})`,
        typeof id === 'number' ? id : undefined,
      );
    }
    const ps = this.pageSize;
    let buf = Buffer.allocUnsafe(ps);
    await readFully(this.fh, buf, id * ps);
    const hid = readU64(buf, 0);
    if (hid !== id) throw new BoltError('E_BOLT_CORRUPT', `page ${id}: header says page ${hid}`, id);
    const overflow = buf.readUInt32LE(12);
    if (id + overflow >= this.meta.pgid) {
      throw new BoltError('E_BOLT_CORRUPT', `page ${id}: overflow ${overflow} runs past the high-water mark ${this.meta.pgid}`, id);
    }
    if (overflow > 0) {
      const full = Buffer.allocUnsafe((overflow + 1) * ps);
      buf.copy(full, 0);
      await readFully(this.fh, full.subarray(ps), (id + 1) * ps);
      buf = full;
    }
    return {
      id,
      flags: buf.readUInt16LE(8),
      count: buf.readUInt16LE(10),
      overflow,
      buf,
      base: 0,
      end: buf.length,
    };
  }

  /**
   * The child page of element `i` of branch page `p`. A child outside the file is reported at the branch page
   * and the element's file offset, with the id as stored (exact also when it is 2^53 or more).
   */
  async childPage(p: Page, i: number): Promise<Page> {
    const child = element(p, i).child;
    if (typeof child !== 'number' || child < 2 || child >= this.meta.pgid) {
      const at = p.id * this.pageSize + p.base + PAGE_HEADER_SIZE + i * ELEMENT_SIZE + 8;
      throw new BoltError(
        'E_BOLT_CORRUPT',
        `page ${p.id}: element ${i}: child page id ${child} (file offset ${at}) is out of bounds (high-water mark ${this.meta.pgid})`,
        p.id,
      );
    }
    return this.treePage(child);
  }

  /** The page of a tree: a branch or leaf page, else corrupt. */
  async treePage(id: U64): Promise<Page> {
    const p = await this.page(id);
    if (!(p.flags & (FLAG_BRANCH | FLAG_LEAF))) {
      throw new BoltError('E_BOLT_CORRUPT', `page ${p.id}: ${pageTypeName(p.flags)} page where a branch or leaf was expected`, p.id);
    }
    return p;
  }

  /** The bucket of top-level buckets. */
  rootBucket(): Bucket {
    return { root: this.meta.root };
  }

  /** The (sub-)bucket `name` of `parent` (default: a top-level bucket), or undefined if absent. */
  async bucket(name: string | Uint8Array, parent: Bucket = this.rootBucket()): Promise<Bucket | undefined> {
    const key = typeof name === 'string' ? Buffer.from(name) : Buffer.from(name.buffer, name.byteOffset, name.byteLength);
    let p = parent.inline ?? (await this.treePage(parent.root));
    for (;;) {
      if (isLeaf(p)) {
        for (let i = 0; i < p.count; i++) {
          const e = element(p, i);
          const c = e.key.compare(key);
          if (c === 0) return e.flags & LEAF_FLAG_BUCKET ? bucketFromValue(e.value, p.id) : undefined;
          if (c > 0) return undefined;
        }
        return undefined;
      }
      // Branch: the last child whose first key is <= the key sought.
      if (p.count === 0) throw new BoltError('E_BOLT_CORRUPT', `page ${p.id}: branch page without elements`, p.id);
      let lo = 0;
      let hi = p.count - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >>> 1;
        if (element(p, mid).key.compare(key) <= 0) lo = mid;
        else hi = mid - 1;
      }
      p = await this.childPage(p, lo);
    }
  }

  /** Reads `buf.length` bytes at `position` (used by the consistency check for its sequential scan). */
  async read(buf: Buffer, position: number): Promise<number> {
    let done = 0;
    while (done < buf.length) {
      const { bytesRead } = await this.fh.read(buf, done, buf.length - done, position + done);
      if (bytesRead === 0) break;
      done += bytesRead;
    }
    return done;
  }

  async close(): Promise<void> {
    await this.fh.close();
  }
}

async function readFully(fh: FileHandle, buf: Buffer, position: number): Promise<void> {
  let done = 0;
  while (done < buf.length) {
    const { bytesRead } = await fh.read(buf, done, buf.length - done, position + done);
    if (bytesRead === 0) {
      throw new BoltError('E_BOLT_CORRUPT', `unexpected end of file at offset ${position + done}`);
    }
    done += bytesRead;
  }
}

/** What opening a bbolt file decides from its first pages: the page size and the current meta. */
export interface SelectedMeta {
  pageSize: number;
  meta: Meta;
  metaPage: 0 | 1;
  otherMetaProblem: string | undefined;
}

/**
 * Reads both meta pages through `readAt` (a file, or the first bytes of a stream) and selects the current
 * one: the valid meta with the higher txid. Throws BoltError E_BOLT_INVALID when neither is usable.
 */
export async function selectMeta(
  readAt: (buf: Buffer, position: number) => Promise<void>,
  fileSize: number,
  path: string,
): Promise<SelectedMeta> {
  const pageSize = await detectPageSize(readAt, fileSize);
  if (typeof pageSize === 'string') {
    throw new BoltError('E_BOLT_INVALID', `${path}: not a bbolt database (no valid meta page; meta 0: ${pageSize})`);
  }
  if (fileSize < pageSize * 2) {
    throw new BoltError('E_BOLT_INVALID', `${path}: file size ${fileSize} too small for two meta pages`);
  }
  const metas: (Meta | undefined)[] = [];
  const problems: (string | undefined)[] = [];
  const buffers: Buffer[] = [];
  for (const id of [0, 1]) {
    const buf = Buffer.alloc(PAGE_HEADER_SIZE + META_SIZE);
    buffers.push(buf);
    await readAt(buf, id * pageSize);
    const m = readMeta(buf, PAGE_HEADER_SIZE);
    const problem = metaProblem(buf, PAGE_HEADER_SIZE, m) ?? (m.pageSize !== pageSize ? `page size ${m.pageSize} differs` : undefined);
    metas.push(problem ? undefined : m);
    problems.push(problem);
  }
  const [m0, m1] = metas;
  if (!m0 && !m1) {
    throw new BoltError('E_BOLT_INVALID', `${path}: both meta pages are invalid (0: ${problems[0]}; 1: ${problems[1]})`);
  }
  const use: 0 | 1 = m0 && (!m1 || m0.txid >= m1.txid) ? 0 : 1;
  const meta = (use === 0 ? m0 : m1)!;
  // bbolt would take this meta and fail (or read past the file) on its first page access.
  const wide = metaOutOfRange(buffers[use]!, PAGE_HEADER_SIZE);
  if (wide) {
    const at = use * pageSize + PAGE_HEADER_SIZE + wide.offset;
    throw new BoltError('E_BOLT_INVALID', `${path}: meta page ${use}: ${wide.field} ${wide.value} (file offset ${at}) is out of range`);
  }
  if (meta.pgid < 2) throw new BoltError('E_BOLT_INVALID', `${path}: high-water mark ${meta.pgid} below the meta pages`);
  return { pageSize, meta, metaPage: use, otherMetaProblem: use === 0 ? problems[1] : problems[0] };
}

/**
 * bbolt's page-size detection: the first meta page if it validates, else the second meta page looked for at
 * 1 KiB << i (the page size is not known until a meta is read).
 */
async function detectPageSize(readAt: (buf: Buffer, position: number) => Promise<void>, fileSize: number): Promise<number | string> {
  const buf = Buffer.alloc(PAGE_HEADER_SIZE + META_SIZE);
  const at = async (pos: number): Promise<number | string> => {
    if (pos + buf.length > fileSize) return `file too small (${fileSize} bytes)`;
    await readAt(buf, pos);
    const m = readMeta(buf, PAGE_HEADER_SIZE);
    return metaProblem(buf, PAGE_HEADER_SIZE, m) ?? m.pageSize;
  };
  const first = await at(0);
  if (typeof first === 'number') return first;
  for (let i = 0; i <= 14; i++) {
    const pos = 1024 << i;
    if (pos >= fileSize - 1024) break;
    const size = await at(pos);
    // The second meta sits at exactly one page size.
    if (size === pos) return size;
  }
  return first;
}
