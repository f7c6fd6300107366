/**
 * Stores of the providers without a cloud here, each on the real server or fake that the snapstore's own
 * tests use, and configured for bin/etcdbrctl exactly as a user would: flags plus credential files or
 * environment. Swift: a Swift all-in-one behind the fake Keystone; OSS: the fake of the OSS API (in this
 * process, reached by the CLI over loopback); ECS and OCS: s3rver.
 *
 * A target gives its flags and environment for any role, so the same store can be a copy source
 * (`--source-*`, `SOURCE_*`) or a destination.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startFakeKeystone } from '../../snapstore/test/support/fake-keystone.js';
import { FAKE_OSS_ACCESS_KEY_ID, FAKE_OSS_ACCESS_KEY_SECRET, startFakeOss } from '../../snapstore/test/support/fake-oss.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from '../../snapstore/test/support/s3rver.js';
import { startSwiftAio } from '../../snapstore/test/support/swift-aio.js';

export type RoundTripProvider = 'Swift' | 'OSS' | 'ECS' | 'OCS';

/** '' for the primary store, 'SOURCE_' for the copy source. */
export type TargetRole = '' | 'SOURCE_';

export interface ProviderTarget {
  provider: RoundTripProvider;
  /** `--storage-provider=…`, `--store-container=…`, `--store-prefix=…` (with `--source-` for the source). */
  flags(role: TargetRole): string[];
  /** Credential variables, prefixed for the role. */
  env(role: TargetRole): NodeJS.ProcessEnv;
  /** Stops the servers the target started. */
  stop(): Promise<void>;
}

const CONTAINER = 'backups';
const PREFIX = 'etcd-main';

function storeFlags(role: TargetRole, provider: string): string[] {
  const p = role === 'SOURCE_' ? '--source-' : '--';
  return [`${p}storage-provider=${provider}`, `${p}store-container=${CONTAINER}`, `${p}store-prefix=${PREFIX}`];
}

async function swiftTarget(dir: string): Promise<ProviderTarget> {
  const project = 'etcd';
  const user = { domain: 'Default', project, username: 'backup', password: 'backup-s3cret' };
  const swift = await startSwiftAio(project);
  try {
    await swift.createContainer(CONTAINER);
    const keystone = await startFakeKeystone({ swiftProxy: swift.proxy, user });
    // The credentials file of a Gardener secret: Keystone URL, domain, project and a user.
    const file = join(dir, 'openstack.json');
    await writeFile(
      file,
      JSON.stringify({
        authURL: keystone.authURL,
        domainName: user.domain,
        tenantName: project,
        username: user.username,
        password: user.password,
      }),
    );
    return {
      provider: 'Swift',
      flags: (role) => storeFlags(role, 'Swift'),
      env: (role) => ({ [`${role}OPENSTACK_APPLICATION_CREDENTIALS_JSON`]: file }),
      async stop() {
        await keystone.stop();
        await swift.stop();
      },
    };
  } catch (err) {
    await swift.stop();
    throw err;
  }
}

async function ecsTarget(): Promise<ProviderTarget> {
  const s3 = await startS3rver({ bucket: CONTAINER });
  // ECS reads its environment only; an endpoint without scheme plus ECS_DISABLE_SSL means http.
  const host = s3.endpoint.replace(/^http:\/\//, '');
  return {
    provider: 'ECS',
    flags: (role) => storeFlags(role, 'ECS'),
    env: (role) => ({
      [`${role}ECS_ENDPOINT`]: host,
      [`${role}ECS_ACCESS_KEY_ID`]: S3RVER_ACCESS_KEY,
      [`${role}ECS_SECRET_ACCESS_KEY`]: S3RVER_SECRET_KEY,
      [`${role}ECS_DISABLE_SSL`]: 'true',
    }),
    stop: () => s3.stop(),
  };
}

async function ocsTarget(dir: string): Promise<ProviderTarget> {
  const s3 = await startS3rver({ bucket: CONTAINER });
  // The directory form of the secret: one file per key, as Kubernetes mounts it.
  const creds = join(dir, 'ocs-credentials');
  await mkdir(creds, { recursive: true });
  const values = {
    endpoint: s3.endpoint,
    region: 'eu-1',
    accessKeyID: S3RVER_ACCESS_KEY,
    secretAccessKey: S3RVER_SECRET_KEY,
    disableSSL: 'true',
  };
  for (const [k, v] of Object.entries(values)) await writeFile(join(creds, k), `${v}\n`);
  return {
    provider: 'OCS',
    flags: (role) => storeFlags(role, 'OCS'),
    env: (role) => ({ [`${role}OPENSHIFT_APPLICATION_CREDENTIALS`]: creds }),
    stop: () => s3.stop(),
  };
}

async function ossTarget(dir: string): Promise<ProviderTarget> {
  const oss = await startFakeOss({ bucket: CONTAINER });
  const file = join(dir, 'alicloud.json');
  await writeFile(
    file,
    JSON.stringify({
      storageEndpoint: oss.endpoint,
      accessKeyID: FAKE_OSS_ACCESS_KEY_ID,
      accessKeySecret: FAKE_OSS_ACCESS_KEY_SECRET,
      bucketName: CONTAINER,
    }),
  );
  return {
    provider: 'OSS',
    flags: (role) => storeFlags(role, 'OSS'),
    env: (role) => ({ [`${role}ALICLOUD_APPLICATION_CREDENTIALS_JSON`]: file }),
    stop: () => oss.stop(),
  };
}

/** Starts the provider's server; `dir` (owned by the caller) holds the credential files. */
export function startTarget(provider: RoundTripProvider, dir: string): Promise<ProviderTarget> {
  switch (provider) {
    case 'Swift':
      return swiftTarget(dir);
    case 'OSS':
      return ossTarget(dir);
    case 'ECS':
      return ecsTarget();
    case 'OCS':
      return ocsTarget(dir);
  }
}
