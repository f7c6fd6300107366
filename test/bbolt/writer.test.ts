import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConsistency } from '../../src/bbolt/check.js';
import { Cursor } from '../../src/bbolt/cursor.js';
import { BoltDB } from '../../src/bbolt/db.js';
import { BoltWriteError, BoltWriter } from '../../src/bbolt/writer.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'etcdbr-bolt-writer-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function key(i: number): Buffer {
  const k = Buffer.alloc(8);
  k.writeBigUInt64BE(BigInt(i));
  return k;
}

async function readAll(db: BoltDB, name: string): Promise<Array<[string, string]>> {
  const b = await db.bucket(name);
  if (!b) throw new Error(`no bucket ${name}`);
  const out: Array<[string, string]> = [];
  for await (const e of new Cursor(db, b)) out.push([e.key.toString('hex'), e.value.toString('hex')]);
  return out;
}

describe('BoltWriter', () => {
  it('round-trips several buckets (deep trees, values over several pages, an empty bucket) through our reader and checker', async () => {
    const file = join(dir, 'round-trip.db');
    const w = await BoltWriter.create(file, { pageSize: 4096, txid: 7 });
    const big = (i: number) => Buffer.alloc(4096 * 3 + i, i & 0xff);
    const many = Array.from({ length: 60_000 }, (_, i) => ({ key: key(i), value: Buffer.from(`value-${i}`) }));
    const large = Array.from({ length: 20 }, (_, i) => ({ key: key(i), value: big(i) }));
    await w.writeBucket(Buffer.from('a-empty'), []);
    await w.writeBucket(Buffer.from('key'), many);
    await w.writeBucket(Buffer.from('large'), large);
    await w.writeBucket(Buffer.from('meta'), [{ key: Buffer.from('consistent_index'), value: key(42) }], 3);
    const pages = await w.finish();

    const check = await checkConsistency(file);
    expect(check.problems).toEqual([]);
    expect(check.ok).toBe(true);
    expect(check.pageCount).toBe(pages);
    expect(check.freePages).toBe(0);

    const db = await BoltDB.open(file);
    try {
      expect(db.meta.txid).toBe(7);
      expect(await readAll(db, 'a-empty')).toEqual([]);
      expect(await readAll(db, 'key')).toEqual(many.map((e) => [e.key.toString('hex'), e.value.toString('hex')]));
      expect(await readAll(db, 'large')).toEqual(large.map((e) => [e.key.toString('hex'), e.value.toString('hex')]));
      expect(await readAll(db, 'meta')).toEqual([['636f6e73697374656e745f696e646578', key(42).toString('hex')]]);
    } finally {
      await db.close();
    }
  });

  it('keeps file order across batches: nodes of their own (over 2 MiB) between small ones, batch buffers reused', async () => {
    // 22 MB in all: several 4 MiB batches (their buffers reused after each flush), and 3 MiB values whose
    // leaves go out in buffers of their own between the small leaves around them.
    const file = join(dir, 'batches.db');
    const w = await BoltWriter.create(file, { pageSize: 4096, txid: 3 });
    const entries = Array.from({ length: 20_000 }, (_, i) => ({
      key: key(i),
      value: i % 3_500 === 1 ? Buffer.alloc(3 * 1024 * 1024, i & 0xff) : Buffer.alloc(200, (i * 7) & 0xff),
    }));
    await w.writeBucket(Buffer.from('key'), entries);
    const pages = await w.finish();
    const check = await checkConsistency(file);
    expect(check.problems).toEqual([]);
    expect(check.pageCount).toBe(pages);
    const db = await BoltDB.open(file);
    try {
      const b = await db.bucket('key');
      let i = 0;
      for await (const e of new Cursor(db, b!)) {
        expect(e.key.equals(entries[i]!.key) && e.value.equals(entries[i]!.value)).toBe(true);
        i++;
      }
      expect(i).toBe(entries.length);
    } finally {
      await db.close();
    }
  });

  it('refuses keys out of order and buckets out of order', async () => {
    const w = await BoltWriter.create(join(dir, 'order.db'), { pageSize: 4096, txid: 2 });
    await expect(
      w.writeBucket(Buffer.from('b'), [
        { key: key(2), value: Buffer.alloc(0) },
        { key: key(1), value: Buffer.alloc(0) },
      ]),
    ).rejects.toThrow(BoltWriteError);
    await expect(w.writeBucket(Buffer.from('a'), [])).rejects.toThrow(/out of order/);
    await w.abort();
  });

  it('writes entries given in batches byte for byte as the same entries one at a time, and checks order across batches', async () => {
    const entries = Array.from({ length: 5000 }, (_, i) => ({ key: key(i * 3), value: Buffer.alloc(i % 300, i & 0xff) }));
    const single = join(dir, 'single.db');
    const batched = join(dir, 'batched.db');
    const a = await BoltWriter.create(single, { pageSize: 4096, txid: 4 });
    await a.writeBucket(Buffer.from('key'), entries);
    await a.finish();
    // Batches of uneven sizes, mixed with single entries, from an async source.
    async function* mixed() {
      let i = 0;
      let n = 1;
      while (i < entries.length) {
        if (n % 3 === 0) yield entries[i++]!;
        else {
          yield entries.slice(i, i + n);
          i += n;
        }
        n = (n * 7 + 1) % 97;
      }
    }
    const b = await BoltWriter.create(batched, { pageSize: 4096, txid: 4 });
    await b.writeBucket(Buffer.from('key'), mixed());
    await b.finish();
    expect((await readFile(batched)).equals(await readFile(single))).toBe(true);

    const w = await BoltWriter.create(join(dir, 'batch-order.db'), { pageSize: 4096, txid: 2 });
    await expect(
      w.writeBucket(Buffer.from('b'), [[{ key: key(5), value: Buffer.alloc(1) }], [{ key: key(5), value: Buffer.alloc(1) }]]),
    ).rejects.toThrow(/not after/);
    await w.abort();
  });
});
