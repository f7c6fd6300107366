/**
 * OSS provider through the real `ali-oss` client against a fake of the documented OSS REST API
 * (support/fake-oss.ts; nothing real can run here). Credentials come from ALICLOUD_APPLICATION_CREDENTIALS
 * files exactly as the CLI reads them.
 */
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OssCredentials, OssStoreConfig } from '../src/config.js';
import { credentialsModifiedTime, readCredentials } from '../src/credentials.js';
import { openSnapStore } from '../src/factory.js';
import { openOssStore } from '../src/providers/oss.js';
import type { OssTuning } from '../src/providers/oss.js';
import type { SnapStore } from '../src/store.js';
import { describeSnapStoreConformance, expectCode, generatedStream, readAll, testSnapshot } from './conformance.js';
import { FAKE_OSS_ACCESS_KEY_ID, FAKE_OSS_ACCESS_KEY_SECRET, startFakeOss, type FakeOss } from './support/fake-oss.js';
import { closedPort } from './support/ports.js';

const MiB = 1024 * 1024;
const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const FAST: OssTuning = { timeoutMs: 5_000, partRetries: 1, retryBaseDelayMs: 20 };

function config(oss: FakeOss, over: Partial<OssStoreConfig> = {}): OssStoreConfig {
  return {
    provider: 'OSS',
    container: oss.bucket,
    prefix: 'v2',
    credentials: { storageEndpoint: oss.endpoint, accessKeyID: FAKE_OSS_ACCESS_KEY_ID, accessKeySecret: FAKE_OSS_ACCESS_KEY_SECRET },
    maxParallelChunkUploads: 3,
    minChunkSize: 5 * MiB,
    tempDir: tmpdir(),
    ...over,
  };
}

describeSnapStoreConformance('OSS through ali-oss on the fake OSS API', async () => {
  const oss = await startFakeOss();
  const dir = await mkdtemp(join(tmpdir(), 'etcdbr-oss-creds-'));
  // The directory form of the secret, one file per key.
  const values = {
    storageEndpoint: oss.endpoint,
    accessKeyID: FAKE_OSS_ACCESS_KEY_ID,
    accessKeySecret: FAKE_OSS_ACCESS_KEY_SECRET,
    bucketName: oss.bucket,
  };
  for (const [k, v] of Object.entries(values)) await writeFile(join(dir, k), `${v}\n`);
  const credentials = (await readCredentials('OSS', { ALICLOUD_APPLICATION_CREDENTIALS: dir }, '')) as OssCredentials;
  return {
    open: (opts) =>
      openSnapStore({ ...config(oss, { credentials, prefix: opts?.prefix ?? 'v2' }), ...(opts?.logger ? { logger: opts.logger } : {}) }),
    rawKeys: async () => oss.rawKeys(),
    putRaw: async (key, data) => oss.putRaw(key, data),
    async teardown() {
      await oss.stop();
      await rm(dir, { recursive: true, force: true });
    },
    openUnreachable: async () =>
      openOssStore(
        config(oss, {
          prefix: 'unreachable/v2',
          credentials: { ...credentials, storageEndpoint: `http://127.0.0.1:${await closedPort()}` },
        }),
        FAST,
      ),
    openThrough: async (through, over) =>
      openOssStore(
        config(oss, { ...over, prefix: 'faulty/v2', credentials: { ...credentials, storageEndpoint: await through(oss.endpoint) } }),
        FAST,
      ),
  };
});

