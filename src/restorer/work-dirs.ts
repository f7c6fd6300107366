/**
 * The directories a restore works in: the data dir it produces (built as `<data-dir>.part` until the swap),
 * and its scratch space under `--restoration-temp-snapshots-dir` for the base snapshot file and the fetched
 * deltas. What the restore creates for itself goes again at the end.
 */
import { mkdir, mkdtemp, readdir, rm, rmdir, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { EtcdbrError } from '../errors.js';

/** The backend file of a data dir. */
export function backendPath(dataDir: string): string {
  return join(dataDir, 'member', 'snap', 'db');
}

/** Where the restored data dir is built before it is renamed into place. */
export function partDirOf(dataDir: string): string {
  return `${dataDir}.part`;
}

/** Fails with E_CONFLICT when `dataDir` holds anything (a restore never writes over data it was not told to replace). */
export async function refuseNonEmptyDataDir(dataDir: string): Promise<void> {
  if (await nonEmptyDir(dataDir)) {
    throw new EtcdbrError('E_CONFLICT', `data-dir ${dataDir} is not empty: refusing to restore over it`);
  }
}

async function nonEmptyDir(dir: string): Promise<boolean> {
  try {
    const s = await stat(dir);
    if (!s.isDirectory()) return true;
    return (await readdir(dir)).length > 0;
  } catch {
    return false;
  }
}

export interface Scratch {
  /** A directory of this restore's own, under the temp dir. */
  dir: string;
  /** Removes `dir`, and the temp dir's levels this restore created when they are empty again. */
  remove(): Promise<void>;
}

/**
 * This restore's scratch space, so that a restore leaves no empty `default.restoration.tmp/` behind in the
 * working directory.
 */
export async function openScratch(tempDir: string): Promise<Scratch> {
  const createdTempRoot = await mkdir(tempDir, { recursive: true, mode: 0o700 });
  const dir = await mkdtemp(join(tempDir, 'restore-'));
  return {
    dir,
    remove: async () => {
      await rm(dir, { recursive: true, force: true });
      if (createdTempRoot !== undefined) await removeEmptyDirsUpTo(tempDir, createdTempRoot);
    },
  };
}

/** Removes `dir` and its parents up to and including `top` while they are empty (never anything else). */
async function removeEmptyDirsUpTo(dir: string, top: string): Promise<void> {
  for (let d = resolve(dir); ; d = dirname(d)) {
    try {
      await rmdir(d);
    } catch {
      return; // not empty (someone else's files), or gone: stop there
    }
    if (d === resolve(top) || dirname(d) === d) return;
  }
}
