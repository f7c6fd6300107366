import { CodedError } from '../errors.js';
import { checkConsistency } from '../bbolt/check.js';
import { BoltError } from '../bbolt/db.js';

/** A restored backend that is not a consistent bbolt file: it never replaces the data dir. */
export class RestoredBackendError extends CodedError {
  override readonly name = 'RestoredBackendError';
  readonly code = 'E_RESTORED_BACKEND';
}

/**
 * Checks the bbolt structure of a freshly restored backend (every page reachable exactly once, keys in
 * order, meta checksums) before it is renamed into place, so a restore never hands etcd a broken database:
 * the last line of defence after the snapshot's sha256 (checked by etcd's own restore) and the replay's
 * revision checks. Reads the file once, sequentially.
 */
export async function verifyRestoredBackend(dbPath: string): Promise<void> {
  let result;
  try {
    result = await checkConsistency(dbPath);
  } catch (err) {
    if (err instanceof BoltError) {
      throw new RestoredBackendError(`the restored backend ${dbPath} is not a bbolt database: ${err.message}`, { cause: err });
    }
    throw err;
  }
  if (!result.ok) {
    const shown = result.problems
      .slice(0, 3)
      .map((p) => p.message) // each names its page already
      .join('; ');
    throw new RestoredBackendError(
      `the restored backend ${dbPath} failed the consistency check (${result.problemCount} problem(s): ${shown}); ` +
        'the data dir was left as it was',
    );
  }
}
