/**
 * Stores of the providers without a cloud here, each on the real server or fake that the snapstore's own
 * tests use, and configured for bin/etcdbrctl exactly as a user would: flags plus credential files or
 * environment. Swift: a Swift all-in-one behind a fake Keystone; OSS: the fake of the OSS API (in this
 * process, reached by the CLI over loopback); ECS and OCS: s3rver.
 *
 * A target gives its flags and environment for any role, so the same store can be a copy source
 * (`--source-*`, `SOURCE_*`) or a destination, and opens the same store in the test's process (through the
 * snapstore API, configured from the same flags and environment) to look at it without a CLI process.
 *
 * The Swift all-in-one is the expensive part (Python servers; tens of seconds on a loaded machine), so one
 * is shared by all the Swift targets of a test file (TargetServers); each target gets its own container and
 * its own fake Keystone, whose password it can change without disturbing the others.
 */
import { mkdir, rename, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openSnapStore, type SnapStore } from '@etcdbrctl/snapstore';
import { buildStoreConfig } from '../../src/config/store.js';
import { startFakeKeystone, type FakeKeystone } from '../../snapstore/test/support/fake-keystone.js';
import { FAKE_OSS_ACCESS_KEY_ID, FAKE_OSS_ACCESS_KEY_SECRET, startFakeOss, type FakeOss } from '../../snapstore/test/support/fake-oss.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from '../../snapstore/test/support/s3rver.js';
import { startSwiftAio, type SwiftAio } from '../../snapstore/test/support/swift-aio.js';

export type RoundTripProvider = 'Swift' | 'OSS' | 'ECS' | 'OCS';

/** '' for the primary store, 'SOURCE_' for the copy source. */
export type TargetRole = '' | 'SOURCE_';

export interface ProviderTarget {
  provider: RoundTripProvider;
  /** `--storage-provider=…`, `--store-container=…`, `--store-prefix=…` (with `--source-` for the source). */
  flags(role: TargetRole): string[];
  /** Credential variables, prefixed for the role. */
  env(role: TargetRole): NodeJS.ProcessEnv;
  /** The store in this process, from the same flags and the credential files as they are now. */
  open(): Promise<SnapStore>;
  /**
   * Swift and OSS: the server starts accepting new credentials only and refuses the old ones, and the
   * credentials are replaced at once: Swift's JSON file is written aside and renamed over the old one; OSS's
   * directory is a Secret mounted the kubelet's way, whose `..data` link swaps to a new version.
   */
  rotateCredentials?(): Promise<void>;
  /** Stops the servers the target started (not the shared Swift all-in-one). */
  stop(): Promise<void>;
}

export interface SwiftTarget extends ProviderTarget {
  provider: 'Swift';
  swift: SwiftAio;
  container: string;
  keystone: FakeKeystone;
}

export interface OssTarget extends ProviderTarget {
  provider: 'OSS';
  oss: FakeOss;
}

/** `--store-prefix`; the objects live under `<PREFIX>/v2/`. */
export const STORE_PREFIX = 'etcd-main';
const MiB = 1024 * 1024;
let containers = 0;
/** The Keystone project of every Swift target: the all-in-one's account is `AUTH_<project>`. */
const SWIFT_PROJECT = 'etcd';

/** The servers a test file's targets share: one Swift all-in-one, started on first use. */
export class TargetServers {
  private swift: Promise<SwiftAio> | undefined;

  swiftAio(): Promise<SwiftAio> {
    this.swift ??= startSwiftAio(SWIFT_PROJECT);
    return this.swift;
  }

  /**
   * Starts the all-in-one now without waiting for it, so its start-up overlaps the tests that do not need
   * it; a failure to start reaches the first Swift target.
   */
  warmUpSwift(): void {
    this.swiftAio().catch(() => undefined);
  }

  async stop(): Promise<void> {
    const swift = await this.swift?.catch(() => undefined);
    this.swift = undefined;
    await swift?.stop();
  }
}

function storeFlags(role: TargetRole, provider: string, container: string): string[] {
  const p = role === 'SOURCE_' ? '--source-' : '--';
  return [`${p}storage-provider=${provider}`, `${p}store-container=${container}`, `${p}store-prefix=${STORE_PREFIX}`];
}

/** Writes beside `file`, then renames over it: the new file and its new mtime appear at once. */
async function replaceFile(file: string, content: string): Promise<void> {
  await writeFile(`${file}.new`, content);
  await rename(`${file}.new`, file);
}

/** The target's store opened in this process exactly as the CLI builds it from flags and environment. */
async function openAs(provider: RoundTripProvider, container: string, env: NodeJS.ProcessEnv, dir: string): Promise<SnapStore> {
  const config = await buildStoreConfig(
    {
      provider,
      container,
      endpointOverride: '',
      prefix: STORE_PREFIX,
      tempDir: dir,
      maxParallelChunkUploads: 5,
      minChunkSize: 5 * MiB,
    },
    { role: 'primary', env, homeDir: dir, createTempDir: false },
  );
  if (!config) throw new Error(`no store config for ${provider}`);
  return openSnapStore(config);
}

