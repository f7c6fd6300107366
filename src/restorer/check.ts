/**
 * The restore's check step (docs/how-it-works.md "How a restore works", Check): before the restored `.part` replaces
 * anything, every file and directory in it reaches the disk (the replay etcd ran without fsync, and the
 * offline replay leaves its backend's fsync to this step; see durable.ts) and its backend passes our bbolt
 * consistency check (verify-backend.ts).
 */
import { syncTree } from './durable.js';
import { verifyRestoredBackend } from './verify-backend.js';
import { backendPath } from './work-dirs.js';

export async function checkRestored(partDir: string): Promise<void> {
  // Side by side: the fsyncs wait on the disk, the check on the CPU (the file it reads is in the page cache,
  // and reading it does not stop it from being synced). Both are done before anything is renamed.
  const [synced, checked] = await Promise.allSettled([syncTree(partDir), verifyRestoredBackend(backendPath(partDir))]);
  // A sync failure first, as when the two ran one after the other.
  if (synced.status === 'rejected') throw synced.reason;
  if (checked.status === 'rejected') throw checked.reason;
}
