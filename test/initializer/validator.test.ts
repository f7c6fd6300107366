import { mkdir, open, readFile, readdir, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BoltDB, element, isLeaf } from '../../src/bbolt/db.js';
import { createLogger } from '../../src/log.js';
import { DataDirStatus, dataDirStatusName } from '../../src/initializer/validation-status.js';
import { goPathDir, validateDataDir } from '../../src/initializer/validator.js';
import type { ValidateDataDirOptions } from '../../src/initializer/validator.js';
import { scanWal } from '../../src/wal/reader.js';
import { copyDataDir, makeEtcdDataDir, patchFile } from '../bbolt/fixture.js';
import type { EtcdDataDir } from '../bbolt/fixture.js';
import { startTestEtcd } from '../support/etcd.js';

let fx: EtcdDataDir;
const lines: string[] = [];
const logger = createLogger({ destination: { write: (s: string) => void lines.push(s) }, logLevel: 5 });

beforeAll(async () => {
  // Enough small keys for branch pages in bucket "key"; a snapshot count low enough for .snap files.
  fx = await makeEtcdDataDir({ keys: 300, valueBytes: () => 200, snapshotCount: 100, deleteEvery: 7 });
});
afterAll(async () => {
  await fx?.cleanup();
});

let copies = 0;
const copy = (): Promise<string> => copyDataDir(fx, `c${copies++}`);

function validate(o: Partial<ValidateDataDirOptions> & { dataDir: string }) {
  return validateDataDir({ mode: 'sanity', clusterSize: 1, logger, lockTimeoutMs: 0, ...o });
}

const statusOf = async (o: Partial<ValidateDataDirOptions> & { dataDir: string }): Promise<string> =>
  dataDirStatusName((await validate(o)).status);

const dbOf = (d: string): string => join(d, 'member', 'snap', 'db');

/** Page ids of bucket "key": its root and a leaf in the middle (off the right-most path). */
async function keyPages(dbPath: string): Promise<{ root: number; middleLeaf: number; pageSize: number }> {
  const db = await BoltDB.open(dbPath);
  try {
    const b = (await db.bucket('key'))!;
    let p = await db.treePage(b.root);
    while (!isLeaf(p)) p = await db.treePage(element(p, Math.floor((p.count - 1) / 2)).child);
    return { root: b.root, middleLeaf: p.id, pageSize: db.pageSize };
  } finally {
    await db.close();
  }
}

async function lastWalSegment(d: string): Promise<string> {
  const dir = join(d, 'member', 'wal');
  const names = (await readdir(dir)).filter((n) => n.endsWith('.wal')).sort();
  return join(dir, names[names.length - 1]!);
}

async function walFrames(p: string): Promise<{ offset: number; type: number }[]> {
  const out: { offset: number; type: number }[] = [];
  await scanWal([p], (rec, _b, _f, offset) => void out.push({ offset, type: rec.type }));
  return out;
}

