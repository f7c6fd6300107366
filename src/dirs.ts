/**
 * Directories the commands make for their scratch space, with errors that say why they could not be made.
 */
import { mkdir, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { EtcdbrError } from './errors.js';

/**
 * `mkdir -p dir` with `mode` for each directory it makes, failing with the system's own reason. Node's
 * recursive mkdir reports ENOENT for a directory it cannot make on a read-only file system
 * (nodejs/node#47098), which reads as a missing parent; here the mkdir that fails is the one reported (EROFS,
 * EACCES, ...). Returns the first directory it made, undefined when `dir` was there, as Node's does.
 */
export async function mkdirParents(dir: string, mode = 0o700): Promise<string | undefined> {
  const missing: string[] = [];
  for (let d = resolve(dir); ; d = dirname(d)) {
    try {
      if (!(await stat(d)).isDirectory()) throw new EtcdbrError('E_INVALID_INPUT', `${d} is not a directory`);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(d) === d) throw err;
      missing.unshift(d);
    }
  }
  for (const d of missing) {
    try {
      await mkdir(d, { mode });
    } catch (err) {
      // Made by someone else meanwhile: there, which is all that is asked.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
  return missing[0];
}
