/**
 * A bulk loader that writes a fresh, compact bbolt file from sorted input (the format is described in
 * format.ts). Top-level buckets are written one after the other, in name order, each as its own B+tree:
 * leaf pages are filled as entries arrive (a value larger than a page gets overflow pages), then the branch
 * levels are built bottom-up from the first key of every child. Only the child references of the bucket
 * being written are held in memory (one per page), never the entries, so memory does not grow with the
 * data. Pages are allocated in file order and written in large sequential batches.
 *
 * Layout of the result: pages 0 and 1 the two meta pages, page 2 an empty freelist (every page is in use),
 * then the buckets' pages, then the tree of top-level buckets. Empty buckets are written inline, as bbolt
 * writes a fresh bucket. The file is fsynced before `finish` resolves (unless `sync: false`); the caller renames it into place.
 */
import { CodedError } from '../errors.js';
import { open, type FileHandle } from 'node:fs/promises';
import {
  BUCKET_HEADER_SIZE,
  ELEMENT_SIZE,
  FLAG_BRANCH,
  FLAG_FREELIST,
  FLAG_LEAF,
  FLAG_META,
  LEAF_FLAG_BUCKET,
  MAGIC,
  META_CHECKSUM_OFFSET,
  PAGE_HEADER_SIZE,
  VERSION,
  compareBytes,
  fnv64a,
} from './format.js';

export class BoltWriteError extends CodedError {
  override readonly name = 'BoltWriteError';
  readonly code = 'E_BOLT_WRITE';
}

export interface WriterEntry {
  key: Buffer;
  value: Buffer;
}

function isBatch(item: WriterEntry | readonly WriterEntry[]): item is readonly WriterEntry[] {
  return Array.isArray(item);
}

interface ChildRef {
  key: Buffer;
  pgid: number;
}

interface LeafItem {
  key: Buffer;
  value: Buffer;
  flags: number;
}

const FREELIST_PAGE = 2;
const FIRST_DATA_PAGE = 3;
/** Pages are written in batches of about this many bytes. */
const WRITE_BATCH_BYTES = 4 * 1024 * 1024;
/** Batch buffers kept for reuse after a flush (a batch rarely needs more than two). */
const MAX_SPARE_BUFFERS = 2;
/** bbolt's page header counts elements in a u16. */
const MAX_ELEMENTS = 0xffff;

export interface BoltWriterOptions {
  pageSize: number;
  /** Transaction id of the newer meta page; the older one gets txid - 1. */
  txid: number;
  /**
   * fsync the file before `finish` resolves (default true). False only for a caller that fsyncs it itself
   * later, before anything relies on it (a restore syncs its whole data dir while it checks the result).
   */
  sync?: boolean;
}

export class BoltWriter {
  private nextPage = FIRST_DATA_PAGE;
  /** Pages waiting to be written, in file order: filled batch buffers and nodes too large for one. */
  private batch: Buffer[] = [];
  private batchBytes = 0;
  /**
   * The batch buffer being filled: nodes up to half its size are laid out in it where they will be written
   * from (copying each page into the batch cost a tenth of a small restore's write), larger ones get a buffer
   * of their own. Batch buffers are reused once flushed (`spare`), so a restore of millions of entries
   * allocates no memory per page (per-page buffers are freed only by a full GC, and piled up as hundreds of
   * MB of RSS) nor a fresh batch buffer per flush.
   */
  private current: Buffer = Buffer.allocUnsafeSlow(WRITE_BATCH_BYTES);
  private currentUsed = 0;
  /** Full batch buffers handed to the pending batch (reusable after its flush), and those free again. */
  private retired: Buffer[] = [];
  private spare: Buffer[] = [];
  /** File position where the pending batch starts. */
  private batchStart: number;
  private readonly rootItems: LeafItem[] = [];
  private lastBucketName: Buffer | undefined;
  private finished = false;

  private constructor(
    private readonly fh: FileHandle,
    readonly path: string,
    private readonly opts: BoltWriterOptions,
  ) {
    this.batchStart = FIRST_DATA_PAGE * opts.pageSize;
  }

