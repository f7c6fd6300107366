/**
 * The directories a restore works in: the data dir it produces (built as `<data-dir>.part` until the swap),
 * and its scratch space under `--restoration-temp-snapshots-dir` for the base snapshot file and the fetched
 * deltas. What the restore creates for itself goes again at the end.
 */
import { mkdtemp, readdir, rm, rmdir, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { mkdirParents } from '../dirs.js';
import { asError, CodedError, errorCode, EtcdbrError } from '../errors.js';

/** The flags that choose where a restore (and compact) writes, for the messages of failed writes. */
export const TEMP_DIR_FLAG = '--restoration-temp-snapshots-dir';
export const DATA_DIR_FLAG = '--data-dir';

/**
 * A restore could not write a file of its own: a file system that is full, over its quota, read-only or
 * refusing. Node's write errors name no file ("ENOSPC: no space left on device, write"), so this one names
 * the path and the flag that chose its directory. The code is the system error's (ENOSPC, EDQUOT, EROFS,
 * EACCES, ...), so the command line gives that code's hint (src/cli/failure.ts).
 */
export class WorkDirWriteError extends CodedError {
  override readonly name = 'WorkDirWriteError';
  constructor(
    readonly code: string,
    readonly path: string,
    readonly flag: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** Node's codes for a file system that does not take a write. */
const WRITE_REFUSALS = new Set(['ENOSPC', 'EDQUOT', 'EFBIG', 'EROFS', 'EACCES', 'EPERM', 'EIO']);

/**
 * `err` as a WorkDirWriteError naming `path` and `flag` when it is a file system's refusal to write `what`
 * there (see WRITE_REFUSALS), else `err` as it was. `creating`: `what` is a directory made in `path`, a step
 * that touches nothing else, so any system error is about `path`.
 */
export function namingWorkDir(err: unknown, what: string, path: string, flag: string, creating = false): Error {
  const code = errorCode(err);
  if (code === undefined || !(err instanceof Error) || err instanceof CodedError) return asError(err);
  if (!WRITE_REFUSALS.has(code) && !(creating && 'syscall' in err)) return err;
  const doing = creating ? `cannot create ${what} in ${path}` : `cannot write ${what} to ${path}`;
  return new WorkDirWriteError(code, path, flag, `${doing} (${flag}): ${err.message}`, { cause: err });
}

/**
 * etcd's own tools report a refused write in their text ("write …: no space left on device"): the system
 * error's code for it, or undefined.
 */
export function writeRefusalInText(text: string): string | undefined {
  if (/no space left on device/i.test(text)) return 'ENOSPC';
  if (/disk quota exceeded/i.test(text)) return 'EDQUOT';
  if (/read-only file system/i.test(text)) return 'EROFS';
  return undefined;
}

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
 * This restore's scratch space `<tempDir>/<prefix>XXXXXX`, so that a restore leaves no empty
 * `default.restoration.tmp/` behind in the working directory. A temp dir that cannot be made (a read-only
 * root file system, as with `readOnlyRootFilesystem`, where the relative default lands in the working
 * directory) fails with E_INVALID_INPUT naming the flag, the path as given and as resolved, and the system's
 * reason: that is where the operator has to act.
 */
export async function openScratch(tempDir: string, prefix = 'restore-'): Promise<Scratch> {
  const absolute = resolve(tempDir);
  let createdTempRoot: string | undefined;
  let dir: string;
  try {
    createdTempRoot = await mkdirParents(absolute);
    dir = await mkdtemp(join(absolute, prefix));
  } catch (err) {
    if (createdTempRoot !== undefined) await removeEmptyDirsUpTo(absolute, createdTempRoot);
    const where = absolute === tempDir ? absolute : `${tempDir} (${absolute})`;
    throw new EtcdbrError(
      'E_INVALID_INPUT',
      `${TEMP_DIR_FLAG} ${where}: cannot create the restoration temp directory: ${(err as Error).message}; give ${TEMP_DIR_FLAG} a writable directory (an emptyDir or the data volume)`,
      { cause: err },
    );
  }
  return {
    dir,
    remove: async () => {
      await rm(dir, { recursive: true, force: true });
      if (createdTempRoot !== undefined) await removeEmptyDirsUpTo(absolute, createdTempRoot);
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
