import { copyFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConsistency } from '../../src/bbolt/check.js';
import { Cursor } from '../../src/bbolt/cursor.js';
import { BoltDB, BoltError, element, isBranch, isLeaf } from '../../src/bbolt/db.js';
import type { Page } from '../../src/bbolt/db.js';
import { findFlockHolder } from '../../src/bbolt/lock.js';
import { latestRevision } from '../../src/backend/store-revision.js';
import { makeEtcdDataDir, patchFile } from './fixture.js';
import type { EtcdDataDir } from './fixture.js';

let fx: EtcdDataDir;
let dbPath: string;
let heldBy: { pid: number; etcdPid: number } | undefined;
let n = 0;

beforeAll(async () => {
  fx = await makeEtcdDataDir({
    keys: 400,
    // Mostly small values (several leaves under a branch), some large ones (overflow pages).
    valueBytes: (i) => (i % 50 === 7 ? 20_000 : 200),
    deleteEvery: 10,
    whileRunning: async (etcd) => {
      const h = await findFlockHolder(join(etcd.dataDir, 'member', 'snap', 'db'));
      heldBy = h && { pid: h.pid, etcdPid: etcd.pid };
    },
  });
  dbPath = join(fx.dataDir, 'member', 'snap', 'db');
});

afterAll(async () => {
  await fx?.cleanup();
});

/** A copy of the db file to damage. */
async function scratch(): Promise<string> {
  const p = join(fx.root, `db-${n++}`);
  await copyFile(dbPath, p);
  return p;
}

async function withDb<T>(p: string, fn: (db: BoltDB) => Promise<T>): Promise<T> {
  const db = await BoltDB.open(p);
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}

/** The path from the `key` bucket's root to a leaf in the middle of it. */
async function middleLeaf(db: BoltDB): Promise<{ leaf: Page; parent: Page }> {
  const b = await db.bucket('key');
  let parent = await db.treePage(b!.root);
  expect(isBranch(parent)).toBe(true);
  for (;;) {
    const child = await db.treePage(element(parent, Math.floor(parent.count / 2)).child);
    if (isLeaf(child)) return { leaf: child, parent };
    parent = child;
  }
}

