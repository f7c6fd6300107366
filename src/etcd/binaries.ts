import { EtcdbrError, asError } from '../errors.js';
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
  /**
   * Whether etcdctl/etcdutl were found beside `etcd` (the same release) rather than elsewhere on PATH, where
   * they may belong to another etcd version.
   */
  toolsBesideEtcd?: { etcdctl: boolean; etcdutl: boolean };
  /**
   * `etcd --version`, e.g. "3.4.23": asked on first use and remembered. Lazy because spawning etcd costs
   * a short restore a noticeable share of its time, and most plans never need the answer.
   */
  version: () => Promise<string>;
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
export function findEtcdBinaries(opts: { etcdBin?: string; path: string }): Promise<EtcdBinaries> {
  try {
    return Promise.resolve(locateEtcdBinaries(opts));
  } catch (err) {
    return Promise.reject(asError(err));
  }
}

function locateEtcdBinaries(opts: { etcdBin?: string; path: string }): EtcdBinaries {
  const etcd = opts.etcdBin ?? which('etcd', opts.path);
  if (!etcd || !isFile(etcd)) {
    throw new EtcdbrError(
      'E_INVALID_INPUT',
      `etcd binary not found${opts.etcdBin ? ` at ${opts.etcdBin}` : ' on PATH'}: install etcd ` +
        '(Debian/Ubuntu: apt-get install etcd-server etcd-client) or set ETCD_BIN',
    );
  }
  const beside = (name: string): string | undefined => {
    const sibling = join(dirname(etcd), name);
    return isFile(sibling) ? sibling : undefined;
  };
  let version: Promise<string> | undefined;
  const result: EtcdBinaries = { etcd, version: () => (version ??= etcdVersion(etcd)) };
  const ctlBeside = beside('etcdctl');
  const utlBeside = beside('etcdutl');
  const etcdctl = ctlBeside ?? which('etcdctl', opts.path);
  const etcdutl = utlBeside ?? which('etcdutl', opts.path);
  if (etcdctl) result.etcdctl = etcdctl;
  if (etcdutl) result.etcdutl = etcdutl;
  result.toolsBesideEtcd = { etcdctl: ctlBeside !== undefined, etcdutl: utlBeside !== undefined };
  return result;
}

/** The version `etcd --version` prints, e.g. "3.4.23". */
export async function etcdVersion(etcd: string): Promise<string> {
  const { stdout } = await execFileAsync(etcd, ['--version']);
  const match = /etcd Version:\s*(\S+)/.exec(stdout);
  if (!match?.[1]) throw new EtcdbrError('E_FAILED', `cannot read the version of ${etcd} from: ${stdout.trim()}`);
  return match[1];
}

/** Whether a version string like "3.5.17" is etcd 3.5 or newer. */
export function atLeast35(version: string): boolean {
  const [major, minor] = etcdMinorVersion(version);
  return major > 3 || (major === 3 && minor >= 5);
}

/** [major, minor] of a version string like "3.5.17". */
export function etcdMinorVersion(version: string): [number, number] {
  const [major = 0, minor = 0] = version.split('.').map((n) => Number.parseInt(n, 10));
  return [major, minor];
}
