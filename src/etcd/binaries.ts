import { EtcdbrError } from '../errors.js';
import { execFile } from 'node:child_process';
import { statSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export interface EtcdBinaries {
  etcd: string;
  etcdctl?: string;
  /** Present from etcd 3.5 on; base restore goes through it there. */
  etcdutl?: string;
  /** e.g. "3.4.23" */
  version: string;
}

function isFile(p: string): boolean {
  try {
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

function which(name: string, path: string): string | undefined {
  for (const dir of path.split(delimiter)) {
    if (dir && isFile(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

/**
 * Finds etcd (and etcdctl/etcdutl beside it or on PATH). `etcdBin` wins when given (ETCD_BIN);
 * the caller passes PATH so library code does not read the environment itself.
 */
export async function findEtcdBinaries(opts: { etcdBin?: string; path: string }): Promise<EtcdBinaries> {
  const etcd = opts.etcdBin ?? which('etcd', opts.path);
  if (!etcd || !isFile(etcd)) {
    throw new EtcdbrError(
      'E_INVALID_INPUT',
      `etcd binary not found${opts.etcdBin ? ` at ${opts.etcdBin}` : ' on PATH'}: install etcd ` +
        '(Debian/Ubuntu: apt-get install etcd-server etcd-client) or set ETCD_BIN',
    );
  }
  const near = (name: string) => {
    const sibling = join(dirname(etcd), name);
    return isFile(sibling) ? sibling : which(name, opts.path);
  };
  const { stdout } = await execFileAsync(etcd, ['--version']);
  const match = /etcd Version:\s*(\S+)/.exec(stdout);
  if (!match?.[1]) throw new EtcdbrError('E_FAILED', `cannot read the version of ${etcd} from: ${stdout.trim()}`);
  const result: EtcdBinaries = { etcd, version: match[1] };
  const etcdctl = near('etcdctl');
  const etcdutl = near('etcdutl');
  if (etcdctl) result.etcdctl = etcdctl;
  if (etcdutl) result.etcdutl = etcdutl;
  return result;
}

/** [major, minor] of a version string like "3.5.17". */
export function etcdMinorVersion(version: string): [number, number] {
  const [major = 0, minor = 0] = version.split('.').map((n) => Number.parseInt(n, 10));
  return [major, minor];
}
