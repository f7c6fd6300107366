/**
 * Swift provider against a real OpenStack Swift all-in-one (Debian's packages, support/swift-aio.ts),
 * authenticated through the fake Keystone v3 token API and its token-checking gateway
 * (support/fake-keystone.ts). The provider is configured exactly as from a credentials file: an auth
 * URL, a user or an application credential; it finds Swift through the token's catalog.
 */
import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SwiftCredentials, SwiftStoreConfig } from '../src/config.js';
import { credentialsModifiedTime, readCredentials } from '../src/credentials.js';
import { runGarbageCollection } from '../src/gc.js';
import { planGarbageCollection } from '../src/retention.js';
import { openSwiftStore, segmentName } from '../src/providers/swift.js';
import type { SwiftTuning } from '../src/providers/swift.js';
import { silentLogger } from '../src/logger.js';
import type { SnapStore } from '../src/store.js';
import { describeSnapStoreConformance, expectCode, generatedStream, pseudoRandomBytes, readAll, testSnapshot } from './conformance.js';
import { startFakeKeystone, type FakeKeystone } from './support/fake-keystone.js';
import { closedPort } from './support/ports.js';
import { startSwiftAio, type SwiftAio } from './support/swift-aio.js';

const MiB = 1024 * 1024;
const CONTAINER = 'etcd-backups';
const USER = {
  domain: 'Default',
  project: 'test',
  username: 'etcd',
  password: 's3cret',
  applicationCredential: { id: 'appcred-1', name: 'etcd-backup', secret: 'app-s3cret' },
};

interface Backend {
  swift: SwiftAio;
  keystone: FakeKeystone;
}

let backendPromise: Promise<Backend> | undefined;
/** One Swift and one Keystone for the whole file, stopped in the last afterAll. */
function backend(): Promise<Backend> {
  backendPromise ??= (async () => {
    const swift = await startSwiftAio(USER.project);
    try {
      await swift.createContainer(CONTAINER);
      const keystone = await startFakeKeystone({ swiftProxy: swift.proxy, user: USER });
      return { swift, keystone };
    } catch (err) {
      await swift.stop();
      throw err;
    }
  })();
  return backendPromise;
}

const extraKeystones: FakeKeystone[] = [];

afterAll(async () => {
  for (const k of extraKeystones) await k.stop();
  const b = await backendPromise?.catch(() => undefined);
  await b?.keystone.stop();
  await b?.swift.stop();
});

function passwordCredentials(k: FakeKeystone): SwiftCredentials {
  return {
    authURL: k.authURL,
    userDomainName: USER.domain,
    projectDomainName: USER.domain,
    tenantName: USER.project,
    password: { username: USER.username, password: USER.password },
  };
}

function config(b: Backend, over: Partial<SwiftStoreConfig> = {}): SwiftStoreConfig {
  return {
    provider: 'Swift',
    container: CONTAINER,
    prefix: 'default/v2',
    credentials: passwordCredentials(b.keystone),
    maxParallelChunkUploads: 3,
    minChunkSize: 5 * MiB,
    tempDir: tmpdir(),
    ...over,
  };
}

const FAST: SwiftTuning = { requestTimeoutMs: 5_000, segmentRetries: 0 };

/** Keys a DLO of `size` bytes occupies: the manifest and its 5 MiB segments; one object when it fits one segment. */
function dloLayout(key: string, size: number): string[] {
  const n = Math.ceil(size / (5 * MiB));
  return n <= 1 ? [key] : [key, ...Array.from({ length: n }, (_, i) => segmentName(key, i + 1))];
}

describeSnapStoreConformance('Swift on a real Swift all-in-one with the fake Keystone', async () => {
  const b = await backend();
  return {
    open: async (opts) =>
      openSwiftStore(config(b, { ...(opts?.prefix ? { prefix: opts.prefix } : {}), ...(opts?.logger ? { logger: opts.logger } : {}) })),
    rawKeys: () => b.swift.objectNames(CONTAINER),
    putRaw: (key, data) => b.swift.putObject(CONTAINER, key, data),
    layout: dloLayout,
    async teardown() {
      // Shared with the cases below; stopped by the file's afterAll.
    },
    openUnreachable: async () =>
      openSwiftStore(
        config(b, { credentials: { ...passwordCredentials(b.keystone), authURL: `http://127.0.0.1:${await closedPort()}/v3` } }),
        FAST,
      ),
    async openThrough(through, over) {
      // A second Keystone whose gateway forwards to the proxy, which stands in front of the real Swift.
      const keystone = await startFakeKeystone({ swiftProxy: await through(b.swift.proxy), user: USER });
      extraKeystones.push(keystone);
      return openSwiftStore(config(b, { ...over, credentials: passwordCredentials(keystone) }), FAST);
    },
  };
});

