import { mkdirSync, mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isSnapStoreError } from '@etcdbrctl/snapstore';
import { beforeEach, describe, expect, it } from 'vitest';
import { commandFlagSet } from '../../src/cli/help.js';
import { buildCommandConfig } from '../../src/config/build.js';
import { COMMAND_SPECS } from '../../src/config/commands.js';
import { buildStoreConfig, effectivePrefix, userHomeDir } from '../../src/config/store.js';
import type { SnapstoreConfig } from '../../src/config/types.js';

let tmp: string;
beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'etcdbr-store-'));
});

function flags(overrides: Partial<SnapstoreConfig> = {}): SnapstoreConfig {
  return {
    provider: 'Local',
    container: '',
    endpointOverride: '',
    prefix: '',
    tempDir: tmp,
    maxParallelChunkUploads: 5,
    minChunkSize: 5 * 1024 * 1024,
    ...overrides,
  };
}

async function configError(p: Promise<unknown>, code: 'E_CONFIG' | 'E_CREDENTIALS'): Promise<string> {
  try {
    await p;
  } catch (err) {
    expect(isSnapStoreError(err, code), String(err)).toBe(true);
    return (err as Error).message;
  }
  throw new Error('expected an error');
}

describe('effective prefix', () => {
  it.each([
    ['', 'v2'],
    ['etcd-main', 'etcd-main/v2'],
    ['a/b/', 'a/b/v2'],
    ['shoot--p--c/etcd-main', 'shoot--p--c/etcd-main/v2'],
  ])('%j -> %j', (prefix, expected) => {
    expect(effectivePrefix(prefix)).toBe(expected);
  });
});