  /**
   * A zeroed buffer for the node of `pages` pages just allocated, to be laid out and then handed to `queue`
   * before any other node: the next bytes of the batch buffer, or a buffer of its own for a large node.
   */
  private nodeBuffer(pages: number): Buffer {
    const bytes = pages * this.opts.pageSize;
    if (bytes > WRITE_BATCH_BYTES / 2) return Buffer.alloc(bytes);
    if (bytes > this.current.length - this.currentUsed) this.retireCurrent();
    return this.current.subarray(this.currentUsed, this.currentUsed + bytes).fill(0);
  }

  /** Moves the filled part of the batch buffer to the pending batch and starts a fresh one. */
  private retireCurrent(): void {
    if (this.currentUsed === 0) return;
    this.batch.push(this.current.subarray(0, this.currentUsed));
    this.retired.push(this.current);
    this.current = this.spare.pop() ?? Buffer.allocUnsafeSlow(WRITE_BATCH_BYTES);
    this.currentUsed = 0;
  }

  /** Creates (or truncates) `path` for writing. */
  static async create(path: string, opts: BoltWriterOptions): Promise<BoltWriter> {
    const { pageSize } = opts;
    if (pageSize < 512 || pageSize > 1 << 16 || (pageSize & (pageSize - 1)) !== 0) {
      throw new BoltWriteError(`bbolt writer: unsupported page size ${pageSize}`);
    }
    if (!Number.isSafeInteger(opts.txid) || opts.txid < 2) throw new BoltWriteError(`bbolt writer: bad txid ${opts.txid}`);
    const fh = await open(path, 'w', 0o600);
    return new BoltWriter(fh, path, opts);
  }

  /**
   * Writes one top-level bucket from `entries` in strictly increasing key order (bbolt's byte order).
   * Buckets must come in strictly increasing name order.
   */
  async writeBucket(
    name: Buffer,
    entries: AsyncIterable<WriterEntry | readonly WriterEntry[]> | Iterable<WriterEntry | readonly WriterEntry[]>,
    sequence = 0,
  ): Promise<void> {
    if (this.finished) throw new BoltWriteError('bbolt writer: already finished');
    if (this.lastBucketName && Buffer.compare(this.lastBucketName, name) >= 0) {
      throw new BoltWriteError(`bbolt writer: bucket ${JSON.stringify(name.toString())} out of order`);
    }
    this.lastBucketName = name;
    const level: ChildRef[] = [];
    let items: LeafItem[] = [];
    let size = PAGE_HEADER_SIZE;
    let prev: Buffer | undefined;
    const ps = this.opts.pageSize;
    const add = (e: WriterEntry): void => {
      if (prev && compareBytes(prev, 0, prev.length, e.key, 0, e.key.length) >= 0) {
        throw new BoltWriteError(
          `bbolt writer: bucket ${JSON.stringify(name.toString())}: key ${e.key.toString('hex')} not after ${prev.toString('hex')}`,
        );
      }
      prev = e.key;
      const bytes = ELEMENT_SIZE + e.key.length + e.value.length;
      if (items.length > 0 && (size + bytes > ps || items.length === MAX_ELEMENTS)) {
        level.push(this.writeLeaf(items, size));
        items = [];
        size = PAGE_HEADER_SIZE;
      }
      items.push({ key: e.key, value: e.value, flags: 0 });
      size += bytes;
    };
    // Entries come one at a time or in batches (a batch costs one await instead of one per entry); the pages
    // written meanwhile are flushed once the batch is in.
    for await (const item of entries) {
      if (isBatch(item)) for (const e of item) add(e);
      else add(item);
      if (this.batchBytes >= WRITE_BATCH_BYTES) await this.flush();
    }
    let header: Buffer;
    if (items.length === 0 && level.length === 0) {
      // An empty bucket is inline: header with root 0, followed by an empty leaf page header.
      header = Buffer.alloc(BUCKET_HEADER_SIZE + PAGE_HEADER_SIZE);
      header.writeBigUInt64LE(BigInt(sequence), 8);
      header.writeUInt16LE(FLAG_LEAF, BUCKET_HEADER_SIZE + 8);
    } else {
      if (items.length > 0) level.push(this.writeLeaf(items, size));
      const root = await this.buildBranches(level);
      header = Buffer.alloc(BUCKET_HEADER_SIZE);
      header.writeBigUInt64LE(BigInt(root), 0);
      header.writeBigUInt64LE(BigInt(sequence), 8);
    }
    this.rootItems.push({ key: Buffer.from(name), value: header, flags: LEAF_FLAG_BUCKET });
    await this.maybeFlush();
  }