async function swiftTarget(dir: string, servers: TargetServers): Promise<SwiftTarget> {
  const project = SWIFT_PROJECT;
  const swift = await servers.swiftAio();
  const container = `backups-${++containers}`;
  await swift.createContainer(container);
  const user = { domain: 'Default', project, username: 'backup', password: 'backup-s3cret' };
  const keystone = await startFakeKeystone({ swiftProxy: swift.proxy, user });
  // The credentials file of a Gardener secret: Keystone URL, domain, project and a user.
  const file = join(dir, `openstack-${container}.json`);
  const credentials = (password: string) =>
    JSON.stringify({ authURL: keystone.authURL, domainName: user.domain, tenantName: project, username: user.username, password });
  await writeFile(file, credentials(user.password));
  const env = (role: TargetRole) => ({ [`${role}OPENSTACK_APPLICATION_CREDENTIALS_JSON`]: file });
  let rotations = 0;
  return {
    provider: 'Swift',
    swift,
    container,
    keystone,
    flags: (role) => storeFlags(role, 'Swift', container),
    env,
    open: () => openAs('Swift', container, env(''), dir),
    async rotateCredentials() {
      const password = `backup-s3cret-rotated-${++rotations}`;
      keystone.changePassword(password);
      await replaceFile(file, credentials(password));
    },
    stop: () => keystone.stop(),
  };
}

async function ecsTarget(dir: string): Promise<ProviderTarget> {
  const container = 'backups';
  const s3 = await startS3rver({ bucket: container });
  // ECS reads its environment only; an endpoint without scheme plus ECS_DISABLE_SSL means http.
  const host = s3.endpoint.replace(/^http:\/\//, '');
  const env = (role: TargetRole) => ({
    [`${role}ECS_ENDPOINT`]: host,
    [`${role}ECS_ACCESS_KEY_ID`]: S3RVER_ACCESS_KEY,
    [`${role}ECS_SECRET_ACCESS_KEY`]: S3RVER_SECRET_KEY,
    [`${role}ECS_DISABLE_SSL`]: 'true',
  });
  return {
    provider: 'ECS',
    flags: (role) => storeFlags(role, 'ECS', container),
    env,
    open: () => openAs('ECS', container, env(''), dir),
    stop: () => s3.stop(),
  };
}

async function ocsTarget(dir: string): Promise<ProviderTarget> {
  const container = 'backups';
  const s3 = await startS3rver({ bucket: container });
  // The directory form of the secret: one file per key, as Kubernetes mounts it.
  const creds = join(dir, `ocs-credentials-${++containers}`);
  await mkdir(creds, { recursive: true });
  const values = {
    endpoint: s3.endpoint,
    region: 'eu-1',
    accessKeyID: S3RVER_ACCESS_KEY,
    secretAccessKey: S3RVER_SECRET_KEY,
    disableSSL: 'true',
  };
  for (const [k, v] of Object.entries(values)) await writeFile(join(creds, k), `${v}\n`);
  const env = (role: TargetRole) => ({ [`${role}OPENSHIFT_APPLICATION_CREDENTIALS`]: creds });
  return {
    provider: 'OCS',
    flags: (role) => storeFlags(role, 'OCS', container),
    env,
    open: () => openAs('OCS', container, env(''), dir),
    stop: () => s3.stop(),
  };
}

async function ossTarget(dir: string): Promise<OssTarget> {
  const container = 'backups';
  const oss = await startFakeOss({ bucket: container });
  const secret = await mountedSecret(join(dir, `alicloud-${++containers}`), {
    storageEndpoint: oss.endpoint,
    accessKeyID: FAKE_OSS_ACCESS_KEY_ID,
    accessKeySecret: FAKE_OSS_ACCESS_KEY_SECRET,
  });
  const env = (role: TargetRole) => ({ [`${role}ALICLOUD_APPLICATION_CREDENTIALS`]: secret.dir });
  let rotations = 0;
  return {
    provider: 'OSS',
    oss,
    flags: (role) => storeFlags(role, 'OSS', container),
    env,
    open: () => openAs('OSS', container, env(''), dir),
    async rotateCredentials() {
      const id = `LTAI-rotated-${++rotations}`;
      const key = `rotated-secret-${rotations}`;
      oss.rotateAccessKey(id, key);
      await secret.update({ storageEndpoint: oss.endpoint, accessKeyID: id, accessKeySecret: key });
    },
    stop: () => oss.stop(),
  };
}

/**
 * A directory of credential files laid out as the kubelet mounts a Secret: the files live in a versioned
 * directory, `..data` links to it and every key is a link through `..data`; an update writes a new
 * version and swaps `..data` in one rename, so the key files change all at once.
 */
async function mountedSecret(
  dir: string,
  values: Record<string, string>,
): Promise<{ dir: string; update(values: Record<string, string>): Promise<void> }> {
  let version = 0;
  const publish = async (v: Record<string, string>): Promise<void> => {
    const versioned = `..${++version}`;
    await mkdir(join(dir, versioned));
    for (const [k, value] of Object.entries(v)) await writeFile(join(dir, versioned, k), value);
    await symlink(versioned, join(dir, '..data_tmp'));
    await rename(join(dir, '..data_tmp'), join(dir, '..data'));
  };
  await mkdir(dir, { recursive: true });
  await publish(values);
  for (const k of Object.keys(values)) await symlink(join('..data', k), join(dir, k));
  return { dir, update: publish };
}

/** Starts the provider's server (Swift: on the shared all-in-one); `dir` (owned by the caller) holds the credential files. */
export function startTarget(provider: 'Swift', dir: string, servers: TargetServers): Promise<SwiftTarget>;
export function startTarget(provider: 'OSS', dir: string, servers: TargetServers): Promise<OssTarget>;
export function startTarget(provider: RoundTripProvider, dir: string, servers: TargetServers): Promise<ProviderTarget>;
export function startTarget(provider: RoundTripProvider, dir: string, servers: TargetServers): Promise<ProviderTarget> {
  switch (provider) {
    case 'Swift':
      return swiftTarget(dir, servers);
    case 'OSS':
      return ossTarget(dir);
    case 'ECS':
      return ecsTarget(dir);
    case 'OCS':
      return ocsTarget(dir);
  }
}
