/**
 * Version information for `etcdbrctl --version` and the start-up log line (upstream `printVersionInfo`).
 */
import { readFileSync } from 'node:fs';

export interface VersionInfo {
  /** package.json version. */
  version: string;
  /** Commit the build came from, when known. */
  gitSha?: string;
  nodeVersion: string;
  os: string;
  arch: string;
}

function readText(url: URL): string | undefined {
  try {
    return readFileSync(url, 'utf8');
  } catch {
    return undefined;
  }
}

/** `../package.json` resolves to the project root both from `src/` and from the built `dist/`. */
export function packageVersion(): string {
  const text = readText(new URL('../package.json', import.meta.url));
  if (text === undefined) return 'unknown';
  try {
    const v = (JSON.parse(text) as { version?: unknown }).version;
    return typeof v === 'string' ? v : 'unknown';
  } catch {
    return 'unknown';
  }
}

/** The checked-out commit, read from `.git` without running git (a checkout or an image with .git). */
function gitShaFromCheckout(): string | undefined {
  const head = readText(new URL('../.git/HEAD', import.meta.url))?.trim();
  if (head === undefined) return undefined;
  if (/^[0-9a-f]{40}$/.test(head)) return head;
  const ref = /^ref: (\S+)$/.exec(head)?.[1];
  if (ref === undefined) return undefined;
  const loose = readText(new URL(`../.git/${ref}`, import.meta.url))?.trim();
  if (loose !== undefined && /^[0-9a-f]{40}$/.test(loose)) return loose;
  const packed = readText(new URL('../.git/packed-refs', import.meta.url));
  const line = packed?.split('\n').find((l) => l.endsWith(` ${ref}`));
  return line?.slice(0, 40);
}

/**
 * `gitSha` comes from `ETCDBRCTL_GIT_SHA` in the passed environment (set by image builds), else from the
 * checkout's `.git`.
 */
export function versionInfo(env: Readonly<Record<string, string | undefined>> = {}): VersionInfo {
  const info: VersionInfo = {
    version: packageVersion(),
    nodeVersion: process.version,
    os: process.platform,
    arch: process.arch,
  };
  const sha = env['ETCDBRCTL_GIT_SHA'] ?? gitShaFromCheckout();
  if (sha !== undefined && sha !== '') info.gitSha = sha;
  return info;
}

/** The lines `etcdbrctl --version` prints. */
export function formatVersionInfo(info: VersionInfo): string[] {
  return [
    `etcdbrctl Version: ${info.version}`,
    `Git SHA: ${info.gitSha ?? 'unknown'}`,
    `Node Version: ${info.nodeVersion}`,
    `OS/Arch: ${info.os}/${info.arch}`,
  ];
}
