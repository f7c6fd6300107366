/**
 * ABS provider against Azurite (a real Azure Blob HTTP server with SharedKey checks), plus a counting
 * proxy in front of it for parallelism, backpressure and fault cases, and a stub with Azure's
 * documented immutability answers (Azurite does not implement immutability policies).
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AbsStoreConfig } from '../src/config.js';
import { absContainerUrl, blockId, openAbsStore } from '../src/providers/abs.js';
import type { AbsStoreOptions } from '../src/providers/abs.js';
import type { Snapshot } from '../src/snapshot.js';
import type { SnapStore } from '../src/store.js';
import { describeSnapStoreConformance, expectCode, generatedStream, pseudoRandomBytes, testSnapshot } from './conformance.js';
import { CountingIdleBuffers } from './support/counting-idle.js';
import { AZURITE_ACCOUNT, AZURITE_KEY, startAzurite, type Azurite } from './support/azurite.js';
import { closedPort } from './support/ports.js';
import { waitFor } from '../../test/support/wait.js';

const MiB = 1024 * 1024;
const CONTAINER = 'snapshots';

let azuritePromise: Promise<Azurite> | undefined;
/** One Azurite for the whole file, started on first use and stopped in the last afterAll. */
function azurite(): Promise<Azurite> {
  azuritePromise ??= startAzurite().then(async (az) => {
    await az.createContainer(CONTAINER);
    return az;
  });
  return azuritePromise;
}

afterAll(async () => {
  if (azuritePromise) await (await azuritePromise.catch(() => undefined))?.stop();
});

function config(az: Azurite, over: Partial<AbsStoreConfig> = {}): AbsStoreConfig {
  return {
    provider: 'ABS',
    container: CONTAINER,
    prefix: 'default/v2',
    endpointOverride: az.accountEndpoint,
    maxParallelChunkUploads: 3,
    minChunkSize: 5 * MiB,
    tempDir: tmpdir(),
    credentials: { storageAccount: AZURITE_ACCOUNT, storageKey: AZURITE_KEY },
    ...over,
  };
}

const FAST_RETRY: AbsStoreOptions['retry'] = { maxTries: 2, retryDelayInMs: 50, maxRetryDelayInMs: 100, tryTimeoutInMs: 5_000 };

describeSnapStoreConformance('ABS on Azurite', async () => {
  const az = await azurite();
  const cc = az.containerClient(CONTAINER);
  return {
    open: (opts) =>
      openAbsStore(config(az, { ...(opts?.prefix ? { prefix: opts.prefix } : {}), ...(opts?.logger ? { logger: opts.logger } : {}) })),
    async rawKeys() {
      // Uncommitted blobs too: staged blocks a failed save left behind would show up here.
      const keys: string[] = [];
      for await (const b of cc.listBlobsFlat({ includeUncommitedBlobs: true })) keys.push(b.name);
      return keys;
    },
    async putRaw(key, data) {
      await cc.getBlockBlobClient(key).upload(data, data.length);
    },
    async teardown() {
      // Azurite is shared with the provider tests below and stopped by the file's afterAll.
    },
    async openUnreachable() {
      // The container check at open would already fail; this case is about the operations.
      return openAbsStore(config(az, { endpointOverride: `http://127.0.0.1:${await closedPort()}/${AZURITE_ACCOUNT}` }), {
        retry: FAST_RETRY,
        verifyContainer: false,
      });
    },
    async openThrough(through, over) {
      return openAbsStore(config(az, { ...over, endpointOverride: await through(az.accountEndpoint) }), { retry: FAST_RETRY });
    },
  };
});

describe('absContainerUrl', () => {
  const creds = { storageAccount: 'acct', storageKey: 'a2V5' };
  it.each([
    [{ container: 'c', credentials: creds }, 'https://acct.blob.core.windows.net/c'],
    [{ container: 'c', credentials: { ...creds, domain: 'blob.core.chinacloudapi.cn' } }, 'https://acct.blob.core.chinacloudapi.cn/c'],
    [
      { container: 'c', credentials: creds, endpointOverride: 'http://127.0.0.1:10000/devstoreaccount1' },
      'http://127.0.0.1:10000/devstoreaccount1/c',
    ],
    [
      { container: 'c', credentials: creds, endpointOverride: 'http://127.0.0.1:10000/devstoreaccount1/' },
      'http://127.0.0.1:10000/devstoreaccount1/c',
    ],
    [{ container: 'c', credentials: creds, endpointOverride: 'https://private.example.com' }, 'https://private.example.com/c'],
  ])('%j -> %s', (cfg, want) => {
    expect(absContainerUrl(cfg)).toBe(want);
  });

  it('rejects an override that is not a URL', () => {
    expect(() => absContainerUrl({ container: 'c', credentials: creds, endpointOverride: 'not a url' })).toThrow(/not a valid URL/);
  });
});