  /**
   * Writes the tree of top-level buckets, the freelist and both meta pages, and fsyncs. Returns the number
   * of pages (the high-water mark).
   */
  async finish(): Promise<number> {
    if (this.finished) throw new BoltWriteError('bbolt writer: already finished');
    this.finished = true;
    const ps = this.opts.pageSize;
    const level: ChildRef[] = [];
    let items: LeafItem[] = [];
    let size = PAGE_HEADER_SIZE;
    for (const item of this.rootItems) {
      const add = ELEMENT_SIZE + item.key.length + item.value.length;
      if (items.length > 0 && size + add > ps) {
        level.push(this.writeLeaf(items, size));
        items = [];
        size = PAGE_HEADER_SIZE;
      }
      items.push(item);
      size += add;
    }
    level.push(this.writeLeaf(items, size));
    const root = await this.buildBranches(level);
    await this.flush();
    const hwm = this.nextPage;

    const freelist = Buffer.alloc(ps);
    freelist.writeBigUInt64LE(BigInt(FREELIST_PAGE), 0);
    freelist.writeUInt16LE(FLAG_FREELIST, 8);
    await this.writeAt(freelist, FREELIST_PAGE * ps);
    const metas = Buffer.alloc(2 * ps);
    for (const id of [0, 1]) {
      this.fillMeta(metas, id * ps, id, root, hwm, id === 1 ? this.opts.txid : this.opts.txid - 1);
    }
    await this.writeAt(metas, 0);
    if (this.opts.sync !== false) await this.fh.sync();
    await this.fh.close();
    return hwm;
  }

  /** Closes the file without finishing it (the caller removes it). */
  async abort(): Promise<void> {
    this.finished = true;
    await this.fh.close().catch(() => undefined);
  }

  private fillMeta(buf: Buffer, off: number, id: number, root: number, hwm: number, txid: number): void {
    buf.writeBigUInt64LE(BigInt(id), off);
    buf.writeUInt16LE(FLAG_META, off + 8);
    const m = off + PAGE_HEADER_SIZE;
    buf.writeUInt32LE(MAGIC, m);
    buf.writeUInt32LE(VERSION, m + 4);
    buf.writeUInt32LE(this.opts.pageSize, m + 8);
    buf.writeUInt32LE(0, m + 12);
    buf.writeBigUInt64LE(BigInt(root), m + 16);
    buf.writeBigUInt64LE(0n, m + 24);
    buf.writeBigUInt64LE(BigInt(FREELIST_PAGE), m + 32);
    buf.writeBigUInt64LE(BigInt(hwm), m + 40);
    buf.writeBigUInt64LE(BigInt(txid), m + 48);
    buf.writeBigUInt64LE(fnv64a(buf, m, m + META_CHECKSUM_OFFSET), m + META_CHECKSUM_OFFSET);
  }

  /** Lays out one leaf node (with overflow pages when it is larger than a page) and queues it. */
  private writeLeaf(items: LeafItem[], size: number): ChildRef {
    const ps = this.opts.pageSize;
    const pages = Math.max(1, Math.ceil(size / ps));
    const pgid = this.allocate(pages);
    const buf = this.nodeBuffer(pages);
    buf.writeBigUInt64LE(BigInt(pgid), 0);
    buf.writeUInt16LE(FLAG_LEAF, 8);
    buf.writeUInt16LE(items.length, 10);
    buf.writeUInt32LE(pages - 1, 12);
    let data = PAGE_HEADER_SIZE + items.length * ELEMENT_SIZE;
    items.forEach((item, i) => {
      const el = PAGE_HEADER_SIZE + i * ELEMENT_SIZE;
      buf.writeUInt32LE(item.flags, el);
      buf.writeUInt32LE(data - el, el + 4);
      buf.writeUInt32LE(item.key.length, el + 8);
      buf.writeUInt32LE(item.value.length, el + 12);
      data += item.key.copy(buf, data);
      data += item.value.copy(buf, data);
    });
    this.queue(buf);
    return { key: ownCopy(items[0]!.key), pgid };
  }

