/**
 * Durability of a restored data dir before it replaces anything. The replay etcd runs with
 * `--unsafe-no-fsync` where it has it (3.5+), and a rename is only durable once its directory is synced:
 * without these, a power cut shortly after a "successful" restore could leave a data dir whose WAL or
 * backend never reached the disk, with the old data dir already removed. (Upstream relies on the page
 * cache here.)
 */
import { open, readdir } from 'node:fs/promises';
import { join } from 'node:path';

/** fsyncs one file or directory (a directory's fsync makes its entries, e.g. a rename, durable). */
export async function syncPath(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** fsyncs every regular file and every directory under `dir`, and `dir` itself. */
export async function syncTree(dir: string): Promise<void> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) await syncTree(path);
    else if (entry.isFile()) await syncPath(path);
  }
  await syncPath(dir);
}