describe('Swift provider', () => {
  let b: Backend;
  const stores: SnapStore[] = [];
  let n = 0;
  const prefix = (): string => `swift-spec-${Date.now().toString(36)}-${++n}/v2`;
  const open = async (over: Partial<SwiftStoreConfig> = {}, tuning?: SwiftTuning): Promise<SnapStore> => {
    const s = await openSwiftStore(config(b, { prefix: prefix(), ...over }), tuning);
    stores.push(s);
    return s;
  };

  beforeAll(async () => {
    b = await backend();
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
  });

  it('writes segments <key>/%010d and a manifest naming them, and GETs the whole object through it', async () => {
    const store = await open();
    const size = 2 * 5 * MiB + 1234;
    const src = generatedStream(size, { seed: 5 });
    const snap = testSnapshot('Full', 0, 40, 1_700_000_040);
    await store.save(snap, src.stream);
    const key = `${store.prefix}/${snap.snapName}`;
    expect((await b.swift.objectNames(CONTAINER)).filter((k) => k.startsWith(store.prefix))).toEqual(dloLayout(key, size));
    const puts = b.keystone.requests.filter((r) => r.method === 'PUT' && r.url.includes(encodeURIComponent(snap.snapName)));
    expect(puts.map((r) => decodeURIComponent(r.url.split(`/${CONTAINER}/`)[1] ?? ''))).toEqual(
      expect.arrayContaining([segmentName(key, 1), segmentName(key, 2), segmentName(key, 3), key]),
    );
    // The manifest is the last PUT: nothing is visible before every segment is in.
    expect(decodeURIComponent(puts[puts.length - 1]?.url.split(`/${CONTAINER}/`)[1] ?? '')).toBe(key);
    const list = await store.list();
    const full = list.find((s) => !s.isChunk);
    expect(full?.sizeBytes).toBe(size);
    expect(list.filter((s) => s.isChunk).map((s) => s.chunkNumber)).toEqual([1, 2, 3]);
  });

  it('restores a store in the Go tool’s layout (segments, then a manifest without trailing slash) exactly', async () => {
    const store = await open();
    const data = pseudoRandomBytes(3 * 1024 * 1024 + 17, 9);
    const key = `${store.prefix}/Full-00000000-00000077-1700000077.gz`;
    // Upstream's chunking: max(minChunkSize, size/999) -- made small here by hand to have several segments.
    const chunk = 1024 * 1024;
    for (let i = 0; i * chunk < data.length; i++) {
      await b.swift.putObject(CONTAINER, `${key}/${String(i + 1).padStart(10, '0')}`, data.subarray(i * chunk, (i + 1) * chunk));
    }
    await b.swift.putObject(CONTAINER, key, Buffer.alloc(0), { 'x-object-manifest': `${CONTAINER}/${key}` });
    const got = (await store.list()).find((s) => !s.isChunk);
    expect(got?.snapName).toBe('Full-00000000-00000077-1700000077.gz');
    expect(got?.sizeBytes).toBe(data.length);
    expect((await readAll(await store.fetch(got!))).equals(data)).toBe(true);
    expect((await readAll(await store.fetch(got!, { start: chunk - 2, end: chunk + 1 }))).equals(data.subarray(chunk - 2, chunk + 2))).toBe(
      true,
    );
    // Delete removes segments, then the manifest.
    await store.delete(got!);
    expect((await b.swift.objectNames(CONTAINER)).filter((k) => k.startsWith(store.prefix))).toEqual([]);
  });

  it('a smaller save over a large object leaves none of the old segments behind', async () => {
    const store = await open();
    const snap = testSnapshot('Full', 0, 50, 1_700_000_050);
    await store.save(snap, generatedStream(2 * 5 * MiB + 5).stream);
    await store.save(snap, Readable.from([Buffer.from('small now')]));
    const key = `${store.prefix}/${snap.snapName}`;
    expect((await b.swift.objectNames(CONTAINER)).filter((k) => k.startsWith(store.prefix))).toEqual([key]);
    const got = (await store.list())[0];
    expect((await readAll(await store.fetch(got!))).toString()).toBe('small now');
  });

  it('re-authenticates when the token expires in the middle of an upload, and the upload completes', async () => {
    const store = await open({ maxParallelChunkUploads: 1 });
    const issued = b.keystone.issued;
    // The second segment's PUT meets an expired token (401); the client gets a new one and resends it.
    b.keystone.expireTokensOn((method, url) => method === 'PUT' && url.endsWith('/0000000002'));
    const size = 3 * 5 * MiB;
    const src = generatedStream(size, { seed: 11 });
    const snap = testSnapshot('Full', 0, 60, 1_700_000_060);
    await store.save(snap, src.stream);
    expect(b.keystone.issued).toBe(issued + 2);
    expect(b.keystone.requests.some((r) => r.status === 401 && r.url.endsWith('/0000000002'))).toBe(true);
    const got = (await store.list()).find((s) => !s.isChunk);
    const back = await readAll(await store.fetch(got!));
    expect(back.length).toBe(size);
  });

  it('authenticates with an application credential (no scope sent)', async () => {
    const store = await open({
      credentials: {
        authURL: b.keystone.authURL,
        userDomainName: 'Default',
        projectDomainName: 'Default',
        tenantName: 'test',
        applicationCredential: USER.applicationCredential,
      },
    });
    await store.save(testSnapshot('Incr', 1, 2, 1_700_000_002), Readable.from([Buffer.from('delta')]));
    expect((await store.list()).map((s) => s.snapName)).toEqual(['Incr-00000001-00000002-1700000002.gz']);
  });

  it('wrong credentials are E_CREDENTIALS naming Keystone', async () => {
    const store = await open(
      { credentials: { ...passwordCredentials(b.keystone), password: { username: USER.username, password: 'wrong' } } },
      FAST,
    );
    const err = await expectCode(store.list(), 'E_CREDENTIALS');
    expect(err.message).toContain(b.keystone.authURL);
  });

  it('a missing container is E_CONFIG', async () => {
    const store = await open({ container: 'no-such-container' }, FAST);
    await expectCode(store.list(), 'E_CONFIG');
  });

  it('garbage collection never deletes the segments of a Swift object on their own', async () => {
    const store = await open();
    await store.save(testSnapshot('Full', 0, 10, 1_600_000_000), generatedStream(5 * MiB + 1).stream);
    await store.save(testSnapshot('Full', 0, 20, 1_700_000_000), Readable.from([Buffer.from('newer')]));
    const list = await store.list({ includeExcluded: true });
    const plan = planGarbageCollection(list, new Date(1_700_000_100_000), {
      kind: 'LimitBased',
      maxBackups: 1,
      deltaRetentionMs: 0,
      latestSnapshotRevision: 20,
    });
    expect(plan.chunks.length).toBe(2);
    const result = await runGarbageCollection(store, plan, silentLogger);
    // Only the old full (with its segments, by the provider's delete) is gone; no chunk deletions of their own.
    expect(result.deleted.map((s) => `${s.snapName}${s.isChunk ? '#chunk' : ''}`)).toEqual(['Full-00000000-00000010-1600000000.gz']);
    expect((await b.swift.objectNames(CONTAINER)).filter((k) => k.startsWith(store.prefix))).toEqual([
      `${store.prefix}/Full-00000000-00000020-1700000000.gz`,
    ]);
  });
});

