/**
 * GCS provider with the real @google-cloud/storage client against the fake GCS JSON API
 * (support/fake-gcs.ts; no GCS emulator exists here). The provider does not know it is a fake: it
 * gets an `http://` endpoint override, which upstream treats as an unauthenticated emulator.
 */
import diagnostics from 'node:diagnostics_channel';
import type { IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { Readable } from 'node:stream';
import { Storage } from '@google-cloud/storage';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GcsStoreConfig } from '../src/config.js';
import { gcsEndpoint, openGcsStore } from '../src/providers/gcs.js';
import type { GcsStoreOptions } from '../src/providers/gcs.js';
import type { Snapshot } from '../src/snapshot.js';
import type { SnapStore } from '../src/store.js';
import { describeSnapStoreConformance, expectCode, generatedStream, pseudoRandomBytes, readAll, testSnapshot } from './conformance.js';
import { FakeGcsServer } from './support/fake-gcs.js';
import { closedPort } from './support/ports.js';
import { startStatusProxy } from './support/status-proxy.js';
import { waitFor } from '../../test/support/wait.js';

const MiB = 1024 * 1024;
const BUCKET = 'snapshots';

let fakePromise: Promise<FakeGcsServer> | undefined;
/** One fake for the whole file, started on first use and stopped in the last afterAll. */
function fakeGcs(): Promise<FakeGcsServer> {
  fakePromise ??= FakeGcsServer.start({ buckets: [BUCKET] });
  return fakePromise;
}

afterAll(async () => {
  if (fakePromise) await (await fakePromise.catch(() => undefined))?.stop();
});

function config(fake: FakeGcsServer, over: Partial<GcsStoreConfig> = {}): GcsStoreConfig {
  return {
    provider: 'GCS',
    container: BUCKET,
    prefix: 'default/v2',
    endpointOverride: fake.endpoint,
    maxParallelChunkUploads: 3,
    minChunkSize: 5 * MiB,
    tempDir: tmpdir(),
    ...over,
  };
}

const FAST: GcsStoreOptions = { retry: { maxRetries: 0 }, timeoutMs: 5_000 };

describeSnapStoreConformance('GCS on the fake JSON API', async () => {
  const fake = await fakeGcs();
  return {
    open: async (opts) =>
      openGcsStore(config(fake, { ...(opts?.prefix ? { prefix: opts.prefix } : {}), ...(opts?.logger ? { logger: opts.logger } : {}) })),
    rawKeys: async () => fake.objectNames(BUCKET),
    putRaw: (key, data) => fake.putObject(BUCKET, key, data),
    async teardown() {
      // Shared with the provider tests below; stopped by the file's afterAll.
    },
    openUnreachable: async () => openGcsStore(config(fake, { endpointOverride: `http://127.0.0.1:${await closedPort()}` }), FAST),
    openThrough: async (through, over) => openGcsStore(config(fake, { ...over, endpointOverride: await through(fake.endpoint) }), FAST),
  };
});

describe('gcsEndpoint', () => {
  it('prefers the endpoint override over the deprecated storageAPIEndpoint file', () => {
    expect(gcsEndpoint({ endpointOverride: 'http://a:1/', credentials: { storageAPIEndpoint: 'http://b:2' } })).toBe('http://a:1');
    expect(gcsEndpoint({ credentials: { storageAPIEndpoint: 'https://b:2\n' } })).toBe('https://b:2');
    expect(gcsEndpoint({})).toBeUndefined();
  });
});