describe('bbolt reader on a real etcd backend', () => {
  it('selects the current meta and lists the top-level buckets', async () => {
    await withDb(dbPath, async (db) => {
      expect(db.pageSize).toBe(4096);
      expect(db.meta.txid % 2).toBe(db.metaPage);
      expect(db.pageCount * db.pageSize).toBeLessThanOrEqual(db.fileSize);
      const names: string[] = [];
      for await (const e of new Cursor(db, db.rootBucket())) {
        expect(e.isBucket).toBe(true);
        names.push(e.key.toString());
      }
      expect(names).toEqual(expect.arrayContaining(['key', 'meta', 'lease', 'members', 'cluster']));
      expect([...names].sort()).toEqual(names);
      expect(await db.bucket('no-such-bucket')).toBeUndefined();
    });
  });

  it('reads the latest revision from the last key of bucket "key"', async () => {
    expect(await latestRevision(dbPath)).toBe(fx.revision);
  });

  it('iterates bucket "key" in revision order, forwards and backwards', async () => {
    await withDb(dbPath, async (db) => {
      const b = (await db.bucket('key'))!;
      const forward: Buffer[] = [];
      for await (const e of new Cursor(db, b)) forward.push(Buffer.from(e.key));
      // One key per write: revisions 2..revision (revision 1 is the empty store).
      expect(forward).toHaveLength(fx.writes);
      expect(Number(forward[0]!.readBigUInt64BE(0))).toBe(2);
      for (let i = 1; i < forward.length; i++) expect(Buffer.compare(forward[i - 1]!, forward[i]!)).toBe(-1);
      const backward: Buffer[] = [];
      const c = new Cursor(db, b);
      for (let e = await c.last(); e; e = await c.prev()) backward.push(Buffer.from(e.key));
      expect(backward.reverse()).toEqual(forward);
      // Tombstones carry a trailing 't' after main (8 bytes), '_' and sub (8 bytes).
      expect(forward.filter((k) => k.length === 18 && k[17] === 0x74)).toHaveLength(40);
      expect(forward.every((k) => k[8] === 0x5f)).toBe(true);
    });
  });

  it('finds nothing wrong in a healthy file, whatever the read size', async () => {
    const whole = await checkConsistency(dbPath);
    expect(whole.problems).toEqual([]);
    expect(whole.ok).toBe(true);
    expect(whole.keys).toBeGreaterThan(fx.writes);
    expect(whole.reachablePages + whole.freePages).toBe(whole.pageCount);
    // Reads of three pages make overflow pages cross chunk boundaries.
    const small = await checkConsistency(dbPath, { chunkBytes: 3 * 4096 });
    expect(small).toEqual({ ...whole, bytesRead: small.bytesRead });
  });

  it('reports unsorted keys in a leaf in the middle of the tree, by page', async () => {
    const p = await scratch();
    const { leaf, id } = await withDb(p, async (db) => {
      const { leaf } = await middleLeaf(db);
      return { leaf, id: leaf.id };
    });
    // Swap the first two keys' element entries: the keys are then out of order.
    const e0 = leaf.buf.subarray(16, 32);
    const e1 = leaf.buf.subarray(32, 48);
    // pos is relative to the element, so moving an element entry by 16 bytes shifts its pos by 16.
    const a = Buffer.from(e1);
    a.writeUInt32LE(a.readUInt32LE(4) + 16, 4);
    const b = Buffer.from(e0);
    b.writeUInt32LE(b.readUInt32LE(4) - 16, 4);
    await patchFile(p, id * 4096 + 16, Buffer.concat([a, b]));
    const r = await checkConsistency(p);
    expect(r.ok).toBe(false);
    expect(r.problems).toContainEqual({ pageId: id, message: `page ${id}: keys 0 and 1 are not sorted` });
    // The right-most path is intact: the sanity check still reads the revision.
    expect(await latestRevision(p)).toBe(fx.revision);
  });

  it('reports a zeroed page and garbage in a page', async () => {
    const p = await scratch();
    const { leafId, branchId } = await withDb(p, async (db) => {
      const { leaf, parent } = await middleLeaf(db);
      return { leafId: leaf.id, branchId: parent.id };
    });
    await patchFile(p, leafId * 4096, Buffer.alloc(4096));
    const r = await checkConsistency(p);
    expect(r.problems).toContainEqual({ pageId: leafId, message: `page ${leafId}: header identifies as page 0` });

    const q = await scratch();
    const junk = Buffer.alloc(4096 - 16, 0xa5);
    await patchFile(q, branchId * 4096 + 16, junk);
    const r2 = await checkConsistency(q);
    expect(r2.ok).toBe(false);
    expect(r2.problems.some((x) => x.pageId === branchId)).toBe(true);
  });

  it('reports references beyond the high-water mark and pages referenced twice', async () => {
    const p = await scratch();
    const { parent, hwm } = await withDb(p, async (db) => ({ parent: (await middleLeaf(db)).parent, hwm: db.pageCount }));
    const i = Math.floor(parent.count / 2);
    const elem = parent.id * 4096 + 16 + i * 16;
    const beyond = Buffer.alloc(8);
    beyond.writeUInt32LE(hwm + 5, 0);
    await patchFile(p, elem + 8, beyond);
    const r = await checkConsistency(p);
    expect(r.problems).toContainEqual({ pageId: hwm + 5, message: `page ${hwm + 5}: out of bounds (high-water mark ${hwm})` });

    const q = await scratch();
    // Element i+1 points at element i's child.
    await patchFile(q, elem + 16 + 8, parent.buf.subarray(16 + i * 16 + 8, 16 + i * 16 + 16));
    const r2 = await checkConsistency(q);
    const dup = element(parent, i).child;
    expect(r2.problems).toContainEqual({ pageId: dup, message: `page ${dup}: multiple references` });
  });

  it('falls back to the other meta page when the current one is damaged', async () => {
    const p = await scratch();
    const before = await withDb(p, async (db) => ({ metaPage: db.metaPage, txid: db.meta.txid }));
    await patchFile(p, before.metaPage * 4096 + 16 + 20, Buffer.from([0xff]));
    await withDb(p, async (db) => {
      expect(db.metaPage).toBe(1 - before.metaPage);
      expect(db.meta.txid).toBe(before.txid - 1);
      expect(db.otherMetaProblem).toMatch(/checksum mismatch/);
    });
    const r = await checkConsistency(p);
    expect(r.warnings[0]).toMatch(/checksum mismatch/);
  });

  it('refuses files that are not bbolt databases', async () => {
    const garbage = join(fx.root, 'garbage');
    await writeFile(garbage, Buffer.alloc(64 * 1024, 0x42));
    await expect(BoltDB.open(garbage)).rejects.toMatchObject({ code: 'E_BOLT_INVALID' });
    await expect(latestRevision(garbage)).rejects.toBeInstanceOf(BoltError);
    await expect(checkConsistency(garbage)).rejects.toMatchObject({ code: 'E_BOLT_INVALID' });

    const p = await scratch();
    await patchFile(p, 16, Buffer.alloc(4));
    await patchFile(p, 4096 + 16, Buffer.alloc(4));
    await expect(BoltDB.open(p)).rejects.toThrow(/no valid meta page; meta 0: bad magic/);

    const empty = join(fx.root, 'empty');
    await writeFile(empty, '');
    await expect(BoltDB.open(empty)).rejects.toMatchObject({ code: 'E_BOLT_INVALID' });
    await expect(BoltDB.open(join(fx.root, 'missing'))).rejects.toMatchObject({ code: 'E_BOLT_OPEN' });
  });

  it('sees etcd holding the file lock while it runs, and no lock after it stopped', async () => {
    expect(heldBy).toBeDefined();
    expect(heldBy!.pid).toBe(heldBy!.etcdPid);
    expect(await findFlockHolder(dbPath)).toBeUndefined();
  });
});
