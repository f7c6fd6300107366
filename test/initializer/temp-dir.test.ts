/**
 * The initializer clears the snapstore temp dir of upload parts a stopped process left before it starts; the
 * dir itself must stay, since it is often a volume of its own whose mount point cannot be removed. Found by
 * the fault soak (seed 16, three members, the temp dirs on tmpfs): every initialization failed with EBUSY
 * and etcd never started (it emptied the directory then, and tried to remove it).
 */
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { prepareSnapstoreTempDir } from '../../src/initializer/temp-dir.js';
import { recordingLogger } from '../support/logger.js';

/**
 * A directory whose contents may be removed but not the directory itself: a tmpfs mount point when we are
 * root and may mount, else a directory in a parent we may not write. Undefined when root may not mount.
 */
async function unremovableDir(base: string): Promise<{ dir: string; release(): Promise<void> } | undefined> {
  const parent = join(base, 'parent');
  const dir = join(parent, 'tmp');
  await mkdir(dir, { recursive: true });
  if (process.getuid?.() === 0) {
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir], { stdio: 'ignore' });
      return { dir, release: async () => void execFileSync('umount', [dir]) };
    } catch {
      return undefined;
    }
  }
  await chmod(parent, 0o555);
  return { dir, release: () => chmod(parent, 0o755) };
}

describe('prepareSnapstoreTempDir', () => {
  let base = '';
  const releases: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const r of releases.splice(0)) await r();
    if (base) await rm(base, { recursive: true, force: true });
  });

  it('removes the parts a killed process left and keeps the directory itself (a mount point cannot be removed)', async () => {
    base = await mkdtemp(join(tmpdir(), 'etcdbr-tempdir-'));
    const u = await unremovableDir(base);
    // Never skipped quietly: as root the test mounts a tmpfs (CI runs as root), as another user it takes a parent it may not write.
    if (!u)
      throw new Error(
        'cannot make a directory that may not be removed here: as root, mounting a tmpfs failed (the test needs CAP_SYS_ADMIN)',
      );
    releases.push(u.release);
    // A part of a writer that is gone: this test's pid, but started at tick 0 of a boot, long before this process.
    await writeFile(join(u.dir, `.etcdbr-part-${process.pid}.0.00000000-0123456789ab-1`), 'x');
    await mkdir(join(u.dir, 'sub', 'deeper'), { recursive: true });
    await writeFile(join(u.dir, 'sub', 'deeper', 'f'), 'y');
    const before = await stat(u.dir);
    const logger = recordingLogger();
    await prepareSnapstoreTempDir(u.dir, { keep: [], logger });
    expect(await readdir(u.dir)).toEqual(['sub']);
    expect(logger.lines).toEqual([
      { level: 'info', msg: 'removed upload parts that stopped processes left in the snapstore temp directory' },
    ]);
    expect((await stat(u.dir)).ino).toBe(before.ino);
  });

  it('creates a missing directory 0700', async () => {
    base = await mkdtemp(join(tmpdir(), 'etcdbr-tempdir-'));
    const dir = join(base, 'a', 'b');
    await prepareSnapstoreTempDir(dir, { keep: [], logger: recordingLogger() });
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
  });
});