describe('GCS provider on the fake', () => {
  let fake: FakeGcsServer;
  const stores: SnapStore[] = [];
  let n = 0;
  const prefix = (): string => `gcs-spec-${Date.now().toString(36)}-${++n}/v2`;

  beforeAll(async () => {
    fake = await fakeGcs();
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
  });

  const open = async (over: Partial<GcsStoreConfig> = {}, options?: GcsStoreOptions): Promise<SnapStore> => {
    const s = await openGcsStore(config(fake, { prefix: prefix(), ...over }), options);
    stores.push(s);
    return s;
  };
  const requestsSince = (i: number): { method: string; url: string; headers: Record<string, unknown>; status?: number }[] =>
    fake.requests.slice(i);

  it('uploads a small object in one multipart request', async () => {
    const store = await open();
    const mark = fake.requests.length;
    await store.save(testSnapshot('Incr', 1, 2, 1_700_000_002), Readable.from([Buffer.from('small delta')]));
    const reqs = requestsSince(mark);
    expect(reqs.map((r) => `${r.method} ${new URL(r.url, 'http://x').searchParams.get('uploadType')}`)).toEqual(['POST multipart']);
  });

  it('streams a large object through one resumable session in 256 KiB-aligned chunks', async () => {
    // 5 MiB + 1 byte rounds up to 5 MiB + 256 KiB per chunk.
    const store = await open({ minChunkSize: 5 * MiB + 1 });
    const chunk = 5 * MiB + 256 * 1024;
    const size = 2 * chunk + 12_345;
    const mark = fake.requests.length;
    const src = generatedStream(size, { pieces: [70_001] });
    const snap = testSnapshot('Full', 0, 3, 1_700_000_003);
    await store.save(snap, src.stream);
    const reqs = requestsSince(mark).filter((r) => r.url.startsWith('/upload/'));
    expect(reqs.map((r) => r.method)).toEqual(['POST', 'PUT', 'PUT', 'PUT']);
    expect(new URL(reqs[0]?.url ?? '', 'http://x').searchParams.get('uploadType')).toBe('resumable');
    expect(reqs.slice(1).map((r) => r.headers['content-range'])).toEqual([
      `bytes 0-${chunk - 1}/*`,
      `bytes ${chunk}-${2 * chunk - 1}/*`,
      `bytes ${2 * chunk}-${size - 1}/${size}`,
    ]);
    expect(reqs.slice(1).map((r) => r.status)).toEqual([308, 308, 200]);
    const info = fake.objectInfo(BUCKET, `${store.prefix}/${snap.snapName}`);
    expect(info?.size).toBe(size);
    expect(info?.contentType).toBe('application/octet-stream');
  });

  it('a failed resumable save cancels its session, so nothing can be finalized later', async () => {
    const store = await open();
    const mark = fake.requests.length;
    await expectCode(
      store.save(testSnapshot('Full', 0, 4, 1_700_000_004), generatedStream(4 * 5 * MiB, { failAfter: 2 * 5 * MiB + 7 }).stream),
      'E_SAVE_FAILED',
    );
    expect(requestsSince(mark).some((r) => r.method === 'DELETE' && r.url.includes('upload_id=') && r.status === 499)).toBe(true);
    expect(fake.activeSessions()).toEqual([]);
    expect(fake.objectNames(BUCKET).filter((k) => k.startsWith(store.prefix))).toEqual([]);
  });

  it('retries a chunk the server answered with 503 and resumes from the persisted range', async () => {
    const store = await open({}, { retry: { maxRetries: 3, maxRetryDelay: 1 } });
    let failed = 0;
    fake.intercept = (req, url) => {
      if (req.method === 'PUT' && url.searchParams.has('upload_id') && req.headers['content-range'] !== 'bytes */*' && failed === 0) {
        failed++;
        return { status: 503 };
      }
      return undefined;
    };
    try {
      const size = 2 * 5 * MiB + 3;
      const src = generatedStream(size, { seed: 5 });
      const snap = testSnapshot('Full', 0, 5, 1_700_000_005);
      await store.save(snap, src.stream);
      expect(failed).toBe(1);
      const got = (await store.list()).find((s) => s.snapName === snap.snapName) as Snapshot;
      expect(got.sizeBytes).toBe(size);
      const back = await readAll(await store.fetch(got));
      const { createHash } = await import('node:crypto');
      expect(createHash('sha256').update(back).digest('hex')).toBe(src.digest());
    } finally {
      fake.intercept = undefined;
    }
  }, 60_000);

  it('hides objects with custom metadata x-etcd-snapshot-exclude=true unless includeExcluded', async () => {
    const store = await open();
    const kept = testSnapshot('Full', 0, 100, 1_700_000_100);
    const excluded = testSnapshot('Incr', 101, 200, 1_700_000_200);
    const other = testSnapshot('Incr', 201, 300, 1_700_000_300);
    for (const s of [kept, excluded, other]) await store.save(s, Readable.from([Buffer.from(s.snapName)]));
    // Set the way an operator would, through the real client (PATCH of custom metadata).
    const client = new Storage({ apiEndpoint: fake.endpoint, projectId: 'test' });
    await client
      .bucket(BUCKET)
      .file(`${store.prefix}/${excluded.snapName}`)
      .setMetadata({ metadata: { 'x-etcd-snapshot-exclude': 'true' } });
    await client
      .bucket(BUCKET)
      .file(`${store.prefix}/${other.snapName}`)
      .setMetadata({ metadata: { 'x-etcd-snapshot-exclude': 'TRUE' } });
    expect((await store.list()).map((s) => s.snapName)).toEqual([kept.snapName, other.snapName]);
    expect((await store.list({ includeExcluded: true })).map((s) => s.snapName)).toEqual([
      kept.snapName,
      excluded.snapName,
      other.snapName,
    ]);
  });

  it('lists upstream chunk objects as chunks next to their composite', async () => {
    const store = await open();
    const name = 'Full-00000000-00000100-1700000100.gz';
    await fake.putObject(BUCKET, `${store.prefix}/${name}/0000000002`, Buffer.from('b'));
    await fake.putObject(BUCKET, `${store.prefix}/${name}/0000000001`, Buffer.from('a'));
    await fake.putObject(BUCKET, `${store.prefix}/${name}`, Buffer.from('ab'));
    const list = await store.list();
    expect(list.map((s) => [s.snapName, s.isChunk, s.chunkNumber ?? null, s.sizeBytes])).toEqual([
      [name, false, null, 2],
      [name, true, 1, 1],
      [name, true, 2, 1],
    ]);
    expect((await readAll(await store.fetch(list[2] as Snapshot))).toString()).toBe('b');
    await store.delete(list[1] as Snapshot);
    expect(fake.objectNames(BUCKET).filter((k) => k.startsWith(store.prefix))).toEqual([
      `${store.prefix}/${name}`,
      `${store.prefix}/${name}/0000000002`,
    ]);
  });

  describe('with a bucket retention policy', () => {
    const LOCKED = 'locked-bucket';
    beforeAll(() => {
      fake.createBucket(LOCKED, { retentionPeriodSeconds: 3600 });
    });

    it('lists retentionExpirationTime as immutabilityExpiryTime; delete and overwrite are E_IMMUTABLE', async () => {
      const store = await open({ container: LOCKED });
      const snap = testSnapshot('Full', 0, 7, 1_700_000_007);
      const before = Date.now();
      await store.save(snap, Readable.from([Buffer.from('kept for an hour')]));
      const [got] = await store.list();
      const expiry = got?.immutabilityExpiryTime?.getTime() ?? 0;
      expect(expiry).toBeGreaterThanOrEqual(before + 3600_000 - 1000);
      expect(expiry).toBeLessThanOrEqual(Date.now() + 3600_000 + 1000);
      const err = await expectCode(store.delete(got as Snapshot), 'E_IMMUTABLE');
      expect(err.message).toContain(snap.snapName);
      await expectCode(store.save(snap, Readable.from([Buffer.from('replacement')])), 'E_IMMUTABLE');
      expect((await readAll(await store.fetch(got as Snapshot))).toString()).toBe('kept for an hour');
      // Once the policy is gone, delete works (GCS evaluates retention at request time).
      fake.setRetentionPeriod(LOCKED, undefined);
      await store.delete(got as Snapshot);
      expect(await store.list()).toEqual([]);
    });
  });

  // The library cannot take its read stream being destroyed before the answer: it then pipes the late answer
  // into it, which throws ERR_STREAM_UNABLE_TO_PIPE out of its response handler and ends the process.
  it('a fetch aborted before the answer came ends at once, and the late answer is dropped without an unhandled error', async () => {
    const marker = `late-${Date.now().toString(36)}`;
    const proxy = await startStatusProxy(fake.endpoint, marker);
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown): void => void unhandled.push(err);
    process.on('unhandledRejection', onUnhandled);
    process.on('uncaughtException', onUnhandled);
    const answers: IncomingMessage[] = [];
    const onAnswer = (m: unknown): void => {
      const { request, response } = m as { request: { path: string }; response: IncomingMessage };
      if (request.path.includes(marker)) answers.push(response);
    };
    diagnostics.subscribe('http.client.response.finish', onAnswer);
    try {
      const store = await open({ endpointOverride: proxy.url }, FAST);
      const snap = { ...testSnapshot('Full', 0, 1, 1_700_000_006), prefix: `${store.prefix}/`, snapDir: marker };
      await store.save(snap, Readable.from([pseudoRandomBytes(200_000, 6)]));
      proxy.stall = 'answer';
      const caller = new AbortController();
      const reason = new Error('stopped while waiting for the answer');
      const read = store.fetch(snap, undefined, { signal: caller.signal });
      read.catch(() => undefined);
      await waitFor(() => proxy.stalled > 0, 'the fetch to be held', 10_000, 5);
      caller.abort(reason);
      await expect(read).rejects.toBe(reason);

      proxy.releaseHeld();
      const answer = await waitFor(() => answers[0], 'the late answer to reach the client', 10_000, 5);
      // Dropped: the library closes its connections instead of reading it.
      await waitFor(
        () => (answer.destroyed && proxy.connections() === 0) || unhandled.length > 0,
        'the late answer to be dropped',
        10_000,
        5,
      );
      expect(unhandled).toEqual([]);
      // The store still fetches the object whole.
      expect(await readAll(await store.fetch(snap))).toHaveLength(200_000);
    } finally {
      diagnostics.unsubscribe('http.client.response.finish', onAnswer);
      process.off('unhandledRejection', onUnhandled);
      process.off('uncaughtException', onUnhandled);
      await proxy.stop();
    }
  });

  it('a missing bucket is E_CONFIG', async () => {
    const store = await open({ container: 'no-such-bucket' }, FAST);
    const err = await expectCode(store.list(), 'E_CONFIG');
    expect(err.message).toContain('no-such-bucket');
  });

  describe('when the server demands credentials (401 for anonymous callers)', () => {
    let guarded: FakeGcsServer;
    beforeAll(async () => {
      guarded = await FakeGcsServer.start({ buckets: [BUCKET], requireAuth: 'secret-token' });
    });
    afterAll(async () => {
      await guarded.stop();
    });

    it('every operation is E_CREDENTIALS', async () => {
      const store = await openGcsStore(config(guarded), FAST);
      stores.push(store);
      const snap = { ...testSnapshot('Full', 0, 1, 1_700_000_001), prefix: `${store.prefix}/` };
      await expectCode(store.list(), 'E_CREDENTIALS');
      await expectCode(store.fetch(snap), 'E_CREDENTIALS');
      await expectCode(store.delete(snap), 'E_CREDENTIALS');
      await expectCode(store.save(snap, Readable.from([Buffer.from('x')])), 'E_CREDENTIALS');
      await expectCode(store.save(snap, Readable.from([pseudoRandomBytes(6 * MiB, 1)])), 'E_CREDENTIALS');
    });
  });
});
