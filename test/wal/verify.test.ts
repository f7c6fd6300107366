import { mkdir, mkdtemp, open, readdir, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanWal } from '../../src/wal/reader.js';
import { loadNewestSnapshot } from '../../src/wal/snap.js';
import { readWalMetadata, verifyWal } from '../../src/wal/verify.js';
import { copyDataDir, makeEtcdDataDir, patchFile } from '../bbolt/fixture.js';
import type { EtcdDataDir } from '../bbolt/fixture.js';
import { TestWal, entry, fieldVarint, hardState, metadata, walSnapshot } from './encoder.js';

const META = metadata(0x1234n, 0xabcdn);

/** Frame offsets of the records (crc records excluded) in one segment. */
async function frames(path: string): Promise<{ offset: number; type: number }[]> {
  const out: { offset: number; type: number }[] = [];
  await scanWal([path], (rec, _buf, _file, offset) => {
    out.push({ offset, type: rec.type });
  });
  return out;
}

describe('verifyWal on hand-built segments', () => {
  let dir: string;
  let n = 0;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-wal-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const fresh = async (): Promise<string> => {
    const d = join(dir, `w${n++}`);
    await mkdir(d);
    return d;
  };

  /** Two segments: entries 1-3 in the first, 4-5 in the second. */
  function twoSegments(): TestWal {
    const w = new TestWal().segment(0, META).record(5, walSnapshot(0, 0));
    for (let i = 1; i <= 3; i++) w.record(2, entry(i));
    w.record(3, hardState(1, 0x1234n, 3));
    w.segment(4, META).record(3, hardState(1, 0x1234n, 3));
    for (let i = 4; i <= 5; i++) w.record(2, entry(i));
    return w.record(3, hardState(1, 0x1234n, 5));
  }

  it('follows the CRC chain across segments', async () => {
    const d = await fresh();
    await twoSegments().write(d);
    const r = await verifyWal(d);
    expect(r.problems).toEqual([]);
    expect(r).toMatchObject({ ok: true, snapshotMatched: true, lastIndex: 5, entries: 5, hardState: { commit: 5 } });
    expect(r.metadata?.nodeIdHex).toBe('1234');
    expect(r.files).toHaveLength(2);
    expect(await readWalMetadata(d)).toMatchObject({ clusterIdHex: 'abcd' });
  });

  it('reports a segment whose leading crc record breaks the chain', async () => {
    const w = twoSegments();
    // Rewrite the second segment's crc record with a wrong value.
    const seg = w.segments[1]!;
    const bad = new TestWal();
    bad.segments.push({ seq: 0, index: 0, frames: [] });
    bad.raw(4, Buffer.alloc(0), 0x1111);
    seg.frames[0] = bad.segments[0]!.frames[0]!;
    const d = await fresh();
    await w.write(d);
    const r = await verifyWal(d);
    expect(r.ok).toBe(false);
    expect(r.problems[0]).toMatch(/0000000000000001-0000000000000004\.wal@0: crc record 0x00001111 does not match the running crc/);
  });

  it('allows a rewound index (overwritten uncommitted tail) but not a gap', async () => {
    const d1 = await fresh();
    const rewind = new TestWal().segment(0, META).record(5, walSnapshot(0, 0));
    for (const i of [1, 2, 3, 2, 3, 4]) rewind.record(2, entry(i));
    await rewind.record(3, hardState(2, 1n, 4)).write(d1);
    expect((await verifyWal(d1)).ok).toBe(true);

    const d2 = await fresh();
    const gap = new TestWal().segment(0, META).record(5, walSnapshot(0, 0));
    for (const i of [1, 2, 4]) gap.record(2, entry(i));
    const [name] = await gap.write(d2);
    const at = (await frames(join(d2, name!))).filter((f) => f.type === 2)[2]!.offset;
    expect((await verifyWal(d2)).problems).toEqual([`${name}@${at}: entry index 4 leaves a gap after 2`]);
  });

  it('reports conflicting metadata, unknown record types and a commit beyond the log', async () => {
    const d = await fresh();
    const w = new TestWal().segment(0, META).record(5, walSnapshot(0, 0)).record(2, entry(1));
    w.record(1, metadata(0x9999n, 0xabcdn))
      .record(9, Buffer.from('?'))
      .record(3, hardState(1, 1n, 7));
    await w.write(d);
    const r = await verifyWal(d);
    expect(r.problems).toEqual([
      expect.stringMatching(/conflicting metadata record/),
      expect.stringMatching(/unexpected record type 9/),
      'wal: hard state commit 7 is beyond the last entry 1',
    ]);
  });

  it('starts at the segment of the snapshot and requires the matching snapshot record', async () => {
    const w = twoSegments();
    w.record(5, walSnapshot(5, 1));
    const d = await fresh();
    await w.write(d);
    const ok = await verifyWal(d, { index: 5, term: 1 });
    expect(ok).toMatchObject({ ok: true, snapshotMatched: true, lastIndex: 5, files: ['0000000000000001-0000000000000004.wal'] });
    expect((await verifyWal(d, { index: 5, term: 2 })).problems).toEqual([
      expect.stringMatching(/snapshot record \(index 5, term 1\) mismatches \.snap term 2/),
    ]);
    expect((await verifyWal(d, { index: 4, term: 1 })).problems).toEqual(['wal: snapshot record (index 4, term 1) not found']);
  });

  it('treats a short or torn last segment as repairable, but not an earlier one', async () => {
    const d = await fresh();
    const [first, second] = await twoSegments().write(d, 0);
    const tail = await frames(join(d, second!));
    const last = tail[tail.length - 1]!;
    await truncate(join(d, second!), last.offset + 12);
    const r = await verifyWal(d);
    expect(r.ok).toBe(true);
    expect(r.repairable).toMatchObject({ file: second, offset: last.offset, followedByRecords: false });
    expect(r.repairable?.message).toMatch(/runs past the end of the segment/);
    expect(r.lastIndex).toBe(5);

    const head = await frames(join(d, first!));
    await truncate(join(d, first!), head[head.length - 1]!.offset + 12);
    const r2 = await verifyWal(d);
    expect(r2.ok).toBe(false);
    expect(r2.problems[0]).toMatch(/^0000000000000000-0000000000000000\.wal@\d+: truncated segment/);
  });

  it('treats a zeroed sector in the last segment as a torn write', async () => {
    const d = await fresh();
    const w = new TestWal()
      .segment(0, META)
      .record(5, walSnapshot(0, 0))
      .record(2, entry(1))
      .record(2, entry(2, 1, Buffer.alloc(2000, 7)));
    const [name] = await w.write(d);
    const p = join(d, name!);
    const recs = await frames(p);
    const big = recs[recs.length - 1]!;
    // The second sector-aligned 512 bytes inside the big record's body.
    const sector = Math.ceil((big.offset + 8) / 512) * 512 + 512;
    await patchFile(p, sector, Buffer.alloc(512));
    const r = await verifyWal(d);
    expect(r.ok).toBe(true);
    expect(r.repairable?.message).toMatch(/torn record \(crc mismatch, zeroed sector\)/);
    expect(r.lastIndex).toBe(1);
  });

  it('an index, term or segment number of 2^53 or more: the exact value, and where (not rounded through a number)', async () => {
    const d = await fresh();
    const w = new TestWal().segment(0, META).record(5, walSnapshot(0, 0)).record(2, entry(1));
    // 2^64 - 1 would print as 18446744073709552000, 2^53 + 1 as 9007199254740992.
    w.record(2, Buffer.concat([fieldVarint(1, 0), fieldVarint(2, 1), fieldVarint(3, 2n ** 64n - 1n)]));
    w.record(3, Buffer.concat([fieldVarint(1, 2n ** 53n + 1n), fieldVarint(3, 1)]));
    const [name] = await w.write(d);
    const at = (await frames(join(d, name!))).filter((f) => f.type === 2 || f.type === 3).map((f) => f.offset);
    expect((await verifyWal(d)).problems).toEqual([
      `${name}@${at[1]}: record of type 2 does not decode: entry index 18446744073709551615 is out of range (2^53 or more)`,
      `${name}@${at[2]}: record of type 3 does not decode: hard state term 9007199254740993 is out of range (2^53 or more)`,
    ]);

    const named = await fresh();
    await new TestWal().segment(0, META).record(5, walSnapshot(0, 0)).write(named);
    await writeFile(join(named, 'ffffffffffffffff-0000000000000001.wal'), Buffer.alloc(8));
    expect((await verifyWal(named)).problems).toEqual([
      'wal: segment ffffffffffffffff-0000000000000001.wal: sequence 18446744073709551615 is out of range (2^53 or more)',
    ]);
  });

  it('reports a missing or empty WAL directory', async () => {
    expect((await verifyWal(join(dir, 'nope'))).problems).toEqual([expect.stringMatching(/does not exist/)]);
    const d = await fresh();
    await writeFile(join(d, '0.tmp'), Buffer.alloc(10));
    expect((await verifyWal(d)).problems).toEqual(['wal: no segment files']);
    expect(await readWalMetadata(d)).toBeUndefined();
  });
});

