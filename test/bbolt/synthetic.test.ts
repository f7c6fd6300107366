/**
 * Hand-built bbolt files for what etcd's own files never show: etcd (3.4+) runs bbolt with NoFreelistSync,
 * so its files carry no freelist page, and small buckets it writes are inline only in some layouts.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConsistency } from '../../src/bbolt/check.js';
import { Cursor } from '../../src/bbolt/cursor.js';
import { BoltDB } from '../../src/bbolt/db.js';
import { fnv64a } from '../../src/bbolt/format.js';
import { BackendStreamChecker } from '../../src/backend/stream-check.js';
import { latestRevision, storeRevisionOf } from '../../src/backend/store-revision.js';
import type { SummaryWatch } from '../../src/bbolt/page-summaries.js';
import { BoltStreamChecker, type StreamChecker } from '../../src/bbolt/stream-check.js';

const PS = 4096;

interface LeafEntry {
  key: string | Buffer;
  value: Buffer;
  bucket?: boolean;
}

function header(buf: Buffer, off: number, id: number, flags: number, count: number, overflow = 0): void {
  buf.writeBigUInt64LE(BigInt(id), off);
  buf.writeUInt16LE(flags, off + 8);
  buf.writeUInt16LE(count, off + 10);
  buf.writeUInt32LE(overflow, off + 12);
}

/** Leaf page content (header + elements + data) of exactly the needed size, for pages and inline buckets. */
function leafBytes(id: number, entries: LeafEntry[]): Buffer {
  const keys = entries.map((e) => (typeof e.key === 'string' ? Buffer.from(e.key) : e.key));
  const dataLen = entries.reduce((n, e, i) => n + keys[i]!.length + e.value.length, 0);
  const buf = Buffer.alloc(16 + entries.length * 16 + dataLen);
  header(buf, 0, id, 0x02, entries.length);
  let data = 16 + entries.length * 16;
  entries.forEach((e, i) => {
    const el = 16 + i * 16;
    buf.writeUInt32LE(e.bucket ? 1 : 0, el);
    buf.writeUInt32LE(data - el, el + 4);
    buf.writeUInt32LE(keys[i]!.length, el + 8);
    buf.writeUInt32LE(e.value.length, el + 12);
    keys[i]!.copy(buf, data);
    e.value.copy(buf, data + keys[i]!.length);
    data += keys[i]!.length + e.value.length;
  });
  return buf;
}

function leaf(id: number, entries: LeafEntry[]): Buffer {
  const page = Buffer.alloc(PS);
  leafBytes(id, entries).copy(page);
  return page;
}

function branch(id: number, entries: { key: string; child: number }[]): Buffer {
  const page = Buffer.alloc(PS);
  header(page, 0, id, 0x01, entries.length);
  let data = 16 + entries.length * 16;
  entries.forEach((e, i) => {
    const el = 16 + i * 16;
    const k = Buffer.from(e.key);
    page.writeUInt32LE(data - el, el);
    page.writeUInt32LE(k.length, el + 4);
    page.writeBigUInt64LE(BigInt(e.child), el + 8);
    k.copy(page, data);
    data += k.length;
  });
  return page;
}

function bucketRef(root: number): Buffer {
  const b = Buffer.alloc(16);
  b.writeBigUInt64LE(BigInt(root), 0);
  return b;
}

function inlineBucket(entries: LeafEntry[]): Buffer {
  return Buffer.concat([bucketRef(0), leafBytes(0, entries)]);
}

function meta(id: number, m: { root: number; freelist: number | 'none'; pgid: number; txid: number }): Buffer {
  const page = Buffer.alloc(PS);
  header(page, 0, id, 0x04, 0);
  const o = 16;
  page.writeUInt32LE(0xed0cdaed, o);
  page.writeUInt32LE(2, o + 4);
  page.writeUInt32LE(PS, o + 8);
  page.writeBigUInt64LE(BigInt(m.root), o + 16);
  page.writeBigUInt64LE(m.freelist === 'none' ? 0xffffffffffffffffn : BigInt(m.freelist), o + 32);
  page.writeBigUInt64LE(BigInt(m.pgid), o + 40);
  page.writeBigUInt64LE(BigInt(m.txid), o + 48);
  page.writeBigUInt64LE(fnv64a(page, o, o + 56), o + 56);
  return page;
}

