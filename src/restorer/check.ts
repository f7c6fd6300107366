/**
 * The restore's check step (docs/how-it-works.md "How a restore works", Check): before the restored `.part` replaces
 * anything, every file and directory in it reaches the disk (the replay etcd ran without fsync; see
 * durable.ts) and its backend passes our bbolt consistency check (verify-backend.ts).
 */
import { syncTree } from './durable.js';
import { verifyRestoredBackend } from './verify-backend.js';
import { backendPath } from './work-dirs.js';

export async function checkRestored(partDir: string): Promise<void> {
  await syncTree(partDir);
  await verifyRestoredBackend(backendPath(partDir));
}
