/**
 * The snapstore temp dir at initialization (upstream `pkg/initializer/initializer.go`, "temp dir hygiene"):
 * created when missing, and cleared of the upload parts a killed process left there, which nothing else
 * would ever reclaim. Only those: upstream removes everything in the directory (all of it but the directory
 * `/tmp` itself), and pointed at a directory that also held the etcd config or the sidecar's home, it
 * removed them; `/tmp/` with a slash emptied all of /tmp. Which files are ours, and which are left behind, is
 * the snapstore's (spool-files.ts).
 */
import { mkdirParents } from '../dirs.js';
import { removeLeftoverSpoolFiles, type Logger } from '@etcdbrctl/snapstore';
import { EtcdbrError } from '../errors.js';

export interface TempDirPreparation {
  /** Paths removed under no circumstances, nor anything holding them: the data dir, the etcd config, a Local store. */
  keep: readonly string[];
  logger: Logger;
}

/**
 * Creates `dir` (0700) when missing and removes the upload parts in it whose process is gone. The directory
 * itself stays: it is often a volume of its own (an emptyDir, a tmpfs), whose mount point cannot be removed.
 */
export async function prepareSnapstoreTempDir(dir: string, opts: TempDirPreparation): Promise<string[]> {
  try {
    // Not Node's recursive mkdir: on a read-only file system it reports ENOENT (dirs.ts).
    await mkdirParents(dir);
  } catch (err) {
    throw new EtcdbrError(
      'E_FAILED',
      `--snapstore-temp-directory ${dir}: cannot create the snapstore temp directory: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  return removeLeftoverSpoolFiles(dir, { keep: opts.keep, logger: opts.logger });
}