function freelist(id: number, ids: Array<number | bigint>, extended: boolean | bigint = false): Buffer {
  const page = Buffer.alloc(PS);
  header(page, 0, id, 0x10, extended ? 0xffff : ids.length);
  let at = 16;
  if (extended !== false) {
    // `extended` as a bigint: the count to write instead of the real one.
    page.writeBigUInt64LE(extended === true ? BigInt(ids.length) : extended, at);
    at += 8;
  }
  ids.forEach((x, i) => page.writeBigUInt64LE(BigInt(x), at + i * 8));
  return page;
}

let dir: string;
let n = 0;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'etcdbr-bbolt-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

interface Layout {
  freeIds?: Array<number | bigint>;
  extended?: boolean | bigint;
  freelistId?: number | 'none';
  rootEntries?: LeafEntry[];
  bucketPage?: Buffer;
  pgid?: number;
}

/**
 * Pages: 0/1 meta, 2 freelist, 3 root leaf (bucket "b" at page 4, inline bucket "i"), 4 leaf of "b",
 * 5 a stale free leaf. High-water mark 6.
 */
async function build(l: Layout = {}): Promise<string> {
  const m = { root: 3, freelist: l.freelistId ?? 2, pgid: l.pgid ?? 6 };
  const pages = [
    meta(0, { ...m, txid: 2 }),
    meta(1, { ...m, txid: 3 }),
    freelist(2, l.freeIds ?? [5], l.extended),
    leaf(
      3,
      l.rootEntries ?? [
        { key: 'b', value: bucketRef(4), bucket: true },
        {
          key: 'i',
          value: inlineBucket([
            { key: 'x', value: Buffer.from('1') },
            { key: 'y', value: Buffer.from('2') },
          ]),
          bucket: true,
        },
      ],
    ),
    l.bucketPage ??
      leaf(4, [
        { key: 'a', value: Buffer.from('va') },
        { key: 'b', value: Buffer.from('vb') },
      ]),
    leaf(5, [{ key: 'stale', value: Buffer.from('old') }]),
  ];
  const p = join(dir, `db-${n++}`);
  await writeFile(p, Buffer.concat(pages));
  return p;
}

const messages = (r: { problems: { message: string }[] }): string[] => r.problems.map((x) => x.message);

/** The file at `p` through a streamed check, in reads of 1,000 bytes (pages arrive split). */
async function streamed<O>(p: string, checker: StreamChecker<O>): Promise<O> {
  const bytes = await readFile(p);
  for (let at = 0; at < bytes.length; at += 1000) await checker.write(bytes.subarray(at, at + 1000));
  return checker.finish();
}

/** A revision key of main revision `main` (etcd's layout: 8 bytes big-endian, `_`, 8 bytes of sub revision). */
function revisionKey(main: number): Buffer {
  const k = Buffer.alloc(17);
  k.writeBigUInt64BE(BigInt(main), 0);
  k[8] = 0x5f;
  return k;
}

