/**
 * From the snapstore flag group plus the environment to the snapstore package's resolved `StoreConfig`
 * (container fallback, effective prefix, Local root, credentials). The environment and home directory
 * are passed in; this module never reads process.env.
 */
import path from 'node:path';
import {
  readAbsCredentials,
  readEcsCredentials,
  readGcsCredentials,
  readOcsCredentials,
  readOssCredentials,
  readS3Credentials,
  readSwiftCredentials,
  SnapStoreError,
} from '@etcdbrctl/snapstore';
import type { CredentialEnv, CredentialEnvPrefix, Logger, StoreConfig, StoreConfigBase } from '@etcdbrctl/snapstore';
import { mkdirParents } from '../dirs.js';
import { encryptionFiles, readEncryptionKeys } from './encryption.js';
import { providerError } from './groups/snapstore.js';
import type { EncryptionConfig, SnapstoreConfig, StoreRole } from './types.js';

export type { StoreRole } from './types.js';

export const STORE_ENV_PREFIX: Readonly<Record<StoreRole, CredentialEnvPrefix>> = {
  primary: '',
  source: 'SOURCE_',
  secondary: 'SECONDARY_',
};

const FLAG_PREFIX: Readonly<Record<StoreRole, string>> = { primary: '', source: 'source-', secondary: 'secondary-' };

/** Upstream's Local container when none is given. */
export const DEFAULT_LOCAL_CONTAINER = 'default.bkp';

/**
 * The base of a relative Local container, as the Go tool finds it: `os.UserHomeDir()` on Linux is `$HOME`
 * when it is set and not empty, and an error ("$HOME is not defined") otherwise; it never looks at the
 * password database. Which directory that is for which user is the container runtime's part: runc, crun
 * and podman set HOME from the image's /etc/passwd entry of the user the container runs as (`/root` for
 * uid 0, `/home/nonroot` for 65532) unless the image or the pod sets HOME, and `/` for a uid without an
 * entry. So the image must not set HOME (Dockerfile), and we read it as Go does.
 */
export function userHomeDir(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const home = env['HOME'];
  return home === undefined || home === '' ? undefined : home;
}

export interface StoreBuildOptions {
  role: StoreRole;
  env: CredentialEnv;
  /**
   * Base of relative Local containers: `userHomeDir(env)`, as upstream. Undefined when HOME is not set; a
   * relative Local container is then an error, as it is for the Go tool.
   */
  homeDir: string | undefined;
  logger?: Logger;
  /** Create `tempDir` (0700) when missing, as upstream does; default true. */
  createTempDir?: boolean;
  /** `--encryption-*`; the environment fills in what is not given. */
  encryption?: EncryptionConfig;
}

/**
 * Besides the data dir, what clearing `--snapstore-temp-directory` at initialization must never touch, even
 * where the directory holds it: the etcd config (ETCD_CONF) and a Local store.
 */
export function pathsTheTempDirKeeps(etcdConfigPath: string, store: StoreConfig): string[] {
  return [etcdConfigPath, ...(store.provider === 'Local' ? [store.rootDir] : [])];
}

/** upstream `path.Join(--store-prefix, "v2")`. */
export function effectivePrefix(storePrefix: string): string {
  return path.posix.join(storePrefix, 'v2');
}

/**
 * Builds the resolved store config, or undefined when no provider is given (the server then runs without
 * backups). Throws SnapStoreError E_CONFIG for an unknown provider or a missing container, and
 * E_CREDENTIALS for credential problems.
 */