describe('validateDataDir', () => {
  it('finds a healthy data dir valid in both modes, with and without a store', async () => {
    const d = await copy();
    for (const mode of ['sanity', 'full'] as const) {
      expect(await validate({ dataDir: d, mode })).toEqual({ status: DataDirStatus.DataDirectoryValid });
      expect(await validate({ dataDir: d, mode, latestSnapshotRevision: fx.revision })).toEqual({
        status: DataDirStatus.DataDirectoryValid,
        dbRevision: fx.revision,
      });
    }
  });

  it('reports a missing data dir, or an invalid one in a multi-node cluster with backups', async () => {
    const d = join(fx.root, 'absent', 'data');
    expect(await statusOf({ dataDir: d })).toBe('DataDirectoryNotExist');
    expect(await statusOf({ dataDir: d, clusterSize: 3, latestSnapshotRevision: 0 })).toBe('DataDirectoryNotExist');
    expect(await statusOf({ dataDir: d, clusterSize: 3 })).toBe('DataDirectoryNotExist');
    expect(await statusOf({ dataDir: d, clusterSize: 3, latestSnapshotRevision: 10 })).toBe('DataDirStatusInvalidInMultiNode');
    expect(await statusOf({ dataDir: d, clusterSize: 3, latestSnapshotRevision: () => Promise.resolve(10) })).toBe(
      'DataDirStatusInvalidInMultiNode',
    );
  });

  it('reports a missing member/wal as invalid structure; an empty WAL dir passes sanity only (case 44)', async () => {
    const d = await copy();
    const wal = join(d, 'member', 'wal');
    await rm(wal, { recursive: true });
    expect(await statusOf({ dataDir: d })).toBe('DataDirectoryInvStruct');
    expect(await statusOf({ dataDir: d, mode: 'full' })).toBe('DataDirectoryInvStruct');
    await writeFile(wal, 'not a directory');
    expect(await statusOf({ dataDir: d })).toBe('DataDirectoryInvStruct');
    await rm(wal);
    await mkdir(wal);
    expect(await statusOf({ dataDir: d })).toBe('DataDirectoryValid');
    expect(await statusOf({ dataDir: d, latestSnapshotRevision: fx.revision })).toBe('DataDirectoryValid');
    const full = await validate({ dataDir: d, mode: 'full' });
    expect(full.status).toBe(DataDirStatus.DataDirectoryCorrupt);
    expect(full.problems).toEqual(['wal: no segment files']);
  });

  it('reports a garbage db as corrupt', async () => {
    const d = await copy();
    await writeFile(dbOf(d), Buffer.alloc(256 * 1024, 0x5a));
    expect(await statusOf({ dataDir: d, latestSnapshotRevision: 5 })).toBe('DataDirectoryCorrupt');
    // Without a store, sanity does not open the db; full mode does.
    expect(await statusOf({ dataDir: d })).toBe('DataDirectoryValid');
    lines.length = 0;
    expect(await statusOf({ dataDir: d, mode: 'full' })).toBe('DataDirectoryCorrupt');
    // Corrupt data is replaced from the backups, losing what it held beyond them: a warning, not news.
    const corrupt = lines
      .map((l) => JSON.parse(l) as { level: string; msg: string })
      .filter((l) => l.msg.startsWith('Data directory corrupt'));
    expect(corrupt.map((l) => l.level)).toEqual(['warn']);
    await rm(dbOf(d));
    expect(await statusOf({ dataDir: d, latestSnapshotRevision: 5 })).toBe('DataDirectoryCorrupt');
  });

  it('reports a broken page on the way to the last revision as BoltDBCorrupt', async () => {
    const d = await copy();
    const { root, pageSize } = await keyPages(dbOf(d));
    await patchFile(dbOf(d), root * pageSize, Buffer.alloc(pageSize));
    expect(await statusOf({ dataDir: d, latestSnapshotRevision: 5 })).toBe('BoltDBCorrupt');
  });

  it('catches a bbolt page corrupted in the middle in full mode only', async () => {
    const d = await copy();
    const { middleLeaf, pageSize } = await keyPages(dbOf(d));
    await patchFile(dbOf(d), middleLeaf * pageSize, Buffer.alloc(pageSize));
    expect(await statusOf({ dataDir: d, latestSnapshotRevision: fx.revision })).toBe('DataDirectoryValid');
    const full = await validate({ dataDir: d, mode: 'full', latestSnapshotRevision: fx.revision });
    expect(full.status).toBe(DataDirStatus.DataDirectoryCorrupt);
    expect(full.problems).toContain(`page ${middleLeaf}: header identifies as page 0`);
    expect(full.reason).toMatch(/invalid db files/);
  });

  it('catches a flipped byte in a WAL record in full mode only', async () => {
    const d = await copy();
    const seg = await lastWalSegment(d);
    const entries = (await walFrames(seg)).filter((f) => f.type === 2);
    const at = entries[Math.floor(entries.length / 2)]!.offset + 40;
    const b = Buffer.alloc(1);
    const fh = await open(seg, 'r+');
    try {
      await fh.read(b, 0, 1, at);
      b[0]! ^= 0x01;
      await fh.write(b, 0, 1, at);
    } finally {
      await fh.close();
    }
    expect(await statusOf({ dataDir: d })).toBe('DataDirectoryValid');
    const full = await validate({ dataDir: d, mode: 'full' });
    expect(full.status).toBe(DataDirStatus.DataDirectoryCorrupt);
    expect(full.reason).toMatch(/invalid wal files: .*crc mismatch/);
  });

  it('accepts a WAL whose last record is torn, as etcd repairs it', async () => {
    const d = await copy();
    const seg = await lastWalSegment(d);
    const frames = await walFrames(seg);
    await truncate(seg, frames[frames.length - 1]!.offset + 9);
    expect(await validate({ dataDir: d, mode: 'full' })).toEqual({ status: DataDirStatus.DataDirectoryValid, walRepairable: true });
    expect(lines.some((l) => l.includes('WAL tail is torn'))).toBe(true);
  });

  describe('revision against the latest backup (case 42)', () => {
    it('is valid when the backend is at or beyond it, or there are no backups', async () => {
      const d = await copy();
      let calls = 0;
      const catchUp = async (): Promise<boolean> => {
        calls++;
        return true;
      };
      expect(await statusOf({ dataDir: d, latestSnapshotRevision: fx.revision, catchUp })).toBe('DataDirectoryValid');
      expect(await statusOf({ dataDir: d, latestSnapshotRevision: fx.revision - 5, catchUp })).toBe('DataDirectoryValid');
      expect(await statusOf({ dataDir: d, latestSnapshotRevision: 0, catchUp })).toBe('DataDirectoryValid');
      expect(calls).toBe(0);
    });

    it('asks for WAL catch-up when behind: caught up is valid, not caught up is a consistency error', async () => {
      const d = await copy();
      const target = fx.revision + 10;
      const seen: [string, number][] = [];
      const ok = await validate({
        dataDir: d,
        latestSnapshotRevision: target,
        catchUp: async (dir, rev) => {
          seen.push([dir, rev]);
          return true;
        },
      });
      expect(ok).toEqual({ status: DataDirStatus.DataDirectoryValid, dbRevision: fx.revision });
      expect(seen).toEqual([[d, target]]);
      expect(await statusOf({ dataDir: d, latestSnapshotRevision: target, catchUp: async () => false })).toBe('RevisionConsistencyError');
      expect(await statusOf({ dataDir: d, latestSnapshotRevision: target })).toBe('RevisionConsistencyError');
      const failing = async (): Promise<boolean> => {
        throw new Error('etcd did not start');
      };
      expect(await statusOf({ dataDir: d, latestSnapshotRevision: target, catchUp: failing })).toBe('DataDirectoryCorrupt');
    });

    it('skips the comparison in a multi-node cluster, where the leader brings the member up to date', async () => {
      const d = await copy();
      const catchUp = async (): Promise<boolean> => {
        throw new Error('must not be called');
      };
      expect(await statusOf({ dataDir: d, clusterSize: 3, latestSnapshotRevision: fx.revision + 10, catchUp })).toBe('DataDirectoryValid');
    });

    it('looks the latest revision up lazily, once, and reports a failing store as unknown', async () => {
      const d = await copy();
      let lookups = 0;
      const lazy = async (): Promise<number> => {
        lookups++;
        return fx.revision + 1;
      };
      expect(await statusOf({ dataDir: d, latestSnapshotRevision: lazy })).toBe('RevisionConsistencyError');
      expect(lookups).toBe(1);
      const broken = await validate({ dataDir: d, latestSnapshotRevision: () => Promise.reject(new Error('store down')) });
      expect(broken.status).toBe(DataDirStatus.DataDirectoryStatusUnknown);
      expect(broken.reason).toMatch(/store down/);
    });
  });

  describe('safe_guard (case 43)', () => {
    it('creates the file with the namespace, mode 0600, and accepts it afterwards', async () => {
      const d = await copy();
      const guard = join(d, '..', 'safe_guard');
      expect(await statusOf({ dataDir: d, podNamespace: 'shoot--dev--a' })).toBe('DataDirectoryValid');
      expect(await readFile(guard, 'utf8')).toBe('shoot--dev--a');
      expect((await stat(guard)).mode & 0o777).toBe(0o600);
      expect(await statusOf({ dataDir: d, podNamespace: 'shoot--dev--a' })).toBe('DataDirectoryValid');
    });

    it('reports another namespace as a wrong volume, also in a multi-node cluster and before anything else', async () => {
      const d = join(fx.root, 'guarded', 'data');
      await mkdir(join(d, '..'), { recursive: true });
      await writeFile(join(d, '..', 'safe_guard'), 'shoot--other');
      const r = await validate({ dataDir: d, podNamespace: 'shoot--dev--a', clusterSize: 3, latestSnapshotRevision: 10 });
      expect(r.status).toBe(DataDirStatus.WrongVolumeMounted);
      expect(r.reason).toMatch(/wrong volume is mounted.*shoot--dev--a.*shoot--other/);
    });

    it('does nothing without a namespace', async () => {
      const d = await copy();
      expect(await statusOf({ dataDir: d })).toBe('DataDirectoryValid');
      await expect(stat(join(d, '..', 'safe_guard'))).rejects.toMatchObject({ code: 'ENOENT' });
    });

    it('places the file where upstream does (Go path.Dir)', () => {
      expect(goPathDir('/var/etcd/data/new.etcd')).toBe('/var/etcd/data');
      expect(goPathDir('/var/etcd/data/new.etcd/')).toBe('/var/etcd/data/new.etcd');
      expect(goPathDir('default.etcd')).toBe('.');
      expect(goPathDir('/data')).toBe('/');
    });
  });

  it('reports FailToOpenBoltDBError while etcd holds the db lock', async () => {
    const etcd = await startTestEtcd();
    try {
      const r = await validate({ dataDir: etcd.dataDir, latestSnapshotRevision: 1, lockTimeoutMs: 200 });
      expect(r.status).toBe(DataDirStatus.FailToOpenBoltDBError);
      expect(r.reason).toMatch(/holds the file lock/);
      // Not turned into DataDirStatusInvalidInMultiNode either.
      expect(await statusOf({ dataDir: etcd.dataDir, mode: 'full', clusterSize: 3, latestSnapshotRevision: 9 })).toBe(
        'FailToOpenBoltDBError',
      );
    } finally {
      await etcd.cleanup();
    }
  });
});
