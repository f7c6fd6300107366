/**
 * bbolt's on-disk format (go.etcd.io/bbolt: page.go, meta.go, node.go, bucket.go, freelist.go), little-endian:
 *
 * - The file is a run of pages of `pageSize` bytes; page N starts at N * pageSize. A page with `overflow` k
 *   spans k + 1 consecutive pages (large values, big freelists).
 * - Page header, 16 bytes: id u64, flags u16 (0x01 branch, 0x02 leaf, 0x04 meta, 0x10 freelist),
 *   count u16, overflow u32.
 * - Pages 0 and 1 are the two meta pages, written alternately (txid % 2). Meta after the header: magic u32
 *   (0xED0CDAED), version u32 (2), pageSize u32, flags u32, root bucket {root pgid u64, sequence u64},
 *   freelist pgid u64, pgid u64 (high-water mark: pages in use, i.e. the next page to allocate), txid u64,
 *   checksum u64 = FNV-64a over the 56 meta bytes before it. The valid meta with the higher txid is current.
 * - Branch element, 16 bytes: pos u32, ksize u32, pgid u64. Leaf element, 16 bytes: flags u32 (0x01 = the
 *   value is a bucket), pos u32, ksize u32, vsize u32. `pos` is relative to the element itself; the value
 *   follows the key.
 * - A bucket value: {root pgid u64, sequence u64}; root 0 means an inline bucket whose leaf page follows
 *   the 16-byte header inside the value.
 * - Freelist page: count ids of u64; count 0xFFFF means the real count is the first u64 after the header.
 *   Meta freelist = 0xFFFFFFFFFFFFFFFF means the freelist is not persisted (NoFreelistSync).
 */

export const PAGE_HEADER_SIZE = 16;
export const ELEMENT_SIZE = 16;
export const BUCKET_HEADER_SIZE = 16;
export const META_SIZE = 64;
export const META_CHECKSUM_OFFSET = 56;

export const FLAG_BRANCH = 0x01;
export const FLAG_LEAF = 0x02;
export const FLAG_META = 0x04;
export const FLAG_FREELIST = 0x10;

export const LEAF_FLAG_BUCKET = 0x01;

export const MAGIC = 0xed0cdaed;
export const VERSION = 2;

const TWO_32 = 4294967296;

/** A u64 as a number. Exact below 2^53; anything above is garbage for a page id anyway and compares as huge. */
export function readU64(buf: Buffer, off: number): number {
  return buf.readUInt32LE(off + 4) * TWO_32 + buf.readUInt32LE(off);
}

/**
 * Sign of a[aStart, aEnd) − b[bStart, bEnd) in byte order (a proper prefix sorts first), as bbolt orders keys.
 * Keys are mostly short (etcd's revision keys are 17 bytes), where a loop here costs a fraction of a call
 * into Buffer.compare; long keys still go to the native compare.
 */