export async function buildStoreConfig(flags: SnapstoreConfig, opts: StoreBuildOptions): Promise<StoreConfig | undefined> {
  const provider = flags.provider;
  if (provider === '') return undefined;
  const flagPrefix = FLAG_PREFIX[opts.role];
  const pErr = providerError(provider);
  if (pErr !== undefined) throw new SnapStoreError('E_CONFIG', `--${flagPrefix}storage-provider: ${pErr}`);

  const envPrefix = STORE_ENV_PREFIX[opts.role];
  const containerVar = `${envPrefix}STORAGE_CONTAINER`;
  let container = flags.container !== '' ? flags.container : (opts.env[containerVar] ?? '');

  if (opts.createTempDir !== false && flags.tempDir !== '') {
    try {
      // Not Node's recursive mkdir: on a read-only file system it reports ENOENT (dirs.ts).
      await mkdirParents(flags.tempDir);
    } catch (err) {
      throw new SnapStoreError(
        'E_CONFIG',
        `--${flagPrefix}snapstore-temp-directory: cannot create ${flags.tempDir}: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
  }

  const base: StoreConfigBase = {
    container,
    prefix: effectivePrefix(flags.prefix),
    maxParallelChunkUploads: flags.maxParallelChunkUploads,
    minChunkSize: flags.minChunkSize,
    tempDir: flags.tempDir,
  };
  if (flags.endpointOverride !== '') base.endpointOverride = flags.endpointOverride;
  if (flagPrefix !== '') base.flagPrefix = flagPrefix;
  if (opts.logger !== undefined) base.logger = opts.logger;
  const encryption = await readEncryptionKeys(encryptionFiles(opts.encryption, opts.env, opts.role));
  if (encryption !== undefined) base.encryption = encryption;

  if (provider === 'Local') {
    if (container === '' && opts.role === 'source') {
      // Upstream would read $HOME/default.bkp: a copy that names no source must not copy from a guess.
      throw new SnapStoreError(
        'E_CONFIG',
        `no source store given: set --source-store-container (or the environment variable ${containerVar}), and --source-storage-provider when the source is not ${provider} like the destination`,
      );
    }
    const named = flags.container !== '' ? `--${flagPrefix}store-container` : container !== '' ? containerVar : undefined;
    if (container === '') container = DEFAULT_LOCAL_CONTAINER;
    // Deliberate difference: upstream always uses $HOME/<container>; an absolute container is used as is.
    if (path.isAbsolute(container)) return { ...base, container, provider: 'Local', rootDir: container };
    if (opts.homeDir === undefined) {
      // Go fails here too ("$HOME is not defined"). A guess (the password database's home, the working
      // directory) would open an empty store where the backups are not, and an initializer would then start
      // a fresh member instead of restoring.
      const what = named === undefined ? `the default Local container ${DEFAULT_LOCAL_CONTAINER}` : `${named} ${JSON.stringify(container)}`;
      throw new SnapStoreError(
        'E_CONFIG',
        `${what} is relative to the home directory, but HOME is not set or empty: set HOME (the Go etcdbrctl fails without it too), or give an absolute --${flagPrefix}store-container`,
      );
    }
    return { ...base, container, provider: 'Local', rootDir: path.join(opts.homeDir, container) };
  }
  if (container === '') {
    throw new SnapStoreError(
      'E_CONFIG',
      `storage container name not specified: set --${flagPrefix}store-container or the environment variable ${containerVar}`,
    );
  }
  switch (provider) {
    case 'S3': {
      const credentials = await readS3Credentials(opts.env, envPrefix);
      return credentials === undefined ? { ...base, provider: 'S3' } : { ...base, provider: 'S3', credentials };
    }
    case 'ABS':
      return { ...base, provider: 'ABS', credentials: await readAbsCredentials(opts.env, envPrefix) };
    case 'GCS': {
      const credentials = await readGcsCredentials(opts.env, envPrefix);
      return credentials === undefined ? { ...base, provider: 'GCS' } : { ...base, provider: 'GCS', credentials };
    }
    case 'Swift':
      return { ...base, provider: 'Swift', credentials: await readSwiftCredentials(opts.env, envPrefix) };
    case 'OSS':
      return { ...base, provider: 'OSS', credentials: await readOssCredentials(opts.env, envPrefix) };
    case 'ECS':
      return { ...base, provider: 'ECS', credentials: readEcsCredentials(opts.env, envPrefix) };
    case 'OCS':
      return { ...base, provider: 'OCS', credentials: await readOcsCredentials(opts.env, envPrefix) };
    default:
      throw new SnapStoreError('E_CONFIG', `--${flagPrefix}storage-provider: unknown storage provider ${JSON.stringify(provider)}`);
  }
}

/**
 * Where a store looks, for messages: `Local store /var/backups/etcd-main/v2` or `S3 container my-bucket,
 * prefix etcd-main/v2`. The listing also covers the v1 layout beside the `v2` folder.
 */
export function storeLocation(config: StoreConfig): string {
  if (config.provider === 'Local') return `Local store ${path.join(config.rootDir, config.prefix)}`;
  return `${config.provider} container ${config.container}, prefix ${config.prefix}`;
}
