import { asError, EtcdbrError } from '../errors.js';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { type EtcdBinaries, atLeast35 } from '../etcd/index.js';

const execFileAsync = promisify(execFile);

export interface BaseRestoreOptions {
  binaries: EtcdBinaries;
  /** The full snapshot payload (bbolt db ‖ sha256) on local disk. */
  snapshotFile: string;
  /** Must not exist or be empty: etcd refuses to restore into a non-empty dir. */
  dataDir: string;
  name: string;
  initialCluster: string;
  initialClusterToken: string;
  initialAdvertisePeerUrls: string[];
  skipHashCheck: boolean;
  /** Kills the restore tool and rejects with the signal's reason when aborted. */
  signal?: AbortSignal | undefined;
}

/**
 * etcd's own restore of a snapshot file into a fresh data dir: it checks the sha256 trailer, drops the
 * old membership and writes a new one from the initial-cluster flags (upstream calls the same code as a
 * library). etcd 3.5+ has it in etcdutl; 3.4 only in etcdctl.
 */
export async function restoreBaseSnapshot(opts: BaseRestoreOptions): Promise<void> {
  const tool = await restoreTool(opts.binaries);
  if (!tool) {
    throw new EtcdbrError(
      'E_INVALID_INPUT',
      `cannot restore a snapshot: neither etcdutl nor etcdctl was found next to ${opts.binaries.etcd} or on PATH`,
    );
  }
  const args = [
    'snapshot',
    'restore',
    opts.snapshotFile,
    `--data-dir=${opts.dataDir}`,
    `--name=${opts.name}`,
    `--initial-cluster=${opts.initialCluster}`,
    `--initial-cluster-token=${opts.initialClusterToken}`,
    `--initial-advertise-peer-urls=${opts.initialAdvertisePeerUrls.join(',')}`,
  ];
  if (opts.skipHashCheck) args.push('--skip-hash-check=true');
  try {
    await execFileAsync(tool, args, {
      env: { ...process.env, ETCDCTL_API: '3' },
      maxBuffer: 16 * 1024 * 1024,
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
  } catch (err) {
    if (opts.signal?.aborted) throw asError(opts.signal.reason);
    const e = err as { stderr?: string; message: string };
    // etcd's own info-level JSON log lines say nothing about the failure; keep the rest.
    const lines = (e.stderr ?? '')
      .trim()
      .split('\n')
      .filter((l) => !/^\{"level":"(debug|info)"/.test(l));
    const detail = hexByteLists(lines.slice(-5).join('\n') || e.message);
    throw new EtcdbrError('E_FAILED', `${tool} snapshot restore of ${opts.snapshotFile} into ${opts.dataDir} failed: ${detail}`, {
      cause: err,
    });
  }
}

/**
 * etcd prints the hashes of its sha256 check as Go byte slices (`expected sha256 [12 183 …], got [...]`);
 * every other message of ours, `verify`'s included, shows a hash in hex. A list of 32 numbers below 256 is
 * such a hash: it becomes hex, the rest of the text stays as etcd wrote it.
 */
export function hexByteLists(text: string): string {
  return text.replace(/\[(\d{1,3}(?: \d{1,3}){31})\]/g, (whole, list: string) => {
    const bytes = list.split(' ').map(Number);
    return bytes.every((b) => b < 256) ? Buffer.from(bytes).toString('hex') : whole;
  });
}

/**
 * Which binary restores: the one shipped beside etcd when there is one (etcdutl exists from 3.5 on, and
 * 3.6's etcdctl no longer restores, so a sibling etcdutl wins; a sibling etcdctl without an etcdutl means
 * 3.4 or a 3.5 whose etcdctl still restores). Only tools found elsewhere on PATH, whose release may differ
 * from etcd's, make us ask etcd for its version, as before.
 */
export async function restoreTool(binaries: EtcdBinaries): Promise<string | undefined> {
  const beside = binaries.toolsBesideEtcd;
  if (beside?.etcdutl) return binaries.etcdutl;
  if (beside?.etcdctl) return binaries.etcdctl;
  if (binaries.etcdutl !== undefined && atLeast35(await binaries.version())) return binaries.etcdutl;
  return binaries.etcdctl;
}