describe('Swift credentials', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-swift-creds-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const credDir = async (name: string, files: Record<string, string>): Promise<string> => {
    const d = join(dir, name);
    await mkdir(d, { recursive: true });
    for (const [k, v] of Object.entries(files)) await writeFile(join(d, k), v);
    return d;
  };

  it('reads a directory of password credentials, and its files’ modification time', async () => {
    const d = await credDir('pw', {
      authURL: 'http://k/v3',
      domainName: 'D',
      tenantName: 'P',
      username: 'u',
      password: 'p\n',
      region: 'R1',
    });
    const c = await readCredentials('Swift', { OPENSTACK_APPLICATION_CREDENTIALS: d }, '');
    expect(c).toEqual({
      authURL: 'http://k/v3',
      userDomainName: 'D',
      projectDomainName: 'D',
      tenantName: 'P',
      region: 'R1',
      password: { username: 'u', password: 'p' },
    });
    expect(await credentialsModifiedTime('Swift', { OPENSTACK_APPLICATION_CREDENTIALS: d }, '')).toBeInstanceOf(Date);
  });

  it('names the missing file', async () => {
    const d = await credDir('missing', { authURL: 'http://k/v3', domainName: 'D', username: 'u', password: 'p' });
    await expect(readCredentials('Swift', { OPENSTACK_APPLICATION_CREDENTIALS: d }, '')).rejects.toThrow(
      `tenantName is missing (file ${join(d, 'tenantName')})`,
    );
  });

  it('refuses a mix of password and application credential', async () => {
    const f = join(dir, 'mixed.json');
    await writeFile(
      f,
      JSON.stringify({
        authURL: 'http://k/v3',
        domainName: 'D',
        tenantName: 'P',
        username: 'u',
        password: 'p',
        applicationCredentialSecret: 's',
      }),
    );
    const err = await expectCode(readCredentials('Swift', { OPENSTACK_APPLICATION_CREDENTIALS_JSON: f }, ''), 'E_CREDENTIALS');
    expect(err.message).toContain(f);
    expect(err.message).toContain('mixes');
  });

  it('falls back to SOURCE_OS_* for the copy source', async () => {
    const c = await readCredentials(
      'Swift',
      {
        SOURCE_OS_AUTH_URL: 'http://k/v3',
        SOURCE_OS_APPLICATION_CREDENTIAL_ID: 'id',
        SOURCE_OS_APPLICATION_CREDENTIAL_SECRET: 's',
        OS_AUTH_URL: 'http://other',
      },
      'SOURCE_',
    );
    expect(c).toEqual({ authURL: 'http://k/v3', applicationCredential: { id: 'id', secret: 's' } });
  });
});