describe('buildStoreConfig', () => {
  it('returns undefined without a provider (no store)', async () => {
    expect(await buildStoreConfig(flags({ provider: '' }), { role: 'primary', env: {}, homeDir: '/home/u' })).toBeUndefined();
  });

  it('places a relative Local container under the home directory, default default.bkp', async () => {
    expect(await buildStoreConfig(flags(), { role: 'primary', env: {}, homeDir: '/home/u' })).toEqual({
      provider: 'Local',
      container: 'default.bkp',
      rootDir: '/home/u/default.bkp',
      prefix: 'v2',
      maxParallelChunkUploads: 5,
      minChunkSize: 5 * 1024 * 1024,
      tempDir: tmp,
    });
    const rel = await buildStoreConfig(flags({ container: 'backups/x', prefix: 'etcd-main' }), {
      role: 'primary',
      env: {},
      homeDir: '/home/u',
    });
    expect(rel).toMatchObject({ rootDir: '/home/u/backups/x', prefix: 'etcd-main/v2' });
  });

  it('uses an absolute Local container as it is (our difference), also without a home directory', async () => {
    const c = await buildStoreConfig(flags({ container: '/var/backups' }), { role: 'primary', env: {}, homeDir: '/home/u' });
    expect(c).toMatchObject({ provider: 'Local', rootDir: '/var/backups', container: '/var/backups' });
    const homeless = await buildStoreConfig(flags({ container: '/var/backups' }), { role: 'primary', env: {}, homeDir: undefined });
    expect(homeless).toMatchObject({ provider: 'Local', rootDir: '/var/backups' });
  });

  it('refuses a relative Local container without a home directory, as Go does, naming where the container came from', async () => {
    const opts = (role: 'primary' | 'secondary', env: Record<string, string> = {}) => ({ role, env, homeDir: undefined });
    expect(await configError(buildStoreConfig(flags({ container: 'bucket' }), opts('primary')), 'E_CONFIG')).toBe(
      '--store-container "bucket" is relative to the home directory, but HOME is not set or empty: set HOME (the Go etcdbrctl fails without it too), or give an absolute --store-container',
    );
    expect(await configError(buildStoreConfig(flags(), opts('primary')), 'E_CONFIG')).toMatch(
      /^the default Local container default\.bkp is relative to the home directory, but HOME is not set or empty: /,
    );
    expect(await configError(buildStoreConfig(flags(), opts('secondary', { SECONDARY_STORAGE_CONTAINER: 'b2' })), 'E_CONFIG')).toMatch(
      /^SECONDARY_STORAGE_CONTAINER "b2" is relative .* or give an absolute --secondary-store-container$/,
    );
  });

  it.each([
    [{ HOME: '/root' }, '/root'],
    [{ HOME: '/home/nonroot' }, '/home/nonroot'],
    [{ HOME: '/' }, '/'],
    [{ HOME: '' }, undefined],
    [{}, undefined],
  ])('userHomeDir(%j) is %j, as Go os.UserHomeDir reads it', (env, expected) => {
    expect(userHomeDir(env)).toBe(expected);
  });

  it('joins the container under HOME as Go path.Join does (HOME=/ for a uid without a passwd entry)', async () => {
    expect(await buildStoreConfig(flags({ container: 'bucket' }), { role: 'primary', env: {}, homeDir: '/' })).toMatchObject({
      rootDir: '/bucket',
    });
    expect(await buildStoreConfig(flags({ container: './a/../bucket' }), { role: 'primary', env: {}, homeDir: '/root/' })).toMatchObject({
      rootDir: '/root/bucket',
    });
  });

  it.each([
    ['primary', 'STORAGE_CONTAINER'],
    ['source', 'SOURCE_STORAGE_CONTAINER'],
    ['secondary', 'SECONDARY_STORAGE_CONTAINER'],
  ] as const)('falls back to the container variable for the %s store', async (role, variable) => {
    const env = { STORAGE_CONTAINER: 'wrong', [variable]: 'from-env' };
    const c = await buildStoreConfig(flags({ provider: 'S3' }), { role, env, homeDir: '/h' });
    expect(c?.container).toBe('from-env');
    const explicit = await buildStoreConfig(flags({ provider: 'S3', container: 'flag' }), { role, env, homeDir: '/h' });
    expect(explicit?.container).toBe('flag');
  });

  it('requires a container for cloud providers, naming the flag and the variable', async () => {
    expect(await configError(buildStoreConfig(flags({ provider: 'GCS' }), { role: 'source', env: {}, homeDir: '/h' }), 'E_CONFIG')).toBe(
      'storage container name not specified: set --source-store-container or the environment variable SOURCE_STORAGE_CONTAINER',
    );
  });

  it('rejects unknown and upstream-only providers', async () => {
    expect(
      await configError(buildStoreConfig(flags({ provider: 'FAILED' }), { role: 'primary', env: {}, homeDir: '/h' }), 'E_CONFIG'),
    ).toMatch(
      /--storage-provider: storage provider "FAILED" is supported by etcd-backup-restore but not by this implementation; supported providers: Local, S3, ABS, GCS, Swift, OSS, ECS, OCS/,
    );
    expect(
      await configError(buildStoreConfig(flags({ provider: 'Azure' }), { role: 'secondary', env: {}, homeDir: '/h' }), 'E_CONFIG'),
    ).toMatch(/--secondary-storage-provider: unknown storage provider "Azure"/);
  });

  it('reads S3 credentials with the role’s prefix, and keeps the endpoint override', async () => {
    const p = join(tmp, 'aws.json');
    writeFileSync(p, JSON.stringify({ accessKeyID: 'A', secretAccessKey: 'S', region: 'r' }));
    const c = await buildStoreConfig(flags({ provider: 'S3', container: 'b', endpointOverride: 'http://localhost:4566' }), {
      role: 'source',
      env: { SOURCE_AWS_APPLICATION_CREDENTIALS_JSON: p },
      homeDir: '/h',
    });
    expect(c).toMatchObject({
      provider: 'S3',
      container: 'b',
      endpointOverride: 'http://localhost:4566',
      credentials: { accessKeyID: 'A', secretAccessKey: 'S', region: 'r' },
    });
    const noCreds = await buildStoreConfig(flags({ provider: 'S3', container: 'b' }), { role: 'primary', env: {}, homeDir: '/h' });
    expect(noCreds).not.toHaveProperty('credentials');
  });

  it('fails for ABS without credentials and reads them when given', async () => {
    expect(
      await configError(
        buildStoreConfig(flags({ provider: 'ABS', container: 'c' }), { role: 'primary', env: {}, homeDir: '/h' }),
        'E_CREDENTIALS',
      ),
    ).toMatch(/unable to get credentials/);
    const d = join(tmp, 'az');
    mkdirSync(d);
    writeFileSync(join(d, 'storageAccount'), 'devstoreaccount1');
    writeFileSync(join(d, 'storageKey'), 'a2V5');
    const c = await buildStoreConfig(flags({ provider: 'ABS', container: 'c' }), {
      role: 'primary',
      env: { AZURE_APPLICATION_CREDENTIALS: d },
      homeDir: '/h',
    });
    expect(c).toMatchObject({ provider: 'ABS', credentials: { storageAccount: 'devstoreaccount1', storageKey: 'a2V5' } });
  });

  it('leaves GCS credentials undefined without the variable (application default credentials)', async () => {
    const c = await buildStoreConfig(flags({ provider: 'GCS', container: 'g', endpointOverride: 'http://127.0.0.1:4443' }), {
      role: 'primary',
      env: {},
      homeDir: '/h',
    });
    expect(c).toMatchObject({ provider: 'GCS', container: 'g', endpointOverride: 'http://127.0.0.1:4443' });
    expect(c).not.toHaveProperty('credentials');
  });

  /** Credential files of each new provider, and the variables (without role prefix) that point at them. */
  function providerCredentials(
    provider: 'Swift' | 'OSS' | 'ECS' | 'OCS',
    tag: string,
  ): { env: Record<string, string>; credentials: unknown } {
    if (provider === 'Swift') {
      const p = join(tmp, `${tag}-openstack.json`);
      writeFileSync(
        p,
        JSON.stringify({
          authURL: `https://keystone.${tag}/v3`,
          domainName: 'Default',
          tenantName: `project-${tag}`,
          username: `user-${tag}`,
          password: 'pw',
        }),
      );
      return {
        env: { OPENSTACK_APPLICATION_CREDENTIALS_JSON: p },
        credentials: {
          authURL: `https://keystone.${tag}/v3`,
          userDomainName: 'Default',
          projectDomainName: 'Default',
          tenantName: `project-${tag}`,
          password: { username: `user-${tag}`, password: 'pw' },
        },
      };
    }
    if (provider === 'OSS') {
      const p = join(tmp, `${tag}-alicloud.json`);
      writeFileSync(
        p,
        JSON.stringify({
          storageEndpoint: `https://oss.${tag}`,
          accessKeyID: `key-${tag}`,
          accessKeySecret: 'secret',
          bucketName: 'ignored',
        }),
      );
      return {
        env: { ALICLOUD_APPLICATION_CREDENTIALS_JSON: p },
        credentials: { storageEndpoint: `https://oss.${tag}`, accessKeyID: `key-${tag}`, accessKeySecret: 'secret' },
      };
    }
    if (provider === 'ECS') {
      return {
        env: { ECS_ENDPOINT: `ecs.${tag}:9021`, ECS_ACCESS_KEY_ID: `key-${tag}`, ECS_SECRET_ACCESS_KEY: 'secret', ECS_DISABLE_SSL: 'true' },
        credentials: {
          endpoint: `ecs.${tag}:9021`,
          region: 'US-Standard',
          accessKeyID: `key-${tag}`,
          secretAccessKey: 'secret',
          disableSSL: true,
          insecureSkipVerify: false,
        },
      };
    }
    const d = join(tmp, `${tag}-ocs`);
    mkdirSync(d);
    const values = {
      endpoint: `https://ocs.${tag}`,
      region: 'r1',
      accessKeyID: `key-${tag}`,
      secretAccessKey: 'secret',
      insecureSkipVerify: 'true',
    };
    for (const [k, v] of Object.entries(values)) writeFileSync(join(d, k), `${v}\n`);
    return {
      env: { OPENSHIFT_APPLICATION_CREDENTIALS: d },
      credentials: {
        endpoint: `https://ocs.${tag}`,
        region: 'r1',
        accessKeyID: `key-${tag}`,
        secretAccessKey: 'secret',
        disableSSL: false,
        insecureSkipVerify: true,
      },
    };
  }

  const ROLE_PREFIX = { primary: '', source: 'SOURCE_', secondary: 'SECONDARY_' } as const;

  describe.each(['Swift', 'OSS', 'ECS', 'OCS'] as const)('%s', (provider) => {
    it.each(['primary', 'secondary', 'source'] as const)('as the %s store reads the credentials of its own prefix only', async (role) => {
      // Every role has credentials in the environment; the store must take those of its role.
      const env: Record<string, string> = {};
      let mine: unknown;
      for (const r of ['primary', 'secondary', 'source'] as const) {
        const c = providerCredentials(provider, `${provider.toLowerCase()}-${r}`);
        for (const [k, v] of Object.entries(c.env)) env[`${ROLE_PREFIX[r]}${k}`] = v;
        if (r === role) mine = c.credentials;
      }
      const c = await buildStoreConfig(flags({ provider, container: 'bkt', prefix: 'etcd-main' }), { role, env, homeDir: '/h' });
      expect(c).toEqual({
        provider,
        container: 'bkt',
        prefix: 'etcd-main/v2',
        maxParallelChunkUploads: 5,
        minChunkSize: 5 * 1024 * 1024,
        tempDir: tmp,
        credentials: mine,
        // Messages about this store name its own flags (--source-store-container, …).
        ...(role === 'primary' ? {} : { flagPrefix: `${role}-` }),
      });
    });

    it('names the variables to set when the credentials are missing', async () => {
      const msg = await configError(
        buildStoreConfig(flags({ provider, container: 'bkt' }), { role: 'secondary', env: {}, homeDir: '/h' }),
        'E_CREDENTIALS',
      );
      const expected = {
        Swift: /SECONDARY_OPENSTACK_APPLICATION_CREDENTIALS.*SECONDARY_OS_AUTH_URL/,
        OSS: /unable to get credentials: set SECONDARY_ALICLOUD_APPLICATION_CREDENTIALS_JSON .* or SECONDARY_ALICLOUD_APPLICATION_CREDENTIALS/,
        ECS: /ECS_ENDPOINT is not set/,
        OCS: /SECONDARY_OPENSHIFT_APPLICATION_CREDENTIALS_JSON.*SECONDARY_OPENSHIFT_APPLICATION_CREDENTIALS/,
      }[provider];
      expect(msg).toMatch(expected);
    });
  });

  it('builds a copy from Swift to OCS: each side from its own flags and credentials', async () => {
    const swift = providerCredentials('Swift', 'src');
    const ocs = providerCredentials('OCS', 'dst');
    const env = { ...Object.fromEntries(Object.entries(swift.env).map(([k, v]) => [`SOURCE_${k}`, v])), ...ocs.env };
    const parsed = commandFlagSet(COMMAND_SPECS.copy).parse([
      '--source-storage-provider=Swift',
      '--source-store-container=swift-bkt',
      '--storage-provider=OCS',
      '--store-container=ocs-bkt',
      '--store-prefix=etcd-main',
    ]);
    const { config } = buildCommandConfig('copy', { flags: parsed.changed });
    const source = await buildStoreConfig(config.sourceSnapstoreConfig, { role: 'source', env, homeDir: '/h', createTempDir: false });
    const dest = await buildStoreConfig(config.snapstoreConfig, { role: 'primary', env, homeDir: '/h', createTempDir: false });
    expect(source).toMatchObject({ provider: 'Swift', container: 'swift-bkt', prefix: 'etcd-main/v2', credentials: swift.credentials });
    expect(dest).toMatchObject({ provider: 'OCS', container: 'ocs-bkt', prefix: 'etcd-main/v2', credentials: ocs.credentials });
  });

  it('creates the temp directory (0700) when missing', async () => {
    const t = join(tmp, 'scratch', 'deeper');
    await buildStoreConfig(flags({ tempDir: t }), { role: 'primary', env: {}, homeDir: '/h' });
    expect(statSync(t).isDirectory()).toBe(true);
    expect(statSync(t).mode & 0o777).toBe(0o700);
  });

  it('builds the copy source from the merged flags: provider and prefix default to the destination’s', async () => {
    const parsed = commandFlagSet(COMMAND_SPECS.copy).parse([
      '--storage-provider=Local',
      '--store-container=/dst',
      '--store-prefix=p',
      '--source-store-container=/src',
    ]);
    const { config } = buildCommandConfig('copy', { flags: parsed.changed });
    const source = await buildStoreConfig(config.sourceSnapstoreConfig, { role: 'source', env: {}, homeDir: '/h', createTempDir: false });
    const dest = await buildStoreConfig(config.snapstoreConfig, { role: 'primary', env: {}, homeDir: '/h', createTempDir: false });
    expect(source).toMatchObject({ provider: 'Local', rootDir: '/src', prefix: 'p/v2' });
    expect(dest).toMatchObject({ provider: 'Local', rootDir: '/dst', prefix: 'p/v2' });
  });
});