describe('ABS block helpers', () => {
  it('block IDs are base64 of the %010d part number (upstream)', () => {
    expect(blockId(1)).toBe('MDAwMDAwMDAwMQ==');
    expect(Buffer.from(blockId(12345), 'base64').toString()).toBe('0000012345');
  });
});

describe('ABS provider on Azurite', () => {
  let az: Azurite;
  const stores: SnapStore[] = [];
  let n = 0;
  const prefix = (): string => `abs-spec-${Date.now().toString(36)}-${++n}/v2`;

  beforeAll(async () => {
    az = await azurite();
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
  });

  const open = async (over: Partial<AbsStoreConfig> = {}, options?: AbsStoreOptions): Promise<SnapStore> => {
    const s = await openAbsStore(config(az, { prefix: prefix(), ...over }), options);
    stores.push(s);
    return s;
  };

  it('open fails with E_CONFIG when the container does not exist', async () => {
    const err = await expectCode(openAbsStore(config(az, { container: 'no-such-container' })), 'E_CONFIG');
    expect(err.message).toContain('container no-such-container does not exist');
  });

  it('open fails with E_CREDENTIALS when Azurite rejects the SharedKey signature', async () => {
    const wrongKey = Buffer.from('definitely not the dev account key').toString('base64');
    const err = await expectCode(
      openAbsStore(config(az, { credentials: { storageAccount: AZURITE_ACCOUNT, storageKey: wrongKey } }), { retry: FAST_RETRY }),
      'E_CREDENTIALS',
    );
    expect(err.message).toContain(AZURITE_ACCOUNT);
  });

  it('open fails with E_CREDENTIALS when account or key are missing', async () => {
    await expectCode(openAbsStore(config(az, { credentials: { storageAccount: AZURITE_ACCOUNT, storageKey: '' } })), 'E_CREDENTIALS');
  });

  it('open fails with E_UNREACHABLE naming the endpoint when nothing listens', async () => {
    const port = await closedPort();
    const err = await expectCode(
      openAbsStore(config(az, { endpointOverride: `http://127.0.0.1:${port}/${AZURITE_ACCOUNT}` }), { retry: FAST_RETRY }),
      'E_UNREACHABLE',
    );
    expect(err.message).toContain(`127.0.0.1:${port}`);
  });

  it('commits blocks of exactly minChunkSize with upstream block IDs', async () => {
    const store = await open();
    const snap = testSnapshot('Full', 0, 10, 1_700_000_010);
    const size = 2 * 5 * MiB + 1;
    await store.save(snap, generatedStream(size, { pieces: [999_999] }).stream);
    const blob = az.containerClient(CONTAINER).getBlockBlobClient(`${store.prefix}/${snap.snapName}`);
    const list = await blob.getBlockList('committed');
    expect(list.committedBlocks?.map((b) => Buffer.from(b.name, 'base64').toString())).toEqual(['0000000001', '0000000002', '0000000003']);
    expect(list.committedBlocks?.map((b) => b.size)).toEqual([5 * MiB, 5 * MiB, 1]);
    const props = await blob.getProperties();
    expect(props.contentType).toBe('application/octet-stream');
  });

  it('hides snapshots tagged x-etcd-snapshot-exclude=true unless includeExcluded', async () => {
    const store = await open();
    const kept = testSnapshot('Full', 0, 100, 1_700_000_100);
    const excluded = testSnapshot('Incr', 101, 200, 1_700_000_200);
    const notTrue = testSnapshot('Incr', 201, 300, 1_700_000_300);
    for (const s of [kept, excluded, notTrue]) await store.save(s, Readable.from([Buffer.from(s.snapName)]));
    const cc = az.containerClient(CONTAINER);
    await cc.getBlobClient(`${store.prefix}/${excluded.snapName}`).setTags({ 'x-etcd-snapshot-exclude': 'true' });
    await cc.getBlobClient(`${store.prefix}/${notTrue.snapName}`).setTags({ 'x-etcd-snapshot-exclude': 'false' });
    expect((await store.list()).map((s) => s.snapName)).toEqual([kept.snapName, notTrue.snapName]);
    expect((await store.list({ includeExcluded: true })).map((s) => s.snapName)).toEqual([
      kept.snapName,
      excluded.snapName,
      notTrue.snapName,
    ]);
  });

  it('a failed save of a new key leaves no uncommitted blob behind', async () => {
    const store = await open();
    const snap = testSnapshot('Full', 0, 5, 1_700_000_005);
    await expectCode(store.save(snap, generatedStream(3 * 5 * MiB, { failAfter: 5 * MiB + 100 }).stream), 'E_SAVE_FAILED');
    const names: string[] = [];
    for await (const b of az.containerClient(CONTAINER).listBlobsFlat({ prefix: store.prefix, includeUncommitedBlobs: true }))
      names.push(b.name);
    expect(names).toEqual([]);
  });

  it('a failed save over a committed blob keeps it; its staged blocks stay uncommitted until the next commit', async () => {
    const store = await open();
    const snap = testSnapshot('Full', 0, 6, 1_700_000_006);
    await store.save(snap, Readable.from([Buffer.from('committed')]));
    const blob = az.containerClient(CONTAINER).getBlockBlobClient(`${store.prefix}/${snap.snapName}`);
    // One full block; once Azure holds it staged, the input fails.
    async function* failing(): AsyncGenerator<Buffer> {
      yield pseudoRandomBytes(5 * MiB + 100, 1);
      await waitFor(async () => ((await blob.getBlockList('uncommitted')).uncommittedBlocks?.length ?? 0) > 0, 'the first block staged');
      throw new Error('input failed on purpose');
    }
    await expectCode(store.save(snap, Readable.from(failing())), 'E_SAVE_FAILED');
    const blocks = await blob.getBlockList('all');
    // Deleting the blob to drop them would delete the previous snapshot; Azure discards them itself.
    expect(blocks.uncommittedBlocks?.length).toBeGreaterThanOrEqual(1);
    expect((await blob.downloadToBuffer()).toString()).toBe('committed');
    await store.save(snap, Readable.from([Buffer.from('replaced')]));
    expect((await blob.getBlockList('all')).uncommittedBlocks ?? []).toEqual([]);
    expect((await blob.downloadToBuffer()).toString()).toBe('replaced');
  });

  describe('through a proxy', () => {
    let proxy: StageProxy;
    beforeAll(async () => {
      proxy = await startStageProxy(new URL(az.origin));
    });
    afterAll(async () => {
      await proxy.stop();
    });

    it('stages at most maxParallelChunkUploads blocks at once and reads ahead at most one block', async () => {
      const store = await open({ endpointOverride: `${proxy.origin}/${AZURITE_ACCOUNT}`, maxParallelChunkUploads: 3 });
      proxy.reset();
      proxy.hold = true;
      let produced = 0;
      // Read from the input but not yet answered by Azure, at its largest: checked over the whole save,
      // so no pause is needed to give an unbounded reader time to show itself.
      let maxAhead = 0;
      const total = 8 * 5 * MiB;
      const input = new Readable({
        read() {
          if (produced >= total) {
            this.push(null);
            return;
          }
          const piece = pseudoRandomBytes(256 * 1024, produced);
          produced += piece.length;
          maxAhead = Math.max(maxAhead, produced - proxy.completedStages * 5 * MiB);
          this.push(piece);
        },
      });
      const snap = testSnapshot('Full', 0, 8, 1_700_000_008);
      const saving = store.save(snap, input);
      await waitFor(() => proxy.held.length === 3, 'three stages held at the proxy', 20_000, 10);
      expect(proxy.completedStages).toBe(0);
      proxy.hold = false;
      proxy.release();
      await saving;
      expect(proxy.maxConcurrentStages).toBe(3);
      expect(proxy.stages).toBe(8);
      // 3 blocks staged + 1 being filled, plus what the input stream buffers (16 KiB + one piece).
      expect(maxAhead).toBeGreaterThanOrEqual(3 * 5 * MiB);
      expect(maxAhead).toBeLessThanOrEqual(4 * 5 * MiB + 512 * 1024);
      const got = (await store.list()).find((s) => s.snapName === snap.snapName) as Snapshot;
      expect(got.sizeBytes).toBe(total);
    });

    it("frees the block buffers when no save runs, after a failed save too, and stores each save's own bytes", async () => {
      const idleBlocks = new CountingIdleBuffers(3);
      const store = await open(
        { endpointOverride: `${proxy.origin}/${AZURITE_ACCOUNT}`, maxParallelChunkUploads: 2 },
        { retry: FAST_RETRY, idleBlocks },
      );
      const digest = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
      const blobOf = (snap: Snapshot) => az.containerClient(CONTAINER).getBlockBlobClient(`${store.prefix}/${snap.snapName}`);

      proxy.reset();
      const first = testSnapshot('Full', 0, 20, 1_700_000_020);
      const firstBytes = pseudoRandomBytes(3 * 5 * MiB + 7, 11);
      await store.save(first, Readable.from([firstBytes]));
      // Nothing kept for a later save: a quiet sidecar holds no block buffers.
      expect(idleBlocks.size).toBe(0);

      proxy.reset();
      proxy.failStage = 3;
      await expectCode(store.save(testSnapshot('Full', 0, 21, 1_700_000_021), generatedStream(5 * 5 * MiB).stream), 'E_SAVE_FAILED');
      expect(idleBlocks.size).toBe(0);

      proxy.reset();
      const second = testSnapshot('Full', 0, 22, 1_700_000_022);
      const secondBytes = pseudoRandomBytes(4 * 5 * MiB + 3, 12);
      await store.save(second, Readable.from([secondBytes]));
      expect(idleBlocks.hits).toBe(0);
      expect(idleBlocks.size).toBe(0);
      expect(digest(await blobOf(first).downloadToBuffer())).toBe(digest(firstBytes));
      expect(digest(await blobOf(second).downloadToBuffer())).toBe(digest(secondBytes));
    });

    it('a rejected block fails the save, commits nothing and cleans up the staged blocks', async () => {
      const store = await open(
        { endpointOverride: `${proxy.origin}/${AZURITE_ACCOUNT}`, maxParallelChunkUploads: 2 },
        { retry: FAST_RETRY },
      );
      proxy.reset();
      proxy.failStage = 3;
      const snap = testSnapshot('Full', 0, 9, 1_700_000_009);
      const err = await expectCode(store.save(snap, generatedStream(5 * 5 * MiB).stream), 'E_SAVE_FAILED');
      expect(err.message).toContain(snap.snapName);
      expect(proxy.commits).toBe(0);
      const names: string[] = [];
      for await (const b of az.containerClient(CONTAINER).listBlobsFlat({ prefix: store.prefix, includeUncommitedBlobs: true }))
        names.push(b.name);
      expect(names).toEqual([]);
    });
  });
});

