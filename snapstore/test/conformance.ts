/**
 * One behavioural suite for every SnapStore provider (Local, S3, ABS, GCS). A provider test file calls
 * `describeSnapStoreConformance(name, harness)` with a harness that starts its backend (real emulator or
 * directory) and opens stores on it. Every case works under its own key root, so cases never see each
 * other's objects, and every case can fail: expectations are written out literally, not derived from
 * the code under test.
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isSnapStoreError } from '../src/errors.js';
import type { StoreConfigBase } from '../src/config.js';
import type { Logger } from '../src/logger.js';
import type { Snapshot, SnapshotKind } from '../src/snapshot.js';
import type { SnapStore } from '../src/store.js';
import { waitFor } from '../../test/support/wait.js';
import { startStatusProxy, type StatusProxy } from './support/status-proxy.js';

/** What a case may set in the configuration of a store opened through the proxy. */
export type ThroughConfig = Pick<StoreConfigBase, 'fetchStallTimeoutMs'>;

export interface ConformanceHarness {
  /**
   * Opens a store on the harness's backend. `prefix` is the effective store prefix exactly as
   * `StoreConfig.prefix` (it ends in `v2`, e.g. `a/b/v2`). Stores must be configured with
   * `minChunkSize` = 5 MiB (the minimum) so that the multipart cases really span several parts.
   * `logger` receives the provider's warnings (invalid keys).
   */
  open(opts?: { prefix?: string; logger?: Logger }): Promise<SnapStore>;
  /**
   * Raw listing of every object key in the backend, including anything a provider might leave
   * behind (temp files, uncommitted blocks, multipart parts), to prove there are no leftovers.
   */
  rawKeys(): Promise<string[]>;
  /** Puts raw bytes under an arbitrary key, bypassing the provider (plants invalid names, v1 objects). */
  putRaw(key: string, data: Buffer): Promise<void>;
  teardown(): Promise<void>;
  /**
   * A store whose endpoint is a closed port, configured with short timeouts and few retries; every
   * operation must reject with E_UNREACHABLE. Omit for providers without a network (Local).
   */
  openUnreachable?(): Promise<SnapStore>;
  /**
   * A store on the harness's backend whose requests go through the proxy `through(target)` starts in
   * front of `target` (the backend's endpoint) and whose URL it returns; configured with short timeouts
   * and few retries. The failure-code case injects statuses there, the stall case holds answers there.
   * `config` goes into the store's configuration as is. Omit for providers without a network.
   */
  openThrough?(through: (target: string) => Promise<string>, config?: ThroughConfig): Promise<SnapStore>;
  /**
   * Keys in `rawKeys()` that the backend itself cannot clean up although the provider asked it to
   * (s3rver answers AbortMultipartUpload with 405, so aborted parts stay on its disk). Such keys are
   * ignored by the leftover checks; the provider's own test must then prove the cleanup request was
   * sent. Leave undefined for backends that implement cleanup.
   */
  ignoreLeftover?(key: string): boolean;
  /**
   * The raw keys one saved object of `size` bytes occupies when the provider's documented layout has more
   * than one (Swift: a manifest `<key>` and its segments `<key>/%010d`). Default: `[key]`.
   */
  layout?(key: string, size: number): string[];
}

const MiB = 1024 * 1024;
const MIN_CHUNK = 5 * MiB;

/** A snapshot record as a caller creates it before saving (no prefix, v2 layout). */
export function testSnapshot(
  kind: SnapshotKind,
  startRevision: number,
  lastRevision: number,
  createdUnix: number,
  compressionSuffix = '.gz',
): Snapshot {
  const pad = (n: number): string => String(n).padStart(8, '0');
  return {
    kind,
    startRevision,
    lastRevision,
    createdOn: new Date(createdUnix * 1000),
    snapDir: '',
    snapName: `${kind}-${pad(startRevision)}-${pad(lastRevision)}-${createdUnix}${compressionSuffix}`,
    prefix: '',
    compressionSuffix,
    isChunk: false,
    isFinal: false,
  };
}

