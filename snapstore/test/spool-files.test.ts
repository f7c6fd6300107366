/**
 * What an initialization removes from `--snapstore-temp-directory`: the upload parts whose writer is gone, and
 * nothing else, whatever else the directory holds. Writers are real processes the test starts and ends.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/logger.js';
import { currentProcessIdentity, processIsRunning, type ProcessIdentity } from '../src/process-identity.js';
import { removeLeftoverSpoolFiles, spoolFileName, UNOWNED_SPOOL_FILE_AGE_MS } from '../src/spool-files.js';

const undos: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (undos.length > 0) await undos.pop()?.();
});

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'etcdbr-spool-'));
  undos.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A process of the test's own that waits until it is killed; stopped after the test whatever happens. */
async function startWriter(): Promise<{ id: ProcessIdentity; end(): Promise<void> }> {
  const child = spawn('sleep', ['1000'], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const end = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  };
  undos.push(end);
  const stat = await readFile(`/proc/${child.pid}/stat`, 'utf8');
  const startTicks = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
  const boot = (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).replaceAll('-', '').slice(0, 8);
  return { id: { pid: child.pid!, startTicks, boot }, end };
}

async function put(dir: string, name: string, ageMs = 0): Promise<string> {
  const file = path.join(dir, name);
  await writeFile(file, 'part');
  if (ageMs > 0) {
    const t = new Date(Date.now() - ageMs);
    await utimes(file, t, t);
  }
  return file;
}

/** A boot id (shortened) that is not `boot`. */
const otherBoot = (boot: string): string => (boot === '00000000' ? '11111111' : '00000000');

const sweep = (dir: string, keep: string[] = []) => removeLeftoverSpoolFiles(dir, { keep, logger: silentLogger });

describe('process identity', () => {
  it('tells a running process from one that ended and from a pid that names another start', async () => {
    const self = await currentProcessIdentity();
    expect(self?.pid).toBe(process.pid);
    expect(await processIsRunning(self!)).toBe(true);
    expect(await processIsRunning({ ...self!, startTicks: self!.startTicks + 1 })).toBe(false);
    expect(await processIsRunning({ ...self!, boot: otherBoot(self!.boot) })).toBe(false);
    const writer = await startWriter();
    expect(await processIsRunning(writer.id)).toBe(true);
    await writer.end();
    expect(await processIsRunning(writer.id)).toBe(false);
  });
});

describe('removeLeftoverSpoolFiles', () => {
  it("removes the parts of a writer that was killed, keeps a running writer's, and touches nothing else", async () => {
    const dir = await tempDir();
    const killed = await startWriter();
    const running = await startWriter();
    const self = await currentProcessIdentity();
    const gone = await put(dir, spoolFileName(killed.id, 'aaaaaaaaaaaa', 1));
    const gone2 = await put(dir, spoolFileName(killed.id, 'aaaaaaaaaaaa', 2));
    const reused = await put(dir, spoolFileName({ ...self!, startTicks: self!.startTicks + 7 }, 'bbbbbbbbbbbb', 1));
    const live = spoolFileName(running.id, 'cccccccccccc', 1);
    const mine = spoolFileName(self, 'dddddddddddd', 1);
    await put(dir, live);
    await put(dir, mine);
    // What else a temp dir may hold when it is pointed at a busy place: none of it is ours.
    const others = ['etcd.conf.yaml', '.etcdbr-part-notours', '.etcd-backup-0123456789ab', 'leftover.part', '.bashrc'];
    for (const name of others) await put(dir, name);
    await mkdir(path.join(dir, 'new.etcd', 'member'), { recursive: true });
    await mkdir(path.join(dir, spoolFileName(killed.id, 'eeeeeeeeeeee', 1)));
    await symlink(path.join(dir, 'etcd.conf.yaml'), path.join(dir, spoolFileName(killed.id, 'ffffffffffff', 1)));
    await killed.end();

    expect((await sweep(dir)).sort()).toEqual([gone, gone2, reused].sort());
    expect((await readdir(dir)).sort()).toEqual(
      [...others, 'new.etcd', live, mine, spoolFileName(killed.id, 'eeeeeeeeeeee', 1), spoolFileName(killed.id, 'ffffffffffff', 1)].sort(),
    );
    expect(await readFile(path.join(dir, 'etcd.conf.yaml'), 'utf8')).toBe('part');

    // Once its writer ends, a part goes at the next sweep.
    await running.end();
    expect(await sweep(dir)).toEqual([path.join(dir, live)]);
  });

  it('removes a part of an earlier boot, even one naming the pid and start tick of a running process', async () => {
    const dir = await tempDir();
    const self = (await currentProcessIdentity())!;
    const earlierBoot = await put(dir, spoolFileName({ ...self, boot: otherBoot(self.boot) }, '0123456789ab', 1));
    expect(await sweep(dir)).toEqual([earlierBoot]);
  });

  it('removes a part without a writer in its name once it is untouched for an hour', async () => {
    const dir = await tempDir();
    const fresh = await put(dir, spoolFileName(undefined, '0123456789ab', 1), UNOWNED_SPOOL_FILE_AGE_MS - 60_000);
    const stale = await put(dir, spoolFileName(undefined, '0123456789ab', 2), UNOWNED_SPOOL_FILE_AGE_MS + 60_000);
    expect(await sweep(dir)).toEqual([stale]);
    expect(await readdir(dir)).toEqual([path.basename(fresh)]);
  });

  it('never removes a path it is told to keep, even one named like a part of a stopped writer', async () => {
    const dir = await tempDir();
    const killed = await startWriter();
    const kept = await put(dir, spoolFileName(killed.id, '0123456789ab', 1));
    await killed.end();
    expect(await sweep(dir, [kept])).toEqual([]);
    expect(await sweep(`${dir}/`, [`${kept}/`])).toEqual([]);
    expect(await readdir(dir)).toEqual([path.basename(kept)]);
  });

  it('reads a missing directory as empty', async () => {
    expect(await sweep(path.join(await tempDir(), 'missing'))).toEqual([]);
  });
});