export function compareBytes(a: Buffer, aStart: number, aEnd: number, b: Buffer, bStart: number, bEnd: number): number {
  const aLen = aEnd - aStart;
  const bLen = bEnd - bStart;
  const n = aLen < bLen ? aLen : bLen;
  if (n > SHORT_KEY) return a.compare(b, bStart, bEnd, aStart, aEnd);
  for (let i = 0; i < n; i++) {
    const d = a[aStart + i]! - b[bStart + i]!;
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  return aLen === bLen ? 0 : aLen < bLen ? -1 : 1;
}

/** Copies src[start, end) into dst at `at`; short ranges in a loop (see compareBytes), long ones natively. */
export function copyBytes(src: Buffer, start: number, end: number, dst: Buffer, at: number): void {
  if (end - start > SHORT_KEY) {
    src.copy(dst, at, start, end);
    return;
  }
  for (let i = start; i < end; i++) dst[at++] = src[i]!;
}

/** Up to this many bytes, comparing and copying in JavaScript beats the cost of a native call. */
const SHORT_KEY = 64;

/**
 * Little-endian u16 / u32 / u64 at `off` without Buffer's bounds validation, for the check's per-element
 * loops (millions of reads on a large file). The caller has checked that the bytes lie inside `buf`.
 */
export function u16(buf: Uint8Array, off: number): number {
  return buf[off]! | (buf[off + 1]! << 8);
}

export function u32(buf: Uint8Array, off: number): number {
  return (buf[off]! | (buf[off + 1]! << 8) | (buf[off + 2]! << 16)) + buf[off + 3]! * 0x1000000;
}

export function u64(buf: Uint8Array, off: number): number {
  return u32(buf, off + 4) * TWO_32 + u32(buf, off);
}

export function isAllOnes64(buf: Buffer, off: number): boolean {
  return buf.readUInt32LE(off) === 0xffffffff && buf.readUInt32LE(off + 4) === 0xffffffff;
}

export interface PageHeader {
  id: number;
  flags: number;
  count: number;
  overflow: number;
}

export function readPageHeader(buf: Buffer, off: number): PageHeader {
  return {
    id: readU64(buf, off),
    flags: buf.readUInt16LE(off + 8),
    count: buf.readUInt16LE(off + 10),
    overflow: buf.readUInt32LE(off + 12),
  };
}

export function pageTypeName(flags: number): string {
  if (flags & FLAG_BRANCH) return 'branch';
  if (flags & FLAG_LEAF) return 'leaf';
  if (flags & FLAG_META) return 'meta';
  if (flags & FLAG_FREELIST) return 'freelist';
  return `unknown<${flags.toString(16).padStart(2, '0')}>`;
}

export interface Meta {
  magic: number;
  version: number;
  pageSize: number;
  flags: number;
  /** Page id of the root bucket's tree (the tree of top-level buckets). */
  root: number;
  sequence: number;
  /** Page id of the freelist, or undefined when the freelist is not persisted. */
  freelist: number | undefined;
  /** High-water mark: the number of pages in use. */
  pgid: number;
  txid: number;
  checksum: bigint;
}

/** Parses the meta that starts at `off` (just after a page header). */
export function readMeta(buf: Buffer, off: number): Meta {
  return {
    magic: buf.readUInt32LE(off),
    version: buf.readUInt32LE(off + 4),
    pageSize: buf.readUInt32LE(off + 8),
    flags: buf.readUInt32LE(off + 12),
    root: readU64(buf, off + 16),
    sequence: readU64(buf, off + 24),
    freelist: isAllOnes64(buf, off + 32) ? undefined : readU64(buf, off + 32),
    pgid: readU64(buf, off + 40),
    txid: readU64(buf, off + 48),
    checksum: buf.readBigUInt64LE(off + META_CHECKSUM_OFFSET),
  };
}

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK64 = 0xffffffffffffffffn;

/** FNV-1a 64-bit (Go's hash/fnv New64a). Only used on 56-byte metas, so BigInt is fast enough. */
export function fnv64a(buf: Uint8Array, start: number, end: number): bigint {
  let h = FNV_OFFSET;
  for (let i = start; i < end; i++) {
    h ^= BigInt(buf[i]!);
    h = (h * FNV_PRIME) & MASK64;
  }
  return h;
}

/** Why a meta is not usable, or undefined when it is (bbolt's meta.validate). */
export function metaProblem(buf: Buffer, off: number, m: Meta): string | undefined {
  if (m.magic !== MAGIC) return `bad magic 0x${m.magic.toString(16)}`;
  if (m.version !== VERSION) return `unsupported version ${m.version}`;
  const sum = fnv64a(buf, off, off + META_CHECKSUM_OFFSET);
  if (sum !== m.checksum) return `checksum mismatch (stored ${m.checksum.toString(16)}, computed ${sum.toString(16)})`;
  if (m.pageSize < 512 || m.pageSize > 1 << 24 || (m.pageSize & (m.pageSize - 1)) !== 0) {
    return `implausible page size ${m.pageSize}`;
  }
  return undefined;
}