/** The object key a listed snapshot lives at (independent of the provider code on purpose). */
export function listedKey(s: Snapshot): string {
  const base = [s.prefix.replace(/\/$/, ''), s.snapDir, s.snapName].filter((p) => p !== '').join('/');
  return s.isChunk ? `${base}/${String(s.chunkNumber ?? 0).padStart(10, '0')}` : base;
}

/** Deterministic, incompressible-looking bytes (xorshift32), generated on the fly. */
export function pseudoRandomBytes(size: number, seed: number): Buffer {
  const out = Buffer.allocUnsafe(size);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < size; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x & 0xff;
  }
  return out;
}

export interface DataSource {
  stream: Readable;
  /** sha256 of everything the stream yields, known once it ended. */
  digest(): string;
}

/**
 * A stream of `size` pseudo-random bytes cut into pieces of the given sizes (cycled), so that part
 * boundaries never line up with the writes. `failAfter` makes it error once that many bytes are out.
 */
export function generatedStream(size: number, opts: { seed?: number; pieces?: number[]; failAfter?: number } = {}): DataSource {
  const pieces = opts.pieces ?? [65_537];
  const hash = createHash('sha256');
  let sent = 0;
  let i = 0;
  let seed = opts.seed ?? 7;
  const stream = new Readable({
    read() {
      if (opts.failAfter !== undefined && sent >= opts.failAfter) {
        this.destroy(new Error(`generated stream failed on purpose after ${sent} bytes`));
        return;
      }
      if (sent >= size) {
        this.push(null);
        return;
      }
      let n = Math.min(pieces[i++ % pieces.length] ?? 65_537, size - sent);
      if (opts.failAfter !== undefined) n = Math.min(n, opts.failAfter - sent);
      const chunk = pseudoRandomBytes(n, seed++);
      hash.update(chunk);
      sent += n;
      this.push(chunk);
    },
  });
  return { stream, digest: () => hash.copy().digest('hex') };
}

export async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.isBuffer(c) ? c : Buffer.from(c as Uint8Array));
  return Buffer.concat(chunks);
}

async function sha256Of(stream: Readable): Promise<{ hex: string; size: number }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const c of stream) {
    const b = c as Buffer;
    hash.update(b);
    size += b.length;
  }
  return { hex: hash.digest('hex'), size };
}

function captureLogger(): Logger & { warnings: unknown[] } {
  const warnings: unknown[] = [];
  return {
    warnings,
    debug() {},
    info() {},
    warn(obj: object | string, msg?: string) {
      warnings.push(msg ?? obj);
    },
    error() {},
  };
}

/** Expects `p` to reject with a SnapStoreError of `code`, and returns that error. */
export async function expectCode(p: Promise<unknown>, code: string): Promise<Error> {
  let err: unknown;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  expect(err, `expected rejection with ${code}`).toBeDefined();
  expect(isSnapStoreError(err), `expected a SnapStoreError, got ${String(err)}`).toBe(true);
  expect((err as { code: string }).code).toBe(code);
  return err as Error;
}