describe('ABS immutability (stub with Azure documented answers; Azurite has no immutability policies)', () => {
  let stub: Server;
  let origin: string;
  const until = new Date(Date.now() + 3 * 86_400_000);
  until.setMilliseconds(0);
  const key = 'imm/v2/Full-00000000-00000100-1700000100.gz';

  beforeAll(async () => {
    stub = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://stub');
      req.resume();
      if (req.method === 'GET' && url.searchParams.get('comp') === 'list') {
        // List Blobs response (REST API reference) with an immutability policy on the blob.
        const xml =
          `<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="${origin}/devstoreaccount1/" ContainerName="${CONTAINER}">` +
          `<Prefix>imm/</Prefix><Blobs><Blob><Name>${key}</Name><Properties>` +
          `<Last-Modified>${new Date().toUTCString()}</Last-Modified><Etag>0x8DB0000000000001</Etag>` +
          `<Content-Length>42</Content-Length><Content-Type>application/octet-stream</Content-Type><BlobType>BlockBlob</BlobType>` +
          `<ImmutabilityPolicyUntilDate>${until.toUTCString()}</ImmutabilityPolicyUntilDate><ImmutabilityPolicyMode>locked</ImmutabilityPolicyMode>` +
          `</Properties></Blob></Blobs><NextMarker /></EnumerationResults>`;
        res.writeHead(200, { 'Content-Type': 'application/xml', 'x-ms-version': '2025-11-05' }).end(xml);
        return;
      }
      if (req.method === 'DELETE') {
        const xml =
          '<?xml version="1.0" encoding="utf-8"?><Error><Code>BlobImmutableDueToPolicy</Code>' +
          '<Message>This operation is not permitted as the blob is immutable due to a policy.</Message></Error>';
        res.writeHead(409, { 'Content-Type': 'application/xml', 'x-ms-error-code': 'BlobImmutableDueToPolicy' }).end(xml);
        return;
      }
      res.writeHead(200, { 'x-ms-version': '2025-11-05', ETag: '"0x1"', 'Last-Modified': new Date().toUTCString() }).end();
    });
    await new Promise<void>((r) => stub.listen(0, '127.0.0.1', () => r()));
    origin = `http://127.0.0.1:${(stub.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise<void>((r) => stub.close(() => r()));
  });

  it('lists immutabilityPolicyExpiresOn as immutabilityExpiryTime and maps BlobImmutableDueToPolicy to E_IMMUTABLE', async () => {
    const store = await openAbsStore(
      {
        provider: 'ABS',
        container: CONTAINER,
        prefix: 'imm/v2',
        endpointOverride: `${origin}/devstoreaccount1`,
        maxParallelChunkUploads: 1,
        minChunkSize: 5 * MiB,
        tempDir: tmpdir(),
        credentials: { storageAccount: AZURITE_ACCOUNT, storageKey: AZURITE_KEY },
      },
      { retry: FAST_RETRY },
    );
    const [snap] = await store.list();
    expect(snap?.snapName).toBe('Full-00000000-00000100-1700000100.gz');
    expect(snap?.immutabilityExpiryTime?.toISOString()).toBe(until.toISOString());
    expect(snap?.sizeBytes).toBe(42);
    const err = await expectCode(store.delete(snap as Snapshot), 'E_IMMUTABLE');
    expect(err.message).toContain(key);
    await store.close();
  });
});

// ---------------------------------------------------------------------------------------------------

interface StageProxy {
  origin: string;
  /** Hold every Put Block request until `release()`. */
  hold: boolean;
  held: (() => void)[];
  /** Answer the n-th Put Block (1-based) with 400. */
  failStage: number | undefined;
  stages: number;
  /** Put Block requests answered so far. */
  completedStages: number;
  commits: number;
  maxConcurrentStages: number;
  release(): void;
  reset(): void;
  stop(): Promise<void>;
}

/** A pass-through HTTP proxy to Azurite that counts, holds or fails Put Block requests. */
async function startStageProxy(target: URL): Promise<StageProxy> {
  let concurrent = 0;
  const state: StageProxy = {
    origin: '',
    hold: false,
    held: [],
    failStage: undefined,
    stages: 0,
    completedStages: 0,
    commits: 0,
    maxConcurrentStages: 0,
    release() {
      for (const go of state.held.splice(0)) go();
    },
    reset() {
      state.hold = false;
      state.failStage = undefined;
      state.stages = 0;
      state.completedStages = 0;
      state.commits = 0;
      state.maxConcurrentStages = 0;
      state.release();
    },
    stop: async () => {
      state.release();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  const forward = (req: IncomingMessage, res: ServerResponse, done: () => void): void => {
    const up = httpRequest({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
      r.on('end', done);
    });
    up.on('error', () => {
      res.destroy();
      done();
    });
    req.pipe(up);
  };
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://proxy');
    const comp = url.searchParams.get('comp');
    if (req.method === 'PUT' && comp === 'block') {
      const nth = ++state.stages;
      concurrent++;
      state.maxConcurrentStages = Math.max(state.maxConcurrentStages, concurrent);
      const finish = (): void => {
        concurrent--;
        state.completedStages++;
      };
      if (state.failStage === nth) {
        req.resume();
        req.on('end', () => {
          finish();
          res
            .writeHead(400, { 'Content-Type': 'application/xml', 'x-ms-error-code': 'InvalidBlobOrBlock' })
            .end('<?xml version="1.0" encoding="utf-8"?><Error><Code>InvalidBlobOrBlock</Code><Message>injected</Message></Error>');
        });
        return;
      }
      // Delay every stage a little so that parallel ones overlap measurably.
      const go = (): void => void setTimeout(() => forward(req, res, finish), 50);
      if (state.hold) state.held.push(go);
      else go();
      return;
    }
    if (req.method === 'PUT' && comp === 'blocklist') state.commits++;
    forward(req, res, () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  state.origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return state;
}
