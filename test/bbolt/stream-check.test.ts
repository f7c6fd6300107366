/**
 * The streamed consistency check (what `etcdbrctl verify` runs on a full snapshot as it downloads) against
 * the file check and the cursor-based store revision, on real etcd backends: the same problems, counts and
 * revision whatever the chunk sizes, and the file's end or a foreign file reported as such.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkConsistency } from '../../src/bbolt/check.js';
import { BoltDB } from '../../src/bbolt/db.js';
import { storeRevisionOf } from '../../src/backend/store-revision.js';
import { StreamingCheck } from '../../src/bbolt/stream-check.js';
import { BackendStreamChecker, type BackendCheckOutcome } from '../../src/backend/stream-check.js';
import { copyDataDir, makeEtcdDataDir, patchFile, type EtcdDataDir } from './fixture.js';

/** Streams `bytes` in chunks of `size` (the last one shorter) through the streamed check of an etcd backend. */
async function streamed(bytes: Buffer, size: number): Promise<BackendCheckOutcome> {
  const check = new StreamingCheck(new BackendStreamChecker('test db'));
  async function* chunks() {
    for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, at + size);
  }
  await pipeline(Readable.from(chunks()), check);
  return check.outcome!;
}

async function fileRevision(path: string): Promise<number> {
  const db = await BoltDB.open(path);
  try {
    return await storeRevisionOf(db);
  } finally {
    await db.close();
  }
}

const dbOf = (dataDir: string): string => join(dataDir, 'member', 'snap', 'db');

describe('streamed bbolt check', () => {
  let live: EtcdDataDir;
  let compacted: EtcdDataDir;

  beforeAll(async () => {
    // Values over a page (overflow pages), deletes (tombstones), enough keys for branch pages.
    live = await makeEtcdDataDir({ keys: 1500, valueBytes: (i) => (i % 97 === 0 ? 9000 : 300), deleteEvery: 7 });
    // Everything deleted and compacted: the newest writes were deletes, so finishedCompactRev in bucket
    // `meta` is the store revision, above the last key left in bucket `key`.
    compacted = await makeEtcdDataDir({
      keys: 40,
      whileRunning: async (etcd) => {
        const c = new Etcd3({ hosts: etcd.clientUrl });
        try {
          await c.delete().prefix('/registry/');
          await c.put('/other').value('x');
          await c.delete().key('/other');
          const rev = (await c.get('/none').exec()).header.revision;
          await c.maintenance.status();
          await (c as unknown as { kv: { compact(r: { revision: string; physical: boolean }): Promise<unknown> } }).kv.compact({
            revision: rev,
            physical: true,
          });
        } finally {
          c.close();
        }
      },
    });
  }, 120_000);
  afterAll(async () => {
    await live?.cleanup();
    await compacted?.cleanup();
  });

  it('finds what the file check finds, and the same store revision, whatever the chunk sizes', async () => {
    for (const fixture of [live, compacted]) {
      const path = dbOf(fixture.dataDir);
      const bytes = await readFile(path);
      const file = await checkConsistency(path);
      expect(file.ok).toBe(true);
      const revision = await fileRevision(path);
      // Sizes below a page, and odd ones, so page headers and pages straddle chunks.
      for (const size of [1 << 20, 4096, 4093, 509]) {
        const out = await streamed(bytes, size);
        expect(out.kind).toBe('checked');
        if (out.kind !== 'checked') continue;
        const { bytesRead: _s, ...streamedCheck } = out.check;
        const { bytesRead: _f, ...fileCheck } = file;
        expect(streamedCheck).toEqual(fileCheck);
        expect(out.revision).toBe(revision);
      }
    }
    // The compacted store: the revision comes from finishedCompactRev, not from the last key.
    expect(await fileRevision(dbOf(compacted.dataDir))).toBe(compacted.revision + 3);
  });

  it('reports the same problems as the file check on a corrupted file', async () => {
    const dir = await copyDataDir(live, 'corrupt');
    const path = dbOf(dir);
    const file0 = await checkConsistency(path);
    // Overwrite the header id of a page from the middle on: the tree reaches a page that is not what it says.
    // The middle page itself can be a free one (the layout depends on etcd's run), which no check reaches:
    // take the first page from there whose damage the file check sees, putting back the ones it does not.
    const original = await readFile(path);
    let file = file0;
    for (let page = Math.floor(file0.pageCount / 2); page < file0.pageCount && file.ok; page++) {
      const at = page * file0.pageSize;
      await patchFile(path, at, Buffer.from([0xff, 0xff, 0, 0, 0, 0, 0, 0]));
      file = await checkConsistency(path);
      if (file.ok) await patchFile(path, at, original.subarray(at, at + 8));
    }
    expect(file.ok).toBe(false);
    const out = await streamed(await readFile(path), 4093);
    expect(out.kind === 'checked' && out.check.problems).toEqual(file.problems);
    expect(out.kind === 'checked' && out.revision).toBeUndefined();
  });

  it('reports a file that ends inside the pages in use, and bytes that are not bbolt', async () => {
    const bytes = await readFile(dbOf(live.dataDir));
    const cut = await streamed(bytes.subarray(0, Math.floor(bytes.length / 2)), 65536);
    expect(cut.kind).toBe('unreadable');
    expect(cut.kind === 'unreadable' && cut.error.message).toMatch(/test db: file ends at \d+, inside the pages in use/);
    const foreign = await streamed(Buffer.alloc(300_000, 0x41), 65536);
    expect(foreign.kind === 'unreadable' && foreign.error.code).toBe('E_BOLT_INVALID');
  });
});
