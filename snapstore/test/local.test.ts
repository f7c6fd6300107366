import { mkdir, mkdtemp, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalStoreConfig } from '../src/config.js';
import { isSnapStoreError } from '../src/errors.js';
import { STALE_TEMP_AGE_MS, openLocalStore } from '../src/providers/local.js';
import type { Snapshot } from '../src/snapshot.js';
import type { SnapStore } from '../src/store.js';
import { describeSnapStoreConformance, readAll, testSnapshot } from './conformance.js';
import type { ConformanceHarness } from './conformance.js';
import { waitFor } from '../../test/support/wait.js';

const MiB = 1024 * 1024;

function localConfig(rootDir: string, prefix: string, extra: Partial<LocalStoreConfig> = {}): LocalStoreConfig {
  return {
    provider: 'Local',
    container: 'default.bkp',
    rootDir,
    prefix,
    maxParallelChunkUploads: 5,
    minChunkSize: 5 * MiB,
    tempDir: os.tmpdir(),
    ...extra,
  };
}

/** Every file under `dir`, dotfiles included, as posix keys relative to it. */
async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string, rel: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const k = rel === '' ? e.name : `${rel}/${e.name}`;
      if (e.isDirectory()) await walk(path.join(d, e.name), k);
      else out.push(k);
    }
  };
  await walk(dir, '');
  return out.sort();
}

async function localHarness(): Promise<ConformanceHarness> {
  const root = await mkdtemp(path.join(os.tmpdir(), 'snapstore-local-'));
  return {
    open: (opts) => openLocalStore(localConfig(root, opts?.prefix ?? 'v2', opts?.logger ? { logger: opts.logger } : {})),
    rawKeys: () => filesUnder(root),
    async putRaw(key, data) {
      const file = path.join(root, ...key.split('/'));
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(file, data);
    },
    teardown: () => rm(root, { recursive: true, force: true }),
  };
}

describeSnapStoreConformance('Local', localHarness, { network: false });

