/**
 * The restore's last step (docs/how-it-works.md "How a restore works", Swap): the checked `<data-dir>.part` takes the data
 * dir's place, with no moment at which neither the old nor the new data dir exists on disk.
 */
import { rename, rm, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { syncPath } from './durable.js';

/** Where the data dir being replaced waits while the restored one is renamed into place. */
function asideDir(dataDir: string): string {
  return `${dataDir}.replaced`;
}

/**
 * Puts the restored `.part` in place. An existing data dir is renamed aside first and removed only once the
 * new one is in place, so there is no moment at which neither exists on disk: a kill in between leaves the
 * old one beside, and the next restore puts it back before doing anything (see recoverInterruptedSwap).
 */
export async function swapInto(partDir: string, dataDir: string, replaceExisting: boolean): Promise<void> {
  if (!replaceExisting) {
    await rename(partDir, dataDir);
    await syncPath(dirname(dataDir));
    return;
  }
  const aside = asideDir(dataDir);
  await rm(aside, { recursive: true, force: true });
  let hadOld = true;
  try {
    await rename(dataDir, aside);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    hadOld = false;
  }
  await rename(partDir, dataDir);
  // The new data dir's name must be on disk before the old one is gone.
  await syncPath(dirname(dataDir));
  if (hadOld) await rm(aside, { recursive: true, force: true });
}

/** After a kill during `swapInto`: the old data dir goes back if the new one never arrived, else it goes. */
export async function recoverInterruptedSwap(dataDir: string): Promise<void> {
  const aside = asideDir(dataDir);
  try {
    await stat(aside);
  } catch {
    return;
  }
  try {
    await stat(dataDir);
    await rm(aside, { recursive: true, force: true });
  } catch {
    await rename(aside, dataDir);
  }
}