describe('OSS provider', () => {
  let oss: FakeOss;
  const stores: SnapStore[] = [];
  let n = 0;
  const open = async (over: Partial<OssStoreConfig> = {}, tuning: OssTuning = FAST): Promise<SnapStore> => {
    const s = await openOssStore(config(oss, { prefix: `oss-spec-${++n}/v2`, ...over }), tuning);
    stores.push(s);
    return s;
  };
  beforeAll(async () => {
    oss = await startFakeOss();
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
    await oss.stop();
  });

  it('uploads parts of --min-chunk-size through one multipart upload, then completes it with the parts in order', async () => {
    const store = await open({ maxParallelChunkUploads: 2 });
    const before = oss.requests.length;
    const size = 3 * 5 * MiB + 321;
    const src = generatedStream(size, { seed: 3 });
    const snap = testSnapshot('Full', 0, 30, 1_700_000_030);
    await store.save(snap, src.stream);
    const reqs = oss.requests.slice(before);
    expect(reqs.filter((r) => r.method === 'POST' && r.url.includes('uploads')).length).toBe(1);
    const parts = reqs.filter((r) => r.method === 'PUT' && r.url.includes('partNumber='));
    expect(parts.map((r) => Number(/partNumber=(\d+)/.exec(r.url)?.[1])).sort()).toEqual([1, 2, 3, 4]);
    expect(reqs.at(-1)?.method).toBe('POST');
    expect(reqs.at(-1)?.url).toContain('uploadId=');
    const got = (await store.list())[0];
    expect(got?.sizeBytes).toBe(size);
    expect(sha256(await readAll(await store.fetch(got!)))).toBe(src.digest());
  });

  it('retries a failed part (upstream: 1, 2, 4, 8, 16 s; shortened here) and completes', async () => {
    const store = await open();
    oss.failUploadParts(1);
    const src = generatedStream(2 * 5 * MiB + 1, { seed: 4 });
    await store.save(testSnapshot('Full', 0, 31, 1_700_000_031), src.stream);
    const got = (await store.list())[0];
    expect(sha256(await readAll(await store.fetch(got!)))).toBe(src.digest());
  });

  it('a part that keeps failing aborts the multipart upload: nothing visible, no parts left', async () => {
    const store = await open();
    oss.failUploadParts(100);
    try {
      await expectCode(store.save(testSnapshot('Full', 0, 32, 1_700_000_032), generatedStream(3 * 5 * MiB).stream), 'E_UNREACHABLE');
    } finally {
      oss.failUploadParts(0);
    }
    expect(await store.list()).toEqual([]);
    expect(oss.rawKeys().filter((k) => k.startsWith(store.prefix))).toEqual([]);
    expect(oss.requests.some((r) => r.method === 'DELETE' && r.url.includes('uploadId=') && r.status === 204)).toBe(true);
  });

  it('lists with marker across pages', async () => {
    const store = await open();
    for (let i = 1; i <= 1003; i++)
      oss.putRaw(
        `${store.prefix}/Incr-${String(i).padStart(8, '0')}-${String(i).padStart(8, '0')}-${1_700_000_000 + i}.gz`,
        Buffer.from('d'),
      );
    const list = await store.list();
    expect(list.length).toBe(1003);
    expect(list[1002]?.lastRevision).toBe(1003);
    expect(
      oss.requests.filter((r) => r.url.includes('marker=') && r.url.includes(encodeURIComponent(store.prefix.split('/')[0] as string)))
        .length,
    ).toBeGreaterThanOrEqual(1);
  });

  it.each(['InProgress', 'Locked'] as const)(
    'a %s bucket retention policy makes snapshots immutable until CreatedOn + days',
    async (state) => {
      const store = await open();
      const snap = testSnapshot('Full', 0, 40, 1_700_000_040);
      await store.save(snap, Readable.from([Buffer.from('full')]));
      oss.setWorm({ state, days: 3 });
      try {
        const got = (await store.list())[0];
        expect(got?.immutabilityExpiryTime).toEqual(new Date((1_700_000_040 + 3 * 86_400) * 1000));
        // OSS itself refuses the delete while the object is under retention.
        await expectCode(store.delete(got!), 'E_IMMUTABLE');
      } finally {
        oss.setWorm(undefined);
      }
    },
  );

  it('an expired policy or none: no immutability; delete removes, a missing object is E_NOT_FOUND', async () => {
    const store = await open();
    await store.save(testSnapshot('Full', 0, 41, 1_700_000_041), Readable.from([Buffer.from('full')]));
    oss.setWorm({ state: 'Expired', days: 3 });
    try {
      const got = (await store.list())[0];
      expect(got?.immutabilityExpiryTime).toBeUndefined();
    } finally {
      oss.setWorm(undefined);
    }
    const got = (await store.list())[0];
    expect(got?.immutabilityExpiryTime).toBeUndefined();
    await store.delete(got!);
    expect(await store.list()).toEqual([]);
    await expectCode(store.delete(got!), 'E_NOT_FOUND');
  });

  it('a wrong secret is E_CREDENTIALS on every operation', async () => {
    const store = await open({
      credentials: { storageEndpoint: oss.endpoint, accessKeyID: FAKE_OSS_ACCESS_KEY_ID, accessKeySecret: 'wrong' },
    });
    expect((await expectCode(store.list(), 'E_CREDENTIALS')).message).toMatch(/SignatureDoesNotMatch|signature/i);
    await expectCode(store.save(testSnapshot('Full', 0, 1, 1_700_000_001), Readable.from([Buffer.from('x')])), 'E_CREDENTIALS');
  });

  it('a missing bucket is E_CONFIG naming it', async () => {
    const store = await open({ container: 'no-such-bucket' });
    expect((await expectCode(store.list(), 'E_CONFIG')).message).toContain('no-such-bucket');
  });
});

