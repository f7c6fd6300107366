/**
 * The restore's base step (docs/how-it-works.md "How a restore works", Base): the plan's full snapshot becomes the start
 * of the restored data dir through etcd's own `snapshot restore` (`etcdutl` on 3.5+, `etcdctl` on 3.4), which
 * also checks its sha256 trailer.
 */
import { ReadStream, createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createDecompressStream, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { asError, CodedError, errorCode } from '../errors.js';
import { restoreBaseSnapshot, type BaseRestoreOptions } from './base-restore.js';
import { DATA_DIR_FLAG, namingWorkDir, TEMP_DIR_FLAG, WorkDirWriteError, writeRefusalInText } from './work-dirs.js';

/**
 * The base full snapshot could not be restored: its object is corrupt (E_CORRUPT), or etcd's restore refused
 * it (E_FAILED: e.g. its sha256 trailer). Says which, so the caller can point to a chain without it.
 */
export class BaseSnapshotError extends CodedError {
  override readonly name = 'BaseSnapshotError';
  constructor(
    readonly code: 'E_CORRUPT' | 'E_FAILED',
    readonly snapshot: Snapshot,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** What etcd's restore tool is given besides the snapshot file: the member and where its data dir goes. */
export type BaseMember = Omit<BaseRestoreOptions, 'snapshotFile' | 'signal'>;

/**
 * The base's first half: `base` as a local file for etcd's restore tool (see fetchFull), with `scratchDir`
 * for it when it has to be downloaded or decompressed first. A corrupt object is a BaseSnapshotError.
 */
export async function fetchBase(store: SnapStore, base: Snapshot, scratchDir: string, signal: AbortSignal | undefined): Promise<string> {
  try {
    return await fetchFull(store, base, scratchFileOf(scratchDir), signal);
  } catch (err) {
    // Only a corrupt object is the full's fault; an unreachable store or a stop keeps its own error.
    if (errorCode(err) !== 'E_CORRUPT') throw err;
    throw new BaseSnapshotError('E_CORRUPT', base, `full snapshot ${base.snapName} is corrupt: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

/**
 * The base's second half: etcd's restore tool writes `snapshotFile` (from fetchBase) into `member.dataDir`
 * (the restore's `.part`); the scratch copy in `scratchDir` is removed after.
 */
export async function restoreBase(
  base: Snapshot,
  member: BaseMember,
  snapshotFile: string,
  scratchDir: string,
  signal: AbortSignal | undefined,
): Promise<void> {
  try {
    // etcd's restore checks the sha256 trailer itself (unless skipped), as upstream relies on it too:
    // hashing here as well would cost a second pass over the whole database.
    await restoreBaseSnapshot({ ...member, snapshotFile, signal });
  } catch (err) {
    if (signal?.aborted) throw asError(signal.reason);
    // A full disk under the data dir is not the full snapshot's fault (no older chain helps).
    const refusal = writeRefusalInText((err as Error).message);
    if (refusal !== undefined) {
      throw new WorkDirWriteError(
        refusal,
        member.dataDir,
        DATA_DIR_FLAG,
        `cannot write ${member.dataDir} (${DATA_DIR_FLAG}: the restore builds the data dir there, beside it): ${(err as Error).message}`,
        { cause: err },
      );
    }
    throw new BaseSnapshotError('E_FAILED', base, `restoring full snapshot ${base.snapName} failed: ${(err as Error).message}`, {
      cause: err,
    });
  }
  await rm(scratchFileOf(scratchDir), { force: true });
}

function scratchFileOf(scratchDir: string): string {
  return join(scratchDir, 'snapshot.db');
}

/**
 * The full snapshot as a local file for etcd's restore. An uncompressed object that the store serves
 * straight from a local file (Local provider) is used in place, with no copy; anything else is
 * downloaded and decompressed into `file`.
 */
async function fetchFull(store: SnapStore, snap: Snapshot, file: string, signal?: AbortSignal): Promise<string> {
  const raw = await store.fetch(snap, undefined, signal ? { signal } : {});
  if (snap.compressionSuffix === '' && raw instanceof ReadStream && typeof raw.path === 'string') {
    const inPlace = raw.path;
    raw.destroy();
    return inPlace;
  }
  const decompress = createDecompressStream(snap.compressionSuffix, snap.snapName);
  const out = createWriteStream(file, { mode: 0o600, highWaterMark: 1 << 20 });
  let writeFailure: unknown;
  out.once('error', (err) => (writeFailure = err));
  try {
    await pipeline(raw, decompress, out, signal ? { signal } : {});
  } catch (err) {
    // Only the file's own failure is about the temp dir; the store's and the payload's keep their errors.
    if (err !== writeFailure) throw err;
    throw namingWorkDir(err, `full snapshot ${snap.snapName}`, file, TEMP_DIR_FLAG);
  }
  return file;
}