describe('consistency check on hand-built files', () => {
  it('accepts a consistent file with a freelist and an inline bucket', async () => {
    const r = await checkConsistency(await build());
    expect(r.problems).toEqual([]);
    expect(r).toMatchObject({ ok: true, pageCount: 6, reachablePages: 5, freePages: 1, buckets: 3, keys: 4, txid: 3 });
  });

  it('reads inline buckets with a cursor', async () => {
    const p = await build();
    const db = await BoltDB.open(p);
    try {
      const i = await db.bucket('i');
      expect(i?.root).toBe(0);
      const keys: string[] = [];
      for await (const e of new Cursor(db, i!)) keys.push(`${e.key}=${e.value}`);
      expect(keys).toEqual(['x=1', 'y=2']);
      expect((await new Cursor(db, i!).last())?.key.toString()).toBe('y');
    } finally {
      await db.close();
    }
  });

  it('reports a page that is neither reachable nor free', async () => {
    expect(messages(await checkConsistency(await build({ freeIds: [] })))).toEqual(['page 5: unreachable unfreed']);
  });

  it('reports reachable pages on the freelist and ids freed twice', async () => {
    expect(messages(await checkConsistency(await build({ freeIds: [4, 5] })))).toEqual(['page 4: reachable freed']);
    expect(messages(await checkConsistency(await build({ freeIds: [5, 5] })))).toEqual(['page 5: already freed']);
    expect(messages(await checkConsistency(await build({ freeIds: [2, 5] })))).toEqual(['page 2: freelist page is itself on the freelist']);
  });

  it('reports free ids at or beyond the high-water mark', async () => {
    expect(messages(await checkConsistency(await build({ freeIds: [5, 9] })))).toEqual([
      'freelist page 2: free id 9 out of bounds (high-water mark 6)',
    ]);
  });

  it('reports a free id or a freelist count of 2^53 or more with its exact value', async () => {
    // 2^53 + 1 and 2^64 - 1 round to 9007199254740992 and 18446744073709552000 through a number.
    expect(messages(await checkConsistency(await build({ freeIds: [5, 2n ** 53n + 1n, 2n ** 64n - 1n] })))).toEqual([
      'freelist page 2: free id 9007199254740993 out of bounds (high-water mark 6)',
      'freelist page 2: free id 18446744073709551615 out of bounds (high-water mark 6)',
    ]);
    expect(messages(await checkConsistency(await build({ extended: 2n ** 64n - 1n })))).toContain(
      'freelist page 2: 18446744073709551615 ids do not fit in 1 page(s)',
    );
  });

  it('reads a freelist whose count overflows 16 bits', async () => {
    expect((await checkConsistency(await build({ extended: true }))).ok).toBe(true);
  });

  it('treats every unreachable page as free when the freelist is not persisted', async () => {
    const r = await checkConsistency(await build({ freelistId: 'none' }));
    // Page 2 is then an unreferenced page like any other.
    expect(r).toMatchObject({ ok: true, reachablePages: 4, freePages: 2 });
  });

  it('reports a freelist page of the wrong type', async () => {
    expect(messages(await checkConsistency(await build({ freelistId: 4, freeIds: [] })))).toEqual(
      expect.arrayContaining(['freelist page 4: invalid type leaf']),
    );
  });

  it('reports unsorted and duplicate keys, also inside inline buckets', async () => {
    const unsorted = leaf(4, [
      { key: 'b', value: Buffer.from('vb') },
      { key: 'a', value: Buffer.from('va') },
    ]);
    expect(messages(await checkConsistency(await build({ bucketPage: unsorted })))).toEqual(['page 4: keys 0 and 1 are not sorted']);
    const dup = leaf(4, [
      { key: 'a', value: Buffer.from('1') },
      { key: 'a', value: Buffer.from('2') },
    ]);
    expect(messages(await checkConsistency(await build({ bucketPage: dup })))).toEqual(['page 4: keys 0 and 1 are equal']);
    const inline = await build({
      rootEntries: [
        { key: 'b', value: bucketRef(4), bucket: true },
        {
          key: 'i',
          value: inlineBucket([
            { key: 'y', value: Buffer.alloc(1) },
            { key: 'x', value: Buffer.alloc(1) },
          ]),
          bucket: true,
        },
      ],
    });
    expect(messages(await checkConsistency(inline))).toEqual(['page 3: keys 0 and 1 are not sorted']);
  });

  it('checks child key ranges against the parent branch', async () => {
    // Page 4 becomes a branch over page 5, whose only key is "stale": branch key "stale" fits, "z" does not.
    const ok = await checkConsistency(await build({ bucketPage: branch(4, [{ key: 'stale', child: 5 }]), freeIds: [] }));
    expect(ok.problems).toEqual([]);
    const bad = await checkConsistency(await build({ bucketPage: branch(4, [{ key: 'z', child: 5 }]), freeIds: [] }));
    expect(messages(bad)).toEqual(['page 5: first key 7374616c65 is smaller than its key in the parent 7a']);
  });

  it('reports a tree page of the wrong type', async () => {
    const r = await checkConsistency(await build({ rootEntries: [{ key: 'b', value: bucketRef(2), bucket: true }], freeIds: [5] }));
    expect(messages(r)).toEqual(expect.arrayContaining(['page 2: multiple references', 'page 4: unreachable unfreed']));
  });

  it('reads the latest revision; a missing "key" bucket is an error of its own', async () => {
    const rev = Buffer.alloc(17);
    rev.writeBigUInt64BE(42n, 0);
    rev[8] = 0x5f;
    const withKey = await build({
      rootEntries: [
        { key: 'b', value: bucketRef(4), bucket: true },
        { key: 'key', value: inlineBucket([{ key: rev, value: Buffer.from('kv') }]), bucket: true },
      ],
    });
    expect(await latestRevision(withKey)).toBe(42);
    const short = await build({
      rootEntries: [
        { key: 'b', value: bucketRef(4), bucket: true },
        { key: 'key', value: inlineBucket([{ key: 'x', value: Buffer.from('kv') }]), bucket: true },
      ],
    });
    expect(await latestRevision(short)).toBe(1);
    await expect(latestRevision(await build())).rejects.toMatchObject({ code: 'E_BOLT_NO_BUCKET' });
  });

  it('a streamed check notes the values and sub-buckets a watch names, and what an inline one holds', async () => {
    const p = await build();
    const watch: SummaryWatch = {
      values: [Buffer.from('a'), Buffer.from('y')],
      buckets: [Buffer.from('b'), Buffer.from('i'), Buffer.from('zz')],
    };
    const out = await streamed(p, new BoltStreamChecker('test db', 1000, watch));
    expect(out.kind === 'checked' && out.check.ok).toBe(true);
    const view = out.kind === 'checked' ? out.summaries! : undefined;
    expect(view?.rootPage).toBe(3);
    expect(view?.buckets).toEqual([
      { page: 3, name: 0, root: 4 },
      // Inside an inline bucket a watched value is noted with the bucket, not as a value of the file's pages.
      { page: 3, name: 1, root: 0, inline: { lastKey: Buffer.from('y'), values: [{ key: 1, value: Buffer.from('2') }] } },
    ]);
    expect(view?.values).toEqual([{ page: 4, key: 0, value: Buffer.from('va') }]);
    expect([...view!.leafPagesUnder(3)]).toEqual([3]);
    expect([...view!.leafPagesUnder(4)]).toEqual([4]);
    expect(view!.lastKeyUnder(4)).toEqual(Buffer.from('b'));
    expect(view!.lastKeyUnder(3)).toEqual(Buffer.from('i'));

    // Nothing watched, nothing noted; a file that fails the check hands no summaries back.
    const plain = await streamed(p, new BoltStreamChecker('test db'));
    expect(plain.kind === 'checked' && [plain.summaries?.values, plain.summaries?.buckets]).toEqual([[], []]);
    const unsorted = await build({
      bucketPage: leaf(4, [
        { key: 'b', value: Buffer.from('vb') },
        { key: 'a', value: Buffer.from('va') },
      ]),
    });
    const bad = await streamed(unsorted, new BoltStreamChecker('test db', 1000, watch));
    expect(bad.kind === 'checked' && [bad.check.ok, bad.summaries]).toEqual([false, undefined]);
  });

  it("reads etcd's store revision from inline `key` and `meta` buckets, from the pages and from a streamed check alike", async () => {
    const compacted = Buffer.alloc(17);
    compacted.writeBigUInt64BE(50n, 0);
    const cases: Array<[string, Buffer, Buffer, number]> = [
      // [what, the key bucket, the meta bucket, the store revision]
      [
        'the last key',
        inlineBucket([
          { key: revisionKey(7), value: Buffer.from('kv') },
          { key: revisionKey(42), value: Buffer.from('kv') },
        ]),
        inlineBucket([]),
        42,
      ],
      [
        'a finished compaction above the last key',
        inlineBucket([{ key: revisionKey(42), value: Buffer.from('kv') }]),
        inlineBucket([
          { key: 'consistent_index', value: Buffer.alloc(8) },
          { key: 'finishedCompactRev', value: compacted },
        ]),
        50,
      ],
      ['an empty store', inlineBucket([]), inlineBucket([]), 1],
    ];
    for (const [what, key, metaBucket, revision] of cases) {
      const p = await build({
        rootEntries: [
          { key: 'b', value: bucketRef(4), bucket: true },
          { key: 'key', value: key, bucket: true },
          { key: 'meta', value: metaBucket, bucket: true },
        ],
      });
      const db = await BoltDB.open(p);
      try {
        expect(await storeRevisionOf(db), what).toBe(revision);
      } finally {
        await db.close();
      }
      expect(await streamed(p, new BackendStreamChecker('test db')), what).toMatchObject({ kind: 'checked', revision });
    }
    const notEtcd = await streamed(await build(), new BackendStreamChecker('test db'));
    expect(notEtcd.kind === 'checked' && notEtcd.notEtcd?.code).toBe('E_BOLT_NO_BUCKET');
  });
});
