/**
 * Page ids of 2^53 or more in a damaged copy of a real etcd backend: every reader (the file check, the
 * streamed check, the page reader and its cursor) names the value exactly as stored, never rounded through a
 * number (2^53 + 1 would print as 9007199254740992, 2^64 - 1 as 18446744073709552000), and says where it is.
 */
import { copyFile, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConsistency } from '../../src/bbolt/check.js';
import { Cursor } from '../../src/bbolt/cursor.js';
import { BoltDB, element, isBranch, isLeaf } from '../../src/bbolt/db.js';
import type { Page } from '../../src/bbolt/db.js';
import { fnv64a } from '../../src/bbolt/format.js';
import { BoltStreamChecker, StreamingCheck, type StreamCheckOutcome } from '../../src/bbolt/stream-check.js';
import { makeEtcdDataDir, patchFile } from './fixture.js';
import type { EtcdDataDir } from './fixture.js';

const PS = 4096;
const ABOVE_2_53 = 2n ** 53n + 1n;
const MAX_U64 = 2n ** 64n - 1n;

let fx: EtcdDataDir;
let dbPath: string;
let n = 0;

beforeAll(async () => {
  fx = await makeEtcdDataDir({ keys: 400, valueBytes: (i) => (i % 50 === 7 ? 20_000 : 200) });
  dbPath = join(fx.dataDir, 'member', 'snap', 'db');
});
afterAll(async () => {
  await fx?.cleanup();
});

async function scratch(): Promise<string> {
  const p = join(fx.root, `db-u64-${n++}`);
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

const u64le = (v: bigint): Buffer => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(v);
  return b;
};

async function streamed(p: string): Promise<StreamCheckOutcome> {
  const check = new StreamingCheck(new BoltStreamChecker('test db'));
  const bytes = await readFile(p);
  async function* chunks() {
    for (let at = 0; at < bytes.length; at += 4093) yield bytes.subarray(at, at + 4093);
  }
  await pipeline(Readable.from(chunks()), check);
  return check.outcome!;
}

/** A branch page of bucket `key` whose middle child is a leaf. */
async function branchOfLeaves(db: BoltDB): Promise<Page> {
  let parent = await db.treePage((await db.bucket('key'))!.root);
  expect(isBranch(parent)).toBe(true);
  for (;;) {
    const child = await db.treePage(element(parent, Math.floor(parent.count / 2)).child);
    if (isLeaf(child)) return parent;
    parent = child;
  }
}

/** Every key of bucket `key`, through the cursor. */
async function readAll(p: string): Promise<number> {
  return withDb(p, async (db) => {
    let count = 0;
    for await (const _ of new Cursor(db, (await db.bucket('key'))!)) count++;
    return count;
  });
}

describe('page ids of 2^53 or more in a real etcd backend', () => {
  it('a branch element naming such a child: the exact id, its page, element and file offset', async () => {
    for (const value of [ABOVE_2_53, MAX_U64]) {
      const p = await scratch();
      const { parent, hwm } = await withDb(p, async (db) => ({ parent: await branchOfLeaves(db), hwm: db.pageCount }));
      const i = Math.floor(parent.count / 2);
      const at = parent.id * PS + 16 + i * 16 + 8;
      await patchFile(p, at, u64le(value));
      const expected = `page ${parent.id}: element ${i}: child page id ${value} (file offset ${at}) is out of bounds (high-water mark ${hwm})`;

      const r = await checkConsistency(p);
      expect(r.problems).toContainEqual({ pageId: parent.id, message: expected });
      const s = await streamed(p);
      expect(s.kind === 'checked' && s.check.problems).toEqual(r.problems);

      await expect(readAll(p)).rejects.toMatchObject({
        code: 'E_BOLT_CORRUPT',
        pageId: parent.id,
        message: expected,
      });
    }
  });

  it('a page header with such an id: the exact id where the tree reaches it', async () => {
    const p = await scratch();
    const leaf = await withDb(p, async (db) => {
      const parent = await branchOfLeaves(db);
      return (await db.treePage(element(parent, Math.floor(parent.count / 2)).child)).id;
    });
    await patchFile(p, leaf * PS, u64le(MAX_U64));
    const r = await checkConsistency(p);
    expect(r.problems).toContainEqual({ pageId: leaf, message: `page ${leaf}: header identifies as page ${MAX_U64}` });
    const s = await streamed(p);
    expect(s.kind === 'checked' && s.check.problems).toEqual(r.problems);
    await expect(readAll(p)).rejects.toThrow(`page ${leaf}: header says page ${MAX_U64}`);
  });

  it('a sub-bucket with such a root: the exact id at the element that holds it', async () => {
    const p = await scratch();
    const { rootPage, index, valueAt, hwm } = await withDb(p, async (db) => {
      const root = await db.treePage(db.meta.root);
      expect(isLeaf(root)).toBe(true);
      for (let i = 0; i < root.count; i++) {
        if (element(root, i).key.toString() !== 'key') continue;
        const e = 16 + i * 16;
        const valueAt = root.id * PS + e + root.buf.readUInt32LE(e + 4) + root.buf.readUInt32LE(e + 8);
        return { rootPage: root.id, index: i, valueAt, hwm: db.pageCount };
      }
      throw new Error('no bucket "key" in the root leaf');
    });
    await patchFile(p, valueAt, u64le(ABOVE_2_53));
    const r = await checkConsistency(p);
    expect(r.problems).toContainEqual({
      pageId: rootPage,
      message: `page ${rootPage}: element ${index}: sub-bucket root page id ${ABOVE_2_53} (file offset ${valueAt}) is out of bounds (high-water mark ${hwm})`,
    });
    const s = await streamed(p);
    expect(s.kind === 'checked' && s.check.problems).toEqual(r.problems);
    await expect(readAll(p)).rejects.toThrow(`page ${rootPage}: sub-bucket root page id ${ABOVE_2_53} is out of range`);
  });

  it.each([
    ['root page id', 16],
    ['high-water mark', 40],
    ['txid', 48],
  ])('a current meta (checksum valid) with such a %s: refused as unusable, with the exact value', async (field, offset) => {
    const p = await scratch();
    const metaPage = await withDb(p, async (db) => db.metaPage);
    const meta = Buffer.from((await readFile(p)).subarray(metaPage * PS, metaPage * PS + 16 + 64));
    meta.writeBigUInt64LE(MAX_U64, 16 + offset);
    // The txid decides which meta is current: keep it the higher one.
    meta.writeBigUInt64LE(fnv64a(meta, 16, 16 + 56), 16 + 56);
    await patchFile(p, metaPage * PS, meta);
    const at = metaPage * PS + 16 + offset;
    const message = `${p}: meta page ${metaPage}: ${field} ${MAX_U64} (file offset ${at}) is out of range`;
    await expect(checkConsistency(p)).rejects.toMatchObject({ code: 'E_BOLT_INVALID', message });
    const s = await streamed(p);
    expect(s.kind === 'unreadable' && s.error.message).toBe(message.replace(p, 'test db'));
  });
});