describe('OSS credentials', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-oss-cred-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reads the JSON file, the JSON file in a directory and the directory of files; prefixes per role', async () => {
    const json = join(dir, 'creds.json');
    await writeFile(
      json,
      JSON.stringify({
        storageEndpoint: 'https://oss-eu-central-1.aliyuncs.com',
        accessKeyID: 'id',
        accessKeySecret: 'secret',
        bucketName: 'ignored',
      }),
    );
    const want = { storageEndpoint: 'https://oss-eu-central-1.aliyuncs.com', accessKeyID: 'id', accessKeySecret: 'secret' };
    expect(await readCredentials('OSS', { ALICLOUD_APPLICATION_CREDENTIALS_JSON: json }, '')).toEqual(want);
    expect(
      await readCredentials(
        'OSS',
        { SOURCE_ALICLOUD_APPLICATION_CREDENTIALS_JSON: json, ALICLOUD_APPLICATION_CREDENTIALS_JSON: '/nope' },
        'SOURCE_',
      ),
    ).toEqual(want);
    const withJson = join(dir, 'with-json');
    await mkdir(withJson);
    await writeFile(join(withJson, 'secret.json'), JSON.stringify(want));
    expect(await readCredentials('OSS', { SECONDARY_ALICLOUD_APPLICATION_CREDENTIALS: withJson }, 'SECONDARY_')).toEqual(want);
    const files = join(dir, 'files');
    await mkdir(files);
    for (const [k, v] of Object.entries(want)) await writeFile(join(files, k), `${v}\n`);
    expect(await readCredentials('OSS', { ALICLOUD_APPLICATION_CREDENTIALS: files }, '')).toEqual(want);
    // Rotation: the newest mtime of the three files.
    expect(await credentialsModifiedTime('OSS', { ALICLOUD_APPLICATION_CREDENTIALS: files }, '')).toBeInstanceOf(Date);
  });

  it('names the file and every missing field', async () => {
    const json = join(dir, 'partial.json');
    await writeFile(json, JSON.stringify({ storageEndpoint: 'https://oss.example', accessKeyID: '' }));
    const e1 = await expectCode(readCredentials('OSS', { ALICLOUD_APPLICATION_CREDENTIALS_JSON: json }, ''), 'E_CREDENTIALS');
    expect(e1.message).toBe(
      `ALICLOUD_APPLICATION_CREDENTIALS_JSON: OSS credential file ${json}: "accessKeyID" is missing, "accessKeySecret" is missing`,
    );
    const d = join(dir, 'partial-dir');
    await mkdir(d);
    await writeFile(join(d, 'accessKeyID'), 'id');
    const e2 = await expectCode(readCredentials('OSS', { SECONDARY_ALICLOUD_APPLICATION_CREDENTIALS: d }, 'SECONDARY_'), 'E_CREDENTIALS');
    expect(e2.message).toBe(
      `SECONDARY_ALICLOUD_APPLICATION_CREDENTIALS: OSS credential directory ${d}: storageEndpoint is missing (file ${join(d, 'storageEndpoint')}), accessKeySecret is missing (file ${join(d, 'accessKeySecret')})`,
    );
    const bad = join(dir, 'bad.json');
    await writeFile(bad, '{not json');
    expect(
      (await expectCode(readCredentials('OSS', { ALICLOUD_APPLICATION_CREDENTIALS_JSON: bad }, ''), 'E_CREDENTIALS')).message,
    ).toContain(`credential file ${bad} is not valid JSON`);
    const wrongType = join(dir, 'number.json');
    await writeFile(wrongType, JSON.stringify({ storageEndpoint: 'e', accessKeyID: 1, accessKeySecret: 's' }));
    expect(
      (await expectCode(readCredentials('OSS', { ALICLOUD_APPLICATION_CREDENTIALS_JSON: wrongType }, ''), 'E_CREDENTIALS')).message,
    ).toBe(`ALICLOUD_APPLICATION_CREDENTIALS_JSON: credential file ${wrongType}: "accessKeyID" must be a string`);
    expect((await expectCode(readCredentials('OSS', {}, ''), 'E_CREDENTIALS')).message).toMatch(
      /unable to get credentials: set ALICLOUD_APPLICATION_CREDENTIALS_JSON .* or ALICLOUD_APPLICATION_CREDENTIALS/,
    );
  });
});
