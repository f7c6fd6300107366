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
/** The high word from which a u64 is 2^53 or more, beyond what a number holds exactly. */
const UNSAFE_HIGH_WORD = 0x200000;

/**
 * A u64 read from a bbolt file: a number below 2^53 (every page id, count and txid of a real file, held
 * exactly), else the exact value as a bigint. Only a corrupt file holds the latter; a message then prints the
 * value as it is on disk (`${v}`), not a rounded number. Comparisons with numbers work on both; arithmetic
 * needs a `typeof v === 'number'` first, which is where an out-of-range value is reported.
 */
export type U64 = number | bigint;

/** The u64 of two 32-bit halves; the bigint only when the high word makes it 2^53 or more (a cold path). */
export function u64FromHalves(hi: number, lo: number): U64 {
  return hi < UNSAFE_HIGH_WORD ? hi * TWO_32 + lo : (BigInt(hi) << 32n) | BigInt(lo);
}

/** The little-endian u64 at `off` (see U64). */
export function readU64(buf: Buffer, off: number): U64 {
  return u64FromHalves(buf.readUInt32LE(off + 4), buf.readUInt32LE(off));
}

/** The little-endian u64 at `off` as a number, rounded at 2^53 and above: only where metaOutOfRange has looked. */
function readU64Number(buf: Buffer, off: number): number {
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

export function u64(buf: Uint8Array, off: number): U64 {
  return u64FromHalves(u32(buf, off + 4), u32(buf, off));
}

export function isAllOnes64(buf: Buffer, off: number): boolean {
  return buf.readUInt32LE(off) === 0xffffffff && buf.readUInt32LE(off + 4) === 0xffffffff;
}

export interface PageHeader {
  id: U64;
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

const META_ROOT_OFFSET = 16;
const META_FREELIST_OFFSET = 32;
const META_PGID_OFFSET = 40;
const META_TXID_OFFSET = 48;

/**
 * Parses the meta that starts at `off` (just after a page header). Its page ids and txid are numbers: a meta
 * that holds one of 2^53 or more is refused before use (metaOutOfRange says which, exactly).
 */
export function readMeta(buf: Buffer, off: number): Meta {
  return {
    magic: buf.readUInt32LE(off),
    version: buf.readUInt32LE(off + 4),
    pageSize: buf.readUInt32LE(off + 8),
    flags: buf.readUInt32LE(off + 12),
    root: readU64Number(buf, off + META_ROOT_OFFSET),
    sequence: readU64Number(buf, off + 24),
    freelist: isAllOnes64(buf, off + META_FREELIST_OFFSET) ? undefined : readU64Number(buf, off + META_FREELIST_OFFSET),
    pgid: readU64Number(buf, off + META_PGID_OFFSET),
    txid: readU64Number(buf, off + META_TXID_OFFSET),
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

/**
 * The first page id or txid of the meta at `off` that is 2^53 or more (no real file gets there: a corrupt
 * meta), with its exact value and its offset from `off`; undefined when all are in range. The unset
 * freelist (all ones) is not one.
 */
export function metaOutOfRange(buf: Buffer, off: number): { field: string; value: bigint; offset: number } | undefined {
  const fields: Array<[string, number]> = [
    ['root page id', META_ROOT_OFFSET],
    ['freelist page id', META_FREELIST_OFFSET],
    ['high-water mark', META_PGID_OFFSET],
    ['txid', META_TXID_OFFSET],
  ];
  for (const [field, at] of fields) {
    if (at === META_FREELIST_OFFSET && isAllOnes64(buf, off + at)) continue;
    const value = readU64(buf, off + at);
    if (typeof value === 'bigint') return { field, value, offset: at };
  }
  return undefined;
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