  /** Builds branch levels over `children` until one node remains; returns the root page id. */
  private async buildBranches(children: ChildRef[]): Promise<number> {
    const ps = this.opts.pageSize;
    let level = children;
    while (level.length > 1) {
      const up: ChildRef[] = [];
      let group: ChildRef[] = [];
      let size = PAGE_HEADER_SIZE;
      for (const c of level) {
        const add = ELEMENT_SIZE + c.key.length;
        if (group.length > 0 && (size + add > ps || group.length === MAX_ELEMENTS)) {
          up.push(this.writeBranch(group, size));
          group = [];
          size = PAGE_HEADER_SIZE;
        }
        group.push(c);
        size += add;
      }
      up.push(this.writeBranch(group, size));
      await this.maybeFlush();
      level = up;
    }
    return level[0]!.pgid;
  }

  private writeBranch(children: ChildRef[], size: number): ChildRef {
    const ps = this.opts.pageSize;
    const pages = Math.max(1, Math.ceil(size / ps));
    const pgid = this.allocate(pages);
    const buf = this.nodeBuffer(pages);
    buf.writeBigUInt64LE(BigInt(pgid), 0);
    buf.writeUInt16LE(FLAG_BRANCH, 8);
    buf.writeUInt16LE(children.length, 10);
    buf.writeUInt32LE(pages - 1, 12);
    let data = PAGE_HEADER_SIZE + children.length * ELEMENT_SIZE;
    children.forEach((c, i) => {
      const el = PAGE_HEADER_SIZE + i * ELEMENT_SIZE;
      buf.writeUInt32LE(data - el, el);
      buf.writeUInt32LE(c.key.length, el + 4);
      buf.writeBigUInt64LE(BigInt(c.pgid), el + 8);
      data += c.key.copy(buf, data);
    });
    this.queue(buf);
    return { key: children[0]!.key, pgid };
  }

  private allocate(pages: number): number {
    const id = this.nextPage;
    this.nextPage += pages;
    return id;
  }

  /** Appends the node laid out in `buf` (from nodeBuffer) to the pending pages. */
  private queue(buf: Buffer): void {
    this.batchBytes += buf.length;
    if (buf.buffer === this.current.buffer && buf.byteOffset === this.current.byteOffset + this.currentUsed) {
      this.currentUsed += buf.length;
      return;
    }
    // A large node, in a buffer of its own: after the nodes before it, in file order.
    this.retireCurrent();
    this.batch.push(buf);
  }

  private async maybeFlush(): Promise<void> {
    if (this.batchBytes >= WRITE_BATCH_BYTES) await this.flush();
  }

  private async flush(): Promise<void> {
    if (this.batchBytes === 0) return;
    const bufs = this.currentUsed > 0 ? [...this.batch, this.current.subarray(0, this.currentUsed)] : this.batch;
    const bytes = this.batchBytes;
    const retired = this.retired;
    this.batch = [];
    this.retired = [];
    this.batchBytes = 0;
    let written = 0;
    while (written < bytes) {
      const { bytesWritten } = await this.fh.writev(written === 0 ? bufs : sliceFrom(bufs, written), this.batchStart + written);
      written += bytesWritten;
    }
    // Written: the batch buffers are free again (callers await each flush before laying out more nodes).
    this.currentUsed = 0;
    this.spare.push(...retired.slice(0, MAX_SPARE_BUFFERS - this.spare.length));
    this.batchStart += bytes;
  }

  private async writeAt(buf: Buffer, position: number): Promise<void> {
    let done = 0;
    while (done < buf.length) {
      const { bytesWritten } = await this.fh.write(buf, done, buf.length - done, position + done);
      done += bytesWritten;
    }
  }
}

/**
 * A key kept for the branch levels, in memory of its own: the entry's key may be a slice of a whole page
 * read from another file, or of Node's 8 KiB pool, and keeping one reference per page would keep all of those.
 */
function ownCopy(key: Buffer): Buffer {
  const copy = Buffer.allocUnsafeSlow(key.length);
  key.copy(copy);
  return copy;
}

/** The buffers from byte `offset` on (after a short writev). */
function sliceFrom(bufs: Buffer[], offset: number): Buffer[] {
  const out: Buffer[] = [];
  let skip = offset;
  for (const b of bufs) {
    if (skip >= b.length) {
      skip -= b.length;
      continue;
    }
    out.push(skip > 0 ? b.subarray(skip) : b);
    skip = 0;
  }
  return out;
}