describe('verifyWal and .snap files of a real etcd', () => {
  let fx: EtcdDataDir;
  beforeAll(async () => {
    // A low snapshot count makes etcd write .snap files and a snapshot record into the WAL.
    fx = await makeEtcdDataDir({ keys: 120, snapshotCount: 50, valueBytes: (i) => 100 + (i % 7) * 300 });
  });
  afterAll(async () => {
    await fx?.cleanup();
  });

  const walOf = (dataDir: string): string => join(dataDir, 'member', 'wal');
  const snapOf = (dataDir: string): string => join(dataDir, 'member', 'snap');
  const segment = async (dataDir: string): Promise<string> => {
    const names = (await readdir(walOf(dataDir))).filter((x) => x.endsWith('.wal')).sort();
    return join(walOf(dataDir), names[names.length - 1]!);
  };

  it('verifies a healthy WAL against the newest snapshot, with member and cluster ids', async () => {
    const snaps = await loadNewestSnapshot(snapOf(fx.dataDir));
    expect(snaps.broken).toEqual([]);
    expect(snaps.snapshot).toBeDefined();
    const r = await verifyWal(walOf(fx.dataDir), snaps.snapshot);
    expect(r.problems).toEqual([]);
    expect(r.ok).toBe(true);
    expect(r.snapshotMatched).toBe(true);
    expect(r.repairable).toBeUndefined();
    expect(r.metadata).toMatchObject({ nodeIdHex: fx.memberIdHex, clusterIdHex: fx.clusterIdHex });
    expect(r.hardState!.commit).toBe(r.lastIndex);
    expect(await readWalMetadata(walOf(fx.dataDir))).toEqual(r.metadata);
    // Without a snapshot the whole WAL is read from its first record.
    expect((await verifyWal(walOf(fx.dataDir))).ok).toBe(true);
  });

  it('catches a flipped byte in a record in the middle', async () => {
    const d = await copyDataDir(fx, 'flip');
    const p = await segment(d);
    const recs = (await frames(p)).filter((f) => f.type === 2);
    const mid = recs[Math.floor(recs.length / 2)]!;
    const fh = await open(p, 'r+');
    try {
      const b = Buffer.alloc(1);
      await fh.read(b, 0, 1, mid.offset + 30);
      b[0]! ^= 0x10;
      await fh.write(b, 0, 1, mid.offset + 30);
    } finally {
      await fh.close();
    }
    const r = await verifyWal(walOf(d), (await loadNewestSnapshot(snapOf(d))).snapshot);
    expect(r.ok).toBe(false);
    expect(r.problems[0]).toMatch(new RegExp(`@${mid.offset}: (crc mismatch|undecodable record)`));
  });

  it('treats a WAL cut inside its last record as repairable', async () => {
    const d = await copyDataDir(fx, 'cut');
    const p = await segment(d);
    const recs = await frames(p);
    const last = recs[recs.length - 1]!;
    await truncate(p, last.offset + 10);
    const r = await verifyWal(walOf(d), (await loadNewestSnapshot(snapOf(d))).snapshot);
    expect(r.ok).toBe(true);
    expect(r.repairable).toMatchObject({ offset: last.offset });
  });

  it('skips a broken newest .snap file and uses the one before', async () => {
    const d = await copyDataDir(fx, 'snap');
    const names = (await readdir(snapOf(d))).filter((x) => x.endsWith('.snap')).sort();
    expect(names.length).toBeGreaterThan(1);
    const newest = names[names.length - 1]!;
    await patchFile(join(snapOf(d), newest), 20, Buffer.from('garbage'));
    await writeFile(join(snapOf(d), 'ffffffffffffffff-ffffffffffffffff.snap'), '');
    const s = await loadNewestSnapshot(snapOf(d));
    expect(s.snapshot?.name).toBe(names[names.length - 2]);
    expect(s.broken.map((b) => b.name)).toEqual(['ffffffffffffffff-ffffffffffffffff.snap', newest]);
    expect(s.broken[0]!.reason).toMatch(/empty/);
    expect(s.broken[1]!.reason).toMatch(/crc mismatch|undecodable/);
    // The WAL still holds the older snapshot's record.
    expect((await verifyWal(walOf(d), s.snapshot)).ok).toBe(true);
  });
});