describe('Local provider specifics', () => {
  let root: string;
  const stores: SnapStore[] = [];
  const open = async (prefix: string): Promise<SnapStore> => {
    const s = await openLocalStore(localConfig(root, prefix));
    stores.push(s);
    return s;
  };

  beforeAll(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'snapstore-local-x-'));
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
    await rm(root, { recursive: true, force: true });
  });

  it('creates the prefix directory on open, directories 0700 and files 0600', async () => {
    const store = await open('m/v2');
    expect((await stat(path.join(root, 'm', 'v2'))).isDirectory()).toBe(true);
    expect((await stat(path.join(root, 'm', 'v2'))).mode & 0o777).toBe(0o700);
    const snap = testSnapshot('Full', 0, 1, 1_700_000_001);
    await store.save(snap, Readable.from([Buffer.from('x')]));
    expect((await stat(path.join(root, 'm', 'v2', snap.snapName))).mode & 0o777).toBe(0o600);
  });

  it('rejects a relative root directory', async () => {
    await expect(openLocalStore(localConfig('relative/dir', 'v2'))).rejects.toMatchObject({ code: 'E_CONFIG' });
  });

  it('an unfinished save is an invisible temp file that list ignores; it appears only when complete', async () => {
    const store = await open('p/v2');
    const input = new PassThrough();
    const snap = testSnapshot('Full', 0, 2, 1_700_000_002);
    const saving = store.save(snap, input);
    input.write(Buffer.alloc(1000, 1));
    const during = await waitFor(
      async () => {
        const files = await filesUnder(path.join(root, 'p', 'v2'));
        return files.length > 0 ? files : undefined;
      },
      'the save to open its file',
      10_000,
      10,
    );
    expect(during).toHaveLength(1);
    expect(during[0]).toMatch(/^\.etcd-backup-/);
    expect(await store.list()).toEqual([]);
    input.end(Buffer.alloc(24, 2));
    await saving;
    expect(await filesUnder(path.join(root, 'p', 'v2'))).toEqual([snap.snapName]);
    const listed = await store.list();
    expect(listed.map((s) => s.sizeBytes)).toEqual([1024]);
  });

  it('removes temp files of saves that died an hour ago or more when opened, and nothing else', async () => {
    const dir = path.join(root, 'stale', 'v2');
    const v1dir = path.join(root, 'stale', 'v1', 'Backup-1700000000');
    await mkdir(v1dir, { recursive: true });
    await mkdir(dir, { recursive: true });
    const longAgo = new Date(Date.now() - STALE_TEMP_AGE_MS - 60_000);
    const files = {
      deadV2: path.join(dir, '.etcd-backup-dead01'),
      deadV1: path.join(v1dir, '.etcd-backup-dead02'),
      live: path.join(dir, '.etcd-backup-live01'),
      oldSnapshot: path.join(dir, 'Full-00000000-00000001-1700000000'),
      oldOther: path.join(dir, '.keep'),
    };
    for (const f of Object.values(files)) await writeFile(f, 'x');
    for (const f of [files.deadV2, files.deadV1, files.oldSnapshot, files.oldOther]) await utimes(f, longAgo, longAgo);
    const store = await open('stale/v2');
    // The dead temp files in v2 and in a v1 folder are gone; a fresh one (a save under way) stays, and so
    // does every old file that is not a temp file.
    expect(await filesUnder(path.join(root, 'stale'))).toEqual([
      'v2/.etcd-backup-live01',
      'v2/.keep',
      'v2/Full-00000000-00000001-1700000000',
    ]);
    expect((await store.list()).map((x) => x.snapName)).toEqual(['Full-00000000-00000001-1700000000']);
  });

  it("a writer with a tempOwner removes its own earlier temp files of any age on open, never another's or its live save", async () => {
    const dir = path.join(root, 'owned', 'v2');
    const m0 = await openLocalStore(localConfig(root, 'owned/v2'), { tempOwner: 'server/m0' });
    stores.push(m0);
    // A save under way in this process: its temp file carries the owner's tag.
    const input = new PassThrough();
    const snap = testSnapshot('Full', 0, 3, 1_700_000_003);
    const saving = m0.save(snap, input);
    input.write(Buffer.alloc(100, 1));
    const live = await waitFor(
      async () => (await filesUnder(dir)).find((f) => f.startsWith('.etcd-backup-')),
      'the save to open its temp file',
      10_000,
      10,
    );
    const tag = /^\.etcd-backup-[0-9a-f]{12}\.([0-9a-f]{16})$/.exec(live)?.[1];
    expect(tag, live).toBeDefined();
    // What a killed predecessor of m0 left (fresh: it died a moment ago), another member's save under way,
    // and an untagged save (a snapshot or compact command) under way.
    const files = {
      deadOwn: `.etcd-backup-aaaaaaaaaaaa.${tag}`,
      otherOwner: '.etcd-backup-bbbbbbbbbbbb.0123456789abcdef',
      untagged: '.etcd-backup-cccccccccccc',
    };
    for (const f of Object.values(files)) await writeFile(path.join(dir, f), 'x');
    stores.push(await openLocalStore(localConfig(root, 'owned/v2'), { tempOwner: 'server/m0' }));
    expect(await filesUnder(dir)).toEqual([files.otherOwner, files.untagged, live].sort());
    // Another owner's opening removes none of m0's files.
    stores.push(await openLocalStore(localConfig(root, 'owned/v2'), { tempOwner: 'server/m1' }));
    expect(await filesUnder(dir)).toContain(live);
    input.end(Buffer.alloc(24, 2));
    await saving;
    expect(await filesUnder(dir)).toEqual([files.otherOwner, files.untagged, snap.snapName].sort());
  });

  it('delete removes an emptied v1 snapshot directory but keeps one that still has objects', async () => {
    const store = await open('q/v2');
    const dir = path.join(root, 'q', 'v1', 'Backup-1600000000');
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'Full-00000000-00000010-1600000000.gz'), 'a');
    await writeFile(path.join(dir, 'Incr-00000011-00000020-1600000100.gz'), 'b');
    const [full, incr] = (await store.list()) as [Snapshot, Snapshot];
    await store.delete(full);
    expect((await stat(dir)).isDirectory()).toBe(true);
    await store.delete(incr);
    await expect(stat(dir)).rejects.toMatchObject({ code: 'ENOENT' });
    expect((await stat(path.join(root, 'q', 'v1'))).isDirectory()).toBe(true);
  });

  it('delete of the last chunk removes the chunk directory so the name can be saved as a file', async () => {
    const store = await open('c/v2');
    const name = 'Full-00000000-00000030-1700000030.gz';
    await mkdir(path.join(root, 'c', 'v2', name), { recursive: true });
    await writeFile(path.join(root, 'c', 'v2', name, '0000000001'), 'chunk');
    const [chunk] = (await store.list()) as [Snapshot];
    expect(chunk.isChunk).toBe(true);
    await store.delete(chunk);
    await store.save(testSnapshot('Full', 0, 30, 1_700_000_030), Readable.from([Buffer.from('whole')]));
    const [whole] = (await store.list()) as [Snapshot];
    expect(whole.isChunk).toBe(false);
    expect((await readAll(await store.fetch(whole))).toString()).toBe('whole');
  });

  it('refuses keys that would leave the root', async () => {
    const store = await open('r/v2');
    const evil = { ...testSnapshot('Full', 0, 1, 1_700_000_001), prefix: '../../../etc/v2/' };
    const err = await store.fetch(evil).catch((e: unknown) => e);
    expect(isSnapStoreError(err, 'E_BAD_NAME')).toBe(true);
  });

  it('saves a snapshot listed from v1 back into the v1 layout (adaptPrefix)', async () => {
    const store = await open('s/v2');
    const v1 = {
      ...testSnapshot('Full', 0, 5, 1_600_000_005),
      prefix: 'elsewhere/v1/',
      snapDir: 'Backup-1600000000',
    };
    await store.save(v1, Readable.from([Buffer.from('copied')]));
    expect(await filesUnder(path.join(root, 's'))).toEqual([`v1/Backup-1600000000/${v1.snapName}`]);
  });
});
