/**
 * The files this tool writes into `--snapstore-temp-directory`, and the removal of those a process that is
 * gone left behind. The only writer is the S3 upload: each part in flight waits in a file of its own
 * (providers/spooled-parts.ts), removed once the part is sent; a killed process leaves its parts behind.
 *
 * Names: `.etcdbr-part-<pid>.<start ticks>.<boot>-<12 hex>-<part>`. The writer's identity (process-identity.ts) lets
 * the next initialization remove a killed process's parts at once, however fresh they are, and never those
 * of a process still uploading (another etcdbrctl with the same temp dir, `/tmp` for one). Parts named
 * `.etcdbr-part-<12 hex>-<part>` carry no writer (earlier versions, or a machine without /proc): they go once
 * untouched for an hour, far longer than a part waits for its upload.
 *
 * Upstream empties the whole directory instead (every entry but the directory `/tmp`), whatever it holds:
 * pointed at a directory that also held the etcd config, the sidecar's home or the data dir, it removed them.
 */
import { randomBytes } from 'node:crypto';
import { readdir, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from './logger.js';
import { currentProcessIdentity, processIsRunning, type ProcessIdentity } from './process-identity.js';

/** What every spool file's name begins with; hidden, and unlike anything else's. */
export const SPOOL_FILE_PREFIX = '.etcdbr-part-';

/** How long a part without a writer in its name must be untouched before it counts as left behind. */
export const UNOWNED_SPOOL_FILE_AGE_MS = 60 * 60 * 1000;

const OWNED = /^\.etcdbr-part-(\d+)\.(\d+)\.([0-9a-f]{8})-[0-9a-f]{12}-\d+$/;
const UNOWNED = /^\.etcdbr-part-[0-9a-f]{12}-\d+$/;

/** The name of one spool file; the writer's identity when there is one. */
export function spoolFileName(writer: ProcessIdentity | undefined, upload: string, part: number): string {
  const owner = writer === undefined ? '' : `${writer.pid}.${writer.startTicks}.${writer.boot}-`;
  return `${SPOOL_FILE_PREFIX}${owner}${upload}-${part}`;
}

/** One upload's spool file paths in `dir`: call the result with each part's number. */
export async function spoolFilesFor(dir: string): Promise<(part: number) => string> {
  const writer = await currentProcessIdentity();
  const upload = randomBytes(6).toString('hex');
  return (part) => path.join(dir, spoolFileName(writer, upload, part));
}

export interface LeftoverSweepOptions {
  /**
   * Paths never removed, nor anything that holds them (the data dir, the etcd config, a Local store): only
   * regular files with our names are ever candidates, so this can only matter if one of these had such a name;
   * it is checked all the same.
   */
  keep: readonly string[];
  logger: Logger;
  /** The current time; tests set it. */
  now?: number;
}

/**
 * Removes the spool files in `dir` (not below it) whose writer is gone; nothing else. Returns what it
 * removed. Best effort: a file that cannot be read or removed is logged and left, a missing `dir` is empty.
 */
export async function removeLeftoverSpoolFiles(dir: string, opts: LeftoverSweepOptions): Promise<string[]> {
  const now = opts.now ?? Date.now();
  const keep = opts.keep.map((p) => path.resolve(p));
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
      opts.logger.warn({ err, dir }, 'cannot read the snapstore temp directory to remove parts a stopped process left');
    return [];
  }
  const removed: string[] = [];
  for (const e of entries) {
    if (!e.isFile() || !e.name.startsWith(SPOOL_FILE_PREFIX)) continue;
    const file = path.resolve(dir, e.name);
    if (keep.some((k) => k === file || k.startsWith(file + path.sep))) continue;
    try {
      if (!(await leftBehind(e.name, file, now))) continue;
      await unlink(file);
      removed.push(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
        opts.logger.warn({ err, file }, 'cannot remove an upload part a stopped process left');
    }
  }
  if (removed.length > 0)
    opts.logger.info({ files: removed }, 'removed upload parts that stopped processes left in the snapstore temp directory');
  return removed;
}

/** Whether the spool file `name` (at `file`) belongs to no running process. Names not ours never do. */
async function leftBehind(name: string, file: string, now: number): Promise<boolean> {
  const owned = OWNED.exec(name);
  if (owned) return !(await processIsRunning({ pid: Number(owned[1]), startTicks: Number(owned[2]), boot: owned[3] ?? '' }));
  if (UNOWNED.test(name)) return now - (await stat(file)).mtimeMs >= UNOWNED_SPOOL_FILE_AGE_MS;
  return false;
}