async function mapLimit<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++] as T;
      await fn(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

export interface ConformanceCapabilities {
  /** The backend can be pointed at a closed port (every network provider; not Local). Default true. */
  network?: boolean;
}

export function describeSnapStoreConformance(
  name: string,
  harness: () => Promise<ConformanceHarness>,
  capabilities: ConformanceCapabilities = {},
): void {
  describe(`SnapStore conformance: ${name}`, () => {
    let h: ConformanceHarness;
    const stores: SnapStore[] = [];
    // Unique per run so that a persistent backend never mixes runs.
    const run = `conf${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`;
    let counter = 0;

    /** A fresh key root for one case. */
    const root = (): string => `${run}-${++counter}`;

    const open = async (prefix: string, logger?: Logger): Promise<SnapStore> => {
      const s = await h.open(logger ? { prefix, logger } : { prefix });
      stores.push(s);
      return s;
    };

    const keysUnder = async (r: string): Promise<string[]> =>
      (await h.rawKeys()).filter((k) => k.startsWith(`${r}/`) && !(h.ignoreLeftover?.(k) ?? false)).sort();

    const save = async (store: SnapStore, snap: Snapshot, data: Buffer): Promise<void> => {
      await store.save(snap, Readable.from([data]));
    };

    const findListed = async (store: SnapStore, snapName: string): Promise<Snapshot> => {
      const found = (await store.list()).find((s) => s.snapName === snapName);
      expect(found, `${snapName} listed`).toBeDefined();
      return found as Snapshot;
    };

    beforeAll(async () => {
      h = await harness();
    });

    afterAll(async () => {
      for (const s of stores) await s.close().catch(() => undefined);
      await h?.teardown();
    });

    it('round-trips a small object and lists it with its size', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      expect(store.prefix).toBe(`${r}/v2`);
      const snap = testSnapshot('Full', 0, 1234, 1_700_000_000);
      const data = pseudoRandomBytes(1000, 1);
      await save(store, snap, data);

      const list = await store.list();
      expect(list).toHaveLength(1);
      const got = list[0] as Snapshot;
      expect(got.kind).toBe('Full');
      expect(got.startRevision).toBe(0);
      expect(got.lastRevision).toBe(1234);
      expect(got.createdOn.toISOString()).toBe('2023-11-14T22:13:20.000Z');
      expect(got.snapName).toBe('Full-00000000-00001234-1700000000.gz');
      expect(got.snapDir).toBe('');
      expect(got.prefix).toBe(`${r}/v2/`);
      expect(got.compressionSuffix).toBe('.gz');
      expect(got.isChunk).toBe(false);
      expect(got.sizeBytes).toBe(1000);
      expect(await keysUnder(r)).toEqual([`${r}/v2/Full-00000000-00001234-1700000000.gz`]);

      expect((await readAll(await store.fetch(got))).equals(data)).toBe(true);
    });

    it('round-trips an empty object', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      const snap = testSnapshot('Incr', 1235, 1300, 1_700_000_100, '');
      await store.save(snap, Readable.from([]));
      const got = await findListed(store, 'Incr-00001235-00001300-1700000100');
      expect(got.sizeBytes).toBe(0);
      expect(got.compressionSuffix).toBe('');
      expect(await readAll(await store.fetch(got))).toHaveLength(0);
    });

    it('round-trips a multi-part object written in odd pieces', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      const size = 2 * MIN_CHUNK + 777_777;
      const src = generatedStream(size, { seed: 42, pieces: [65_537, 1_000_003, 3, 524_287] });
      const snap = testSnapshot('Full', 0, 5000, 1_700_000_200);
      await store.save(snap, src.stream);
      const got = await findListed(store, snap.snapName);
      expect(got.sizeBytes).toBe(size);
      const back = await sha256Of(await store.fetch(got));
      expect(back.size).toBe(size);
      expect(back.hex).toBe(src.digest());
      expect(await keysUnder(r)).toEqual(h.layout?.(`${r}/v2/${snap.snapName}`, size) ?? [`${r}/v2/${snap.snapName}`]);
    });

    it('fetches byte ranges (inclusive end, open end)', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      const data = pseudoRandomBytes(100_000, 3);
      const snap = testSnapshot('Full', 0, 10, 1_700_000_300);
      await save(store, snap, data);
      const got = await findListed(store, snap.snapName);
      // (0-1, not 0-0: s3rver reads an end of 0 as "to the end", a bug of the emulator.)
      expect((await readAll(await store.fetch(got, { start: 0, end: 1 }))).equals(data.subarray(0, 2))).toBe(true);
      expect((await readAll(await store.fetch(got, { start: 10, end: 99 }))).equals(data.subarray(10, 100))).toBe(true);
      expect((await readAll(await store.fetch(got, { start: 1000 }))).equals(data.subarray(1000))).toBe(true);
      expect((await readAll(await store.fetch(got, { start: 99_999, end: 99_999 }))).equals(data.subarray(99_999))).toBe(true);
    });

    it('lists sorted by lastRevision, non-chunk before chunk, then createdOn', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      // Planted in an order that is neither sorted nor reverse sorted.
      const keys = [
        `${r}/v2/Full-00000000-00000300-1700000400.gz`,
        `${r}/v2/Full-00000000-00000200-1700000150.gz/0000000001`,
        `${r}/v2/Incr-00000201-00000300-1700000050.gz`,
        `${r}/v2/Full-00000000-00000100-1700000100.gz`,
        `${r}/v2/Incr-00000101-00000200-1700000200.gz`,
      ];
      for (const k of keys) await h.putRaw(k, Buffer.from(k));
      const list = await store.list();
      expect(list.map(listedKey)).toEqual([
        `${r}/v2/Full-00000000-00000100-1700000100.gz`,
        // same lastRevision 200: the non-chunk comes first although the chunk is older
        `${r}/v2/Incr-00000101-00000200-1700000200.gz`,
        `${r}/v2/Full-00000000-00000200-1700000150.gz/0000000001`,
        // same lastRevision 300, both non-chunk: older createdOn first
        `${r}/v2/Incr-00000201-00000300-1700000050.gz`,
        `${r}/v2/Full-00000000-00000300-1700000400.gz`,
      ]);
      const chunk = list[2] as Snapshot;
      expect(chunk.isChunk).toBe(true);
      expect(chunk.snapName).toBe('Full-00000000-00000200-1700000150.gz');
      expect(chunk.chunkNumber).toBe(1);
      expect((await readAll(await store.fetch(chunk))).toString()).toBe(`${r}/v2/Full-00000000-00000200-1700000150.gz/0000000001`);
    });

    it('lists v1 and v2 keys, fetches and deletes a v1 snapshot', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      const v1Key = `${r}/v1/Backup-1600000000/Full-00000000-00000050-1600000000.gz`;
      await h.putRaw(v1Key, Buffer.from('v1 full'));
      await save(store, testSnapshot('Incr', 51, 60, 1_700_000_000), Buffer.from('v2 incr'));
      const list = await store.list();
      expect(list.map(listedKey)).toEqual([v1Key, `${r}/v2/Incr-00000051-00000060-1700000000.gz`]);
      const v1 = list[0] as Snapshot;
      expect(v1.snapDir).toBe('Backup-1600000000');
      expect(v1.prefix).toBe(`${r}/v1/`);
      expect(v1.snapName).toBe('Full-00000000-00000050-1600000000.gz');
      expect(v1.sizeBytes).toBe(7);
      expect((await readAll(await store.fetch(v1))).toString()).toBe('v1 full');
      await store.delete(v1);
      expect((await store.list()).map(listedKey)).toEqual([`${r}/v2/Incr-00000051-00000060-1700000000.gz`]);
      expect(await keysUnder(r)).toEqual([`${r}/v2/Incr-00000051-00000060-1700000000.gz`]);
    });

    it('skips keys that do not parse, with a warning, and lists the rest', async () => {
      const r = root();
      const logger = captureLogger();
      const store = await open(`${r}/v2`, logger);
      const bad = [
        `${r}/v2/Full-00000000-00000100`, // 3 name tokens
        `${r}/v2/Full-00000000-0000x100-1700000000.gz`, // non-numeric revision
        `${r}/v2/Incr-00000200-00000100-1700000000.gz`, // start > last
        `${r}/v2/Foo-00000000-00000100-1700000000.gz`, // unknown kind
        `${r}/Full-00000000-00000100-1700000000.gz`, // neither v1/ nor v2/
        `${r}/v2/a/b/Full-00000000-00000100-1700000000.gz`, // too many path tokens
        `${r}/v2/Full-00000000-00000100-notatime.gz`, // non-numeric time
      ];
      for (const k of bad) await h.putRaw(k, Buffer.from('x'));
      await save(store, testSnapshot('Full', 0, 100, 1_700_000_000), Buffer.from('good'));
      const list = await store.list();
      expect(list.map(listedKey)).toEqual([`${r}/v2/Full-00000000-00000100-1700000000.gz`]);
      expect(logger.warnings.length).toBeGreaterThanOrEqual(bad.length);
    });

    it('keeps a nested store prefix and does not list a sibling prefix', async () => {
      const r = root();
      const store = await open(`${r}/a/b/v2`);
      expect(store.prefix).toBe(`${r}/a/b/v2`);
      await save(store, testSnapshot('Full', 0, 20, 1_700_000_020), Buffer.from('mine'));
      await h.putRaw(`${r}/a/b/v1/Backup-1600000000/Full-00000000-00000010-1600000000.gz`, Buffer.from('v1'));
      // Siblings that a raw string prefix `a/b` would match (upstream quirk we do not keep).
      await h.putRaw(`${r}/a/b2/v2/Full-00000000-00000030-1700000030.gz`, Buffer.from('sibling'));
      await h.putRaw(`${r}/a/bv2/Full-00000000-00000040-1700000040.gz`, Buffer.from('sibling'));
      // Above the store's parent directory.
      await h.putRaw(`${r}/a/v2/Full-00000000-00000050-1700000050.gz`, Buffer.from('parent'));
      expect((await store.list()).map(listedKey)).toEqual([
        `${r}/a/b/v1/Backup-1600000000/Full-00000000-00000010-1600000000.gz`,
        `${r}/a/b/v2/Full-00000000-00000020-1700000020.gz`,
      ]);
      expect(await keysUnder(`${r}/a/b`)).toEqual([
        `${r}/a/b/v1/Backup-1600000000/Full-00000000-00000010-1600000000.gz`,
        `${r}/a/b/v2/Full-00000000-00000020-1700000020.gz`,
      ]);
    });

    for (const [label, failAfter] of [
      ['early', 1000],
      ['after more than one part', MIN_CHUNK + 1_234_567],
    ] as const) {
      it(`save of a stream that errors ${label} rejects and leaves nothing`, async () => {
        const r = root();
        const store = await open(`${r}/v2`);
        const before = await keysUnder(r);
        const src = generatedStream(3 * MIN_CHUNK, { failAfter, pieces: [100_003] });
        const err = await expectCode(store.save(testSnapshot('Full', 0, 99, 1_700_000_099), src.stream), 'E_SAVE_FAILED');
        expect(String((err as Error).message)).toContain('Full-00000000-00000099-1700000099.gz');
        expect(await store.list()).toEqual([]);
        expect(await keysUnder(r)).toEqual(before);
      });
    }

    it('a failed save over an existing key keeps the previous object', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      const snap = testSnapshot('Full', 0, 77, 1_700_000_077);
      await save(store, snap, Buffer.from('first'));
      const src = generatedStream(3 * MIN_CHUNK, { failAfter: MIN_CHUNK + 10 });
      await expectCode(store.save(snap, src.stream), 'E_SAVE_FAILED');
      const got = await findListed(store, snap.snapName);
      expect((await readAll(await store.fetch(got))).toString()).toBe('first');
      expect(await keysUnder(r)).toEqual([`${r}/v2/${snap.snapName}`]);
    });

    it('save aborted by its signal rejects and leaves nothing', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      const controller = new AbortController();
      let sent = 0;
      // Produces a bit more than one part, then stalls as a slow etcd would; the abort must end it.
      const stalled = new Readable({
        read() {
          if (sent >= MIN_CHUNK + 300_000) {
            if (!controller.signal.aborted) setTimeout(() => controller.abort(), 50);
            return;
          }
          const n = 100_000;
          sent += n;
          this.push(pseudoRandomBytes(n, sent));
        },
      });
      await expectCode(store.save(testSnapshot('Full', 0, 88, 1_700_000_088), stalled, { signal: controller.signal }), 'E_SAVE_FAILED');
      expect(await store.list()).toEqual([]);
      expect(await keysUnder(r)).toEqual([]);
      // A save that ignored the abort would hang on the stalled input: the test's timeout is the bound.
    }, 30_000);

    it('save with an already aborted signal rejects and writes nothing', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      const controller = new AbortController();
      controller.abort();
      await expectCode(
        store.save(testSnapshot('Full', 0, 89, 1_700_000_089), Readable.from([Buffer.from('x')]), {
          signal: controller.signal,
        }),
        'E_SAVE_FAILED',
      );
      expect(await store.list()).toEqual([]);
      expect(await keysUnder(r)).toEqual([]);
    });

    it('save replaces an existing key', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      const snap = testSnapshot('Incr', 5, 9, 1_700_000_009);
      await save(store, snap, Buffer.from('first version'));
      await save(store, snap, Buffer.from('second'));
      const list = await store.list();
      expect(list).toHaveLength(1);
      expect(list[0]?.sizeBytes).toBe(6);
      expect((await readAll(await store.fetch(list[0] as Snapshot))).toString()).toBe('second');
      expect(await keysUnder(r)).toEqual([`${r}/v2/${snap.snapName}`]);
    });

    it('delete removes the object; fetch and delete of a missing object are E_NOT_FOUND', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      const snap = testSnapshot('Full', 0, 66, 1_700_000_066);
      await save(store, snap, Buffer.from('bye'));
      const got = await findListed(store, snap.snapName);
      await store.delete(got);
      expect(await store.list()).toEqual([]);
      expect(await keysUnder(r)).toEqual([]);
      const e1 = await expectCode(store.fetch(got), 'E_NOT_FOUND');
      expect(String((e1 as Error).message)).toContain(snap.snapName);
      await expectCode(store.delete(got), 'E_NOT_FOUND');
      // A record that was never listed, addressed with the store's own prefix.
      const never = { ...testSnapshot('Incr', 67, 70, 1_700_000_070), prefix: `${r}/v2/` };
      await expectCode(store.fetch(never), 'E_NOT_FOUND');
      await expectCode(store.fetch(never, { start: 5 }), 'E_NOT_FOUND');
      await expectCode(store.delete(never), 'E_NOT_FOUND');
    });

    it('lists more than a page (1010 objects)', async () => {
      const r = root();
      const store = await open(`${r}/v2`);
      const n = 1010; // S3 pages are 1000 keys
      // Revisions in reverse of planting order to prove the listing is sorted, not just passed through.
      const revs = Array.from({ length: n }, (_, i) => n - i);
      await mapLimit(revs, 24, (rev) =>
        h.putRaw(`${r}/v2/Incr-${String(rev).padStart(8, '0')}-${String(rev).padStart(8, '0')}-1700000000.gz`, Buffer.alloc(0)),
      );
      const list = await store.list();
      expect(list).toHaveLength(n);
      expect(list.map((s) => s.lastRevision)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    }, 120_000);

    // Local has no network, so the case does not exist for it (rather than being skipped).
    if (capabilities.network !== false)
      it('operations on an unreachable endpoint reject with E_UNREACHABLE', async () => {
        if (!h.openUnreachable) throw new Error(`harness ${name} has no openUnreachable although it is a network store`);
        const store = await h.openUnreachable();
        stores.push(store);
        const snap = { ...testSnapshot('Full', 0, 1, 1_700_000_001), prefix: `${store.prefix}/` };
        await expectCode(store.list(), 'E_UNREACHABLE');
        await expectCode(store.fetch(snap), 'E_UNREACHABLE');
        await expectCode(store.delete(snap), 'E_UNREACHABLE');
        const err = await expectCode(store.save(snap, Readable.from([Buffer.from('x')])), 'E_UNREACHABLE');
        expect((err as Error).message).toMatch(/127\.0\.0\.1|localhost/);
        // Retrying an unreachable endpoint for minutes would fail on the test's timeout.
      }, 30_000);

    // One rule for every provider: the status alone (no vendor error code in the body) decides the code.
    const FAILURE_CODES: [number, string][] = [
      [400, 'E_CONFIG'],
      [403, 'E_CREDENTIALS'],
      [404, 'E_NOT_FOUND'],
      [408, 'E_UNREACHABLE'],
      [429, 'E_UNREACHABLE'],
      [503, 'E_UNREACHABLE'],
    ];
    if (capabilities.network !== false)
      it('a fetch answered 400, 403, 404, 408, 429 or 503 rejects with the same code on every provider', async () => {
        if (!h.openThrough) throw new Error(`harness ${name} has no openThrough although it is a network store`);
        const marker = `${run}-fault`;
        let proxy: StatusProxy | undefined;
        try {
          const store = await h.openThrough(async (target) => {
            proxy = await startStatusProxy(target, marker);
            return proxy.url;
          });
          stores.push(store);
          if (!proxy) throw new Error(`harness ${name} opened a store without the proxy`);
          const snap = { ...testSnapshot('Full', 0, 1, 1_700_000_002), prefix: `${store.prefix}/`, snapDir: marker };
          const seen: Record<number, string> = {};
          for (const [status] of FAILURE_CODES) {
            proxy.status = status;
            const before = proxy.injected;
            try {
              await readAll(await store.fetch(snap));
              seen[status] = 'resolved';
            } catch (err) {
              seen[status] = isSnapStoreError(err) ? err.code : `untyped ${String(err)}`;
            }
            expect(proxy.injected, `the ${status} was injected`).toBeGreaterThan(before);
          }
          expect(seen).toEqual(Object.fromEntries(FAILURE_CODES));
        } finally {
          await proxy?.stop();
        }
      }, 60_000);

    if (capabilities.network !== false)
      it('a fetch from a store that goes silent ends at the stall deadline with E_UNREACHABLE; its signal ends it at once', async () => {
        if (!h.openThrough) throw new Error(`harness ${name} has no openThrough although it is a network store`);
        const marker = `${run}-stall`;
        let proxy: StatusProxy | undefined;
        try {
          const store = await h.openThrough(
            async (target) => {
              proxy = await startStatusProxy(target, marker);
              return proxy.url;
            },
            { fetchStallTimeoutMs: 1500 },
          );
          stores.push(store);
          if (!proxy) throw new Error(`harness ${name} opened a store without the proxy`);
          const listed = { ...testSnapshot('Full', 0, 1, 1_700_000_003), prefix: `${store.prefix}/`, snapDir: marker };
          await store.save(listed, Readable.from([pseudoRandomBytes(300_000, 5)]));
          // The object itself is fine: unstalled, it comes back whole.
          expect(await readAll(await store.fetch(listed))).toHaveLength(300_000);

          for (const stall of ['answer', 'body'] as const) {
            proxy.stall = stall;
            const before = proxy.stalled;
            const err = await expectCode((async () => readAll(await store.fetch(listed)))(), 'E_UNREACHABLE');
            expect(proxy.stalled, `the ${stall} was held`).toBeGreaterThan(before);
            // Names the object and the store (its kind and where it is), and what happened.
            expect(err.message).toContain(listed.snapName);
            expect(err.message).toMatch(/\b(S3|ABS|GCS|Swift|OSS)\b.*127\.0\.0\.1:\d+/);
            expect(err.message).toContain(stall === 'answer' ? 'did not answer for 1500 ms' : 'stopped sending for 1500 ms');
          }

          // The caller's signal ends a held fetch at once, with its own reason, both before and after the answer.
          for (const stall of ['answer', 'body'] as const) {
            proxy.stall = stall;
            const caller = new AbortController();
            const reason = new Error(`interrupted while ${stall === 'answer' ? 'waiting' : 'reading'}`);
            const read = (async () => readAll(await store.fetch(listed, undefined, { signal: caller.signal })))();
            read.catch(() => undefined);
            const held = proxy.stalled;
            await waitFor(() => proxy!.stalled > held, `the ${stall} of a fetch to be held`, 10_000, 5);
            caller.abort(reason);
            await expect(read).rejects.toBe(reason);
          }
        } finally {
          await proxy?.stop();
        }
      }, 60_000);
  });
}
