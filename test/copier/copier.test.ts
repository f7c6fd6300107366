/**
 * The copier between real stores: Local, S3 (s3rver), ABS (Azurite) and GCS (the fake JSON API), with an
 * upstream v0.23 store (plus v1-layout objects) as the source. Every hop must reproduce every object byte
 * for byte under its own key (`.final` dropped, v1 kept v1); a second run copies nothing; selection by
 * count, age and the final-snapshot wait; failures (outage, corrupt or unreadable source) commit nothing
 * partial and name the object.
 */
import { createHash } from 'node:crypto';
import { cp, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { generateX25519Identity, identityToRecipient } from 'age-encryption';
import { createCompressStream, newSnapshot, storedBytesStore, withEncryption, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { openS3Store } from '../../snapstore/src/providers/s3.js';
import { AZURITE_ACCOUNT, AZURITE_KEY, startAzurite, type Azurite } from '../../snapstore/test/support/azurite.js';
import { FakeGcsServer } from '../../snapstore/test/support/fake-gcs.js';
import { S3RVER_CREDENTIALS, startS3rver, type S3rverInstance } from '../../snapstore/test/support/s3rver.js';
import { FakeClock, systemClock } from '../../src/clock.js';
import type { CopierConfig } from '../../src/config/types.js';
import { CopyError, copyBackups, type CopierDeps } from '../../src/copier/copier.js';
import { startFaultyStoreProxy } from '../../e2e/support/faulty-store.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { recordingLogger } from '../support/logger.js';
import { waitFor } from '../support/wait.js';
import { bytesOf, putSnapshot, snapshotPayload, testStores, withFetchProgress } from './support.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';

const COMPAT = UPSTREAM_V023;
const MiB = 1024 * 1024;
const DAY = 24 * 60 * 60 * 1000;

const cleanups = cleanupAfterEach();

// Emulators are started once for the file, on first use.
const lazy = <T>(start: () => Promise<T>, stop: (t: T) => Promise<unknown>) => {
  let p: Promise<T> | undefined;
  afterAll(async () => {
    if (p) await stop(await p);
  });
  return () => (p ??= start());
};
const s3rver = lazy(
  () => startS3rver({ bucket: 'copy' }),
  (s: S3rverInstance) => s.stop(),
);
const azurite = lazy(
  async () => {
    const az = await startAzurite();
    await az.createContainer('copy');
    return az;
  },
  (az: Azurite) => az.stop(),
);
const fakeGcs = lazy(
  () => FakeGcsServer.start({ buckets: ['copy'] }),
  (g: FakeGcsServer) => g.stop(),
);

const tempDir = (tag: string) => cleanups.tempDir(`etcdbr-copy-${tag}-`);

const { base, open, local, s3 } = testStores(cleanups, 'copy', s3rver);
const abs = async (prefix: string, dir: string) =>
  open({
    ...base(prefix, dir),
    provider: 'ABS',
    endpointOverride: (await azurite()).accountEndpoint,
    credentials: { storageAccount: AZURITE_ACCOUNT, storageKey: AZURITE_KEY },
  });
const gcs = async (prefix: string, dir: string) =>
  open({ ...base(prefix, dir), provider: 'GCS', endpointOverride: (await fakeGcs()).endpoint });

const ALL: CopierConfig = {
  maxBackupsToCopy: -1,
  maxBackupAge: -1,
  maxParallelCopyOperations: 10,
  waitForFinalSnapshot: false,
  waitForFinalSnapshotTimeout: 0,
};

function deps(source: SnapStore, destination: SnapStore, over: Partial<CopierDeps> = {}): CopierDeps {
  return { source, destination, logger: recordingLogger(), clock: systemClock, finalSnapshotPollMs: 50, ...over };
}

/** `<v1|v2>/<snapDir>/<name without .final>` → sha256 of the stored bytes, for every object. */
async function contents(store: SnapStore): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const s of await store.list()) {
    const layout = s.prefix.replace(/\/$/, '').split('/').at(-1);
    const key = [layout, s.snapDir, s.snapName.replace(/\.final$/, '')].filter(Boolean).join('/');
    out.set(
      key,
      createHash('sha256')
        .update(await bytesOf(store, s))
        .digest('hex'),
    );
  }
  return out;
}

/**
 * The `final-gzip` upstream store (its newest full is `.final`) plus older v1-layout objects (taken from
 * the `none` store): `v1/Backup-1795219380/Full-…-283` and a delta after it.
 */
async function sourceStore(dir: string): Promise<SnapStore> {
  const root = join(dir, 'source');
  await cp(join(COMPAT, 'final-gzip', 'snapstore'), root, { recursive: true });
  await mkdir(join(root, 'v1', 'Backup-1795219380'), { recursive: true });
  for (const name of ['Full-00000000-00000283-1795219380', 'Incr-00000284-00000321-1795219384']) {
    await cp(join(COMPAT, 'none', 'snapstore', 'v2', name), join(root, 'v1', 'Backup-1795219380', name));
  }
  return local(root, dir);
}

describe('copy across providers', () => {
  it('Local → S3 → ABS → GCS: every object byte for byte, .final dropped, v1 kept v1; re-runs copy nothing', async () => {
    const dir = await tempDir('chain');
    const source = await sourceStore(dir);
    const expected = await contents(source);
    expect([...expected.keys()].some((k) => k.startsWith('v1/Backup-1795219380/'))).toBe(true);
    expect((await source.list()).some((s) => s.isFinal)).toBe(true);

    const stores = [source, await s3('chain/v2', dir), await abs('chain/v2', dir), await gcs('chain/v2', dir)];
    for (let i = 1; i < stores.length; i++) {
      const from = stores[i - 1] as SnapStore;
      const to = stores[i] as SnapStore;
      const first = await copyBackups(deps(from, to), ALL);
      expect(first.copied).toHaveLength(expected.size);
      expect(first.failures).toEqual([]);
      expect(await contents(to)).toEqual(expected);
      const listed = await to.list();
      expect(listed.filter((s) => s.isFinal)).toEqual([]);
      expect(listed.filter((s) => s.snapDir === 'Backup-1795219380').map((s) => s.prefix)).toEqual(['chain/v1/', 'chain/v1/']);

      const again = await copyBackups(deps(from, to), ALL);
      expect(again.copied).toEqual([]);
      expect(again.skipped).toHaveLength(expected.size);
    }
  });

  it('Local → Local with one worker gives the same result as with many', async () => {
    const dir = await tempDir('serial');
    const source = await sourceStore(dir);
    const dest = await local(join(dir, 'dest'), dir, 'other/v2');
    const r = await copyBackups(deps(source, dest), { ...ALL, maxParallelCopyOperations: 1 });
    expect(r.copied).toHaveLength(8);
    expect(await contents(dest)).toEqual(await contents(source));
  });
});

describe('what gets copied', () => {
  it('--max-backups-to-copy=1: only the newest full and its deltas', async () => {
    const dir = await tempDir('max');
    const root = join(dir, 'source');
    await cp(join(COMPAT, 'two-fulls-gzip', 'snapstore'), root, { recursive: true });
    const source = await local(root, dir);
    const dest = await local(join(dir, 'dest'), dir);
    const r = await copyBackups(deps(source, dest), { ...ALL, maxBackupsToCopy: 1 });
    expect(r.copied.map((s) => s.snapName).sort()).toEqual([
      'Full-00000000-00000297-1795219513.gz',
      'Incr-00000298-00000327-1795219515.gz',
    ]);
    expect((await dest.list()).map((s) => s.snapName)).toEqual([
      'Full-00000000-00000297-1795219513.gz',
      'Incr-00000298-00000327-1795219515.gz',
    ]);
  });

  it('--max-backup-age: only backups whose full is younger than the age in days', async () => {
    const dir = await tempDir('age');
    const source = await local(join(dir, 'source'), dir);
    const now = new Date('2027-06-01T12:00:00Z');
    const t = (days: number, sec = 0) => new Date(now.getTime() - days * DAY + sec * 1000);
    // Backups whose fulls are 10, 3 and 1 days old, each with two deltas.
    let rev = 0;
    for (const days of [10, 3, 1]) {
      await putSnapshot(source, 'Full', 0, (rev += 10), t(days), { suffix: '.gz' });
      await putSnapshot(source, 'Incr', rev + 1, (rev += 5), t(days, 60));
      await putSnapshot(source, 'Incr', rev + 1, (rev += 5), t(days, 120), { suffix: '.zlib' });
    }
    const names = async (maxBackupAge: number) => {
      const dest = await local(join(dir, `dest-${maxBackupAge}`), dir);
      const r = await copyBackups(deps(source, dest, { clock: new FakeClock(now) }), { ...ALL, maxBackupAge });
      return r.copied.map((s) => `${s.kind}-${s.lastRevision}`).sort();
    };
    expect(await names(2)).toEqual(['Full-50', 'Incr-55', 'Incr-60']);
    expect(await names(5)).toEqual(['Full-30', 'Full-50', 'Incr-35', 'Incr-40', 'Incr-55', 'Incr-60']);
    expect(await names(0)).toEqual([]);
    expect(await names(-1)).toHaveLength(9);
  });

  it('copying nothing says where the source was looked for and why nothing was taken', async () => {
    const dir = await tempDir('none');
    const source = await local(join(dir, 'source'), dir);
    const dest = await local(join(dir, 'dest'), dir);
    const where = 'Local store /somewhere/v2';
    const now = new Date('2027-06-01T12:00:00Z');
    const run = async (config: Partial<CopierConfig> = {}) => {
      const logger = recordingLogger();
      const r = await copyBackups(deps(source, dest, { clock: new FakeClock(now), logger, sourceLocation: where }), { ...ALL, ...config });
      expect(r.selected).toEqual([]);
      expect(logger.lines.find((l) => l.msg.startsWith('No source backups found'))?.msg).toBe(`No source backups found: ${r.nothingFound}`);
      return r.nothingFound;
    };
    expect(await run()).toBe(
      `no snapshots in ${where} (check --source-storage-provider, --source-store-container and --source-store-prefix)`,
    );
    await putSnapshot(source, 'Incr', 11, 15, new Date(now.getTime() - 3 * DAY));
    expect(await run()).toBe(`no full snapshot in ${where}, only 1 delta snapshot (a backup starts with a full snapshot)`);
    await putSnapshot(source, 'Full', 0, 10, new Date(now.getTime() - 3 * DAY - 60_000));
    expect(await run({ maxBackupAge: 2 })).toBe(
      `none of the 1 backup(s) in ${where} is younger than --max-backup-age=2 day(s); the newest full snapshot was taken 2027-05-29T11:59:00.000Z`,
    );
    expect(await run({ maxBackupsToCopy: 0 })).toBe(`--max-backups-to-copy=0 selects none of the 1 backup(s) in ${where}`);
    // Without a location (the secondary sync): the source store, unnamed.
    const r = await copyBackups(deps(source, dest), { ...ALL, maxBackupsToCopy: 0 });
    expect(r.nothingFound).toBe('--max-backups-to-copy=0 selects none of the 1 backup(s) in the source store');
    // Something selected: no reason.
    expect((await copyBackups(deps(source, dest), ALL)).nothingFound).toBeUndefined();
  });

  it('counts the bytes written to the destination: the age files when it encrypts', async () => {
    const dir = await tempDir('bytes');
    const source = await local(join(dir, 'source'), dir);
    await putSnapshot(source, 'Full', 0, 10, new Date('2027-01-01T00:00:00Z'), { suffix: '.gz', size: 200_000 });
    await putSnapshot(source, 'Incr', 11, 15, new Date('2027-01-01T00:01:00Z'), { suffix: '.gz' });
    const recipient = await identityToRecipient(await generateX25519Identity());
    const dest = withEncryption(storedBytesStore(await local(join(dir, 'dest'), dir)), { recipients: [recipient], identities: [] });
    const r = await copyBackups(deps(source, dest), ALL);
    const written = (await dest.list()).map((s) => s.sizeBytes!);
    expect((await dest.list()).every((s) => s.isEncrypted === true)).toBe(true);
    expect(r.bytes).toBe(written.reduce((a, b) => a + b, 0));
    const plainBytes = (await source.list()).reduce((a, s) => a + s.sizeBytes!, 0);
    expect(r.bytes).toBeGreaterThan(plainBytes);
  });

  it('skips what the destination has under the name without .final, and never writes .final', async () => {
    const dir = await tempDir('final');
    const source = await local(join(dir, 'source'), dir);
    const dest = await local(join(dir, 'dest'), dir);
    const created = new Date('2027-01-01T00:00:00Z');
    const final = await putSnapshot(source, 'Full', 0, 10, created, { suffix: '.gz', isFinal: true });
    expect(final.snapName).toBe(`Full-00000000-00000010-${created.getTime() / 1000}.gz.final`);
    const r = await copyBackups(deps(source, dest), ALL);
    expect(r.copied.map((s) => s.snapName)).toEqual([final.snapName]);
    const listed = await dest.list();
    expect(listed.map((s) => [s.snapName, s.isFinal])).toEqual([[final.snapName.replace(/\.final$/, ''), false]]);
    expect(await bytesOf(dest, listed[0] as Snapshot)).toEqual(await bytesOf(source, (await source.list())[0] as Snapshot));
    expect((await copyBackups(deps(source, dest), ALL)).copied).toEqual([]);
  });
});

describe('--wait-for-final-snapshot', () => {
  const config: CopierConfig = { ...ALL, waitForFinalSnapshot: true };

  /**
   * The copier on a FakeClock, polling the source every 50 ms of fake time. While it waits for the next poll
   * its one sleep is the clock's only timer, so `polling()` resolves once a listing found no final.
   */
  function waitingCopy(source: SnapStore, dest: SnapStore, conf: CopierConfig, over: Partial<CopierDeps> = {}) {
    const clock = new FakeClock('2027-06-01T00:00:00Z');
    const logger = recordingLogger();
    let settled = false;
    const run = copyBackups(deps(source, dest, { clock, logger, ...over }), conf);
    void run.then(
      () => (settled = true),
      () => (settled = true),
    );
    const polling = () => waitFor(() => clock.pending === 1, 'the copier to wait for its next poll', 10_000, 5);
    return { clock, logger, run, polling, settled: () => settled };
  }

  it('blocks until a final full appears among the newest 4 fulls, then copies it', async () => {
    const dir = await tempDir('wait');
    const source = await local(join(dir, 'source'), dir);
    const dest = await local(join(dir, 'dest'), dir);
    const t0 = new Date('2027-01-01T00:00:00Z').getTime();
    // A final that is only the 5th newest full does not count.
    await putSnapshot(source, 'Full', 0, 10, new Date(t0), { isFinal: true });
    for (let i = 1; i <= 4; i++) await putSnapshot(source, 'Full', 0, 10 + i * 10, new Date(t0 + i * 1000));
    const c = waitingCopy(source, dest, config);
    // Three polls find no final among the newest 4: still waiting, nothing copied.
    for (let i = 0; i < 3; i++) {
      await c.polling();
      c.clock.advance(50);
    }
    await c.polling();
    expect(c.settled()).toBe(false);
    expect(await dest.list()).toEqual([]);
    await putSnapshot(source, 'Full', 0, 100, new Date(t0 + 60_000), { isFinal: true, suffix: '.gz' });
    c.clock.advance(50);
    const r = await c.run;
    expect(r.waitTimedOut).toBe(false);
    expect(c.logger.lines.map((l) => l.msg)).toContain('Final full snapshot detected');
    expect((await dest.list()).map((s) => s.snapName)).toContain(`Full-00000000-00000100-${(t0 + 60_000) / 1000}.gz`);
  });

  it('a final among the newest 4 is found at once', async () => {
    const dir = await tempDir('wait-found');
    const source = await local(join(dir, 'source'), dir);
    const dest = await local(join(dir, 'dest'), dir);
    const t0 = new Date('2027-01-01T00:00:00Z').getTime();
    await putSnapshot(source, 'Full', 0, 10, new Date(t0), { isFinal: true });
    for (let i = 1; i <= 3; i++) await putSnapshot(source, 'Full', 0, 10 + i * 10, new Date(t0 + i * 1000));
    // The clock never moves: a copier that slept even once would never return.
    const c = waitingCopy(source, dest, { ...config, waitForFinalSnapshotTimeout: 60_000 }, { finalSnapshotPollMs: 60_000 });
    const r = await c.run;
    expect(c.clock.pending).toBe(0);
    expect(r.waitTimedOut).toBe(false);
    expect(r.copied).toHaveLength(4);
  });

  it('with a timeout: logs it and copies anyway', async () => {
    const dir = await tempDir('wait-timeout');
    const source = await local(join(dir, 'source'), dir);
    const dest = await local(join(dir, 'dest'), dir);
    await putSnapshot(source, 'Full', 0, 10, new Date('2027-01-01T00:00:00Z'));
    const c = waitingCopy(source, dest, { ...config, waitForFinalSnapshotTimeout: 300 });
    // Polls at 0, 50, …, 250 ms of fake time find nothing; the one at 300 ms is past the timeout.
    for (let i = 0; i < 5; i++) {
      await c.polling();
      c.clock.advance(50);
    }
    await c.polling();
    expect(c.settled()).toBe(false);
    expect(c.logger.lines.map((l) => l.msg)).not.toContain('Timed out waiting for final full snapshot');
    c.clock.advance(50);
    const r = await c.run;
    expect(r.waitTimedOut).toBe(true);
    expect(c.logger.lines.map((l) => l.msg)).toContain('Timed out waiting for final full snapshot');
    expect(r.copied).toHaveLength(1);
  });

  it('a signal ends the wait and the command', async () => {
    const dir = await tempDir('wait-signal');
    const source = await local(join(dir, 'source'), dir);
    const dest = await local(join(dir, 'dest'), dir);
    await putSnapshot(source, 'Full', 0, 10, new Date('2027-01-01T00:00:00Z'));
    const ac = new AbortController();
    const c = waitingCopy(source, dest, config, { signal: ac.signal });
    await c.polling();
    ac.abort(new Error('received SIGTERM'));
    await expect(c.run).rejects.toThrow(/SIGTERM/);
    expect(c.clock.pending).toBe(0);
    expect(await dest.list()).toEqual([]);
  });
});

describe('failures', () => {
  it('a destination outage mid-copy leaves no partial object; a re-run completes the copy', async () => {
    const dir = await tempDir('outage');
    const root = join(dir, 'source');
    await cp(join(COMPAT, 'gzip', 'snapstore'), root, { recursive: true });
    const inner = await local(root, dir);
    // A multi-part object (12 MiB > 5 MiB parts) so the outage hits an upload with parts already sent.
    const big = await putSnapshot(inner, 'Full', 0, 500, new Date('2030-01-01T00:00:00Z'), { size: 12 * MiB });
    const server = await s3rver();
    const proxy = await startFaultyStoreProxy(server.endpoint);
    cleanups.push(() => proxy.stop());
    // The source stream of the big object switches the destination off when half of it went through.
    const source = withFetchProgress(inner, big.snapName, (seen) => {
      if (seen >= 6 * MiB && proxy.mode === 'up') proxy.setMode('down');
    });
    const tuning = { maxAttempts: 2, partRetries: 1, partRetryBaseDelayMs: 20, connectionTimeoutMs: 2_000 };
    const viaProxy = await openS3Store(
      { ...base('outage/v2', dir), provider: 'S3', endpointOverride: proxy.endpoint, credentials: S3RVER_CREDENTIALS },
      tuning,
    );
    cleanups.push(() => viaProxy.close());
    const direct = await s3('outage/v2', dir);

    // One worker, newest backup first: the big full goes first and everything after it meets the outage.
    const err = (await copyBackups(deps(source, viaProxy), { ...ALL, maxParallelCopyOperations: 1 }).catch((e: unknown) => e)) as CopyError;
    expect(err).toBeInstanceOf(CopyError);
    expect(err.result.failures.map((f) => f.snapshot.snapName)).toContain(big.snapName);
    expect(err.message).toContain(big.snapName);
    expect(proxy.faulted.down).toBeGreaterThan(0);
    // Whatever is visible is complete and exact.
    const sourceContents = await contents(inner);
    const partial = await contents(direct);
    for (const [key, hash] of partial) expect(sourceContents.get(key)).toBe(hash);
    expect([...partial.keys()].some((k) => k.includes(big.snapName))).toBe(false);

    proxy.setMode('up');
    const rerun = await copyBackups(deps(inner, viaProxy), ALL);
    expect(rerun.copied.length + rerun.skipped.length).toBe(sourceContents.size);
    expect(rerun.copied.map((s) => s.snapName)).toContain(big.snapName);
    expect(await contents(direct)).toEqual(sourceContents);
  });

  it('a corrupt and an unreadable source object fail with their names; the others are copied', async () => {
    const dir = await tempDir('corrupt');
    const root = join(dir, 'source');
    await cp(join(COMPAT, 'none', 'snapstore'), root, { recursive: true });
    const inner = await local(root, dir);
    const [full, d1, d2, d3] = (await inner.list()) as [Snapshot, Snapshot, Snapshot, Snapshot];
    // d1: one byte flipped inside the JSON; its sha256 trailer no longer matches. d2: a gzip name over raw bytes.
    const file = join(root, 'v2', d1.snapName);
    const bytes = await readFile(file);
    bytes[50] = (bytes[50] as number) ^ 0x20;
    await writeFile(file, bytes);
    const source: SnapStore = Object.assign(Object.create(inner) as SnapStore, {
      fetch: async (snap: Snapshot) => {
        if (snap.snapName === d2.snapName) throw new Error('injected: access denied');
        return inner.fetch(snap);
      },
    });
    const dest = await local(join(dir, 'dest'), dir);
    const err = (await copyBackups(deps(source, dest), ALL).catch((e: unknown) => e)) as CopyError;
    expect(err).toBeInstanceOf(CopyError);
    const failed = new Map(err.result.failures.map((f) => [f.snapshot.snapName, f.error.message]));
    expect([...failed.keys()].sort()).toEqual([d1.snapName, d2.snapName].sort());
    expect(failed.get(d1.snapName)).toMatch(new RegExp(`snapshot ${d1.snapName} in the source store is corrupt: .*SHA256`));
    expect(failed.get(d2.snapName)).toBe(`could not fetch snapshot ${d2.snapName} from source store: injected: access denied`);
    expect(err.message).toContain(d1.snapName);
    expect(err.message).toContain(d2.snapName);
    expect((await dest.list()).map((s) => s.snapName).sort()).toEqual(
      [full.snapName, d3.snapName, ...(await inner.list()).slice(4).map((s) => s.snapName)].sort(),
    );
  });

  it('a corrupt gzip stream is not committed either', async () => {
    const dir = await tempDir('gzip-corrupt');
    const source = await local(join(dir, 'source'), dir);
    const snap = newSnapshot({
      kind: 'Full',
      startRevision: 0,
      lastRevision: 7,
      createdOn: new Date('2027-01-01T00:00:00Z'),
      compressionSuffix: '.gz',
    });
    // A valid gzip member, cut short.
    const chunks: Buffer[] = [];
    for await (const c of Readable.from([snapshotPayload('Full', 64 * 1024)]).pipe(createCompressStream('gzip'))) chunks.push(c as Buffer);
    const gz = Buffer.concat(chunks);
    await source.save(snap, Readable.from([gz.subarray(0, gz.length - 100)]));
    const dest = await local(join(dir, 'dest'), dir);
    const err = (await copyBackups(deps(source, dest), ALL).catch((e: unknown) => e)) as CopyError;
    expect(err).toBeInstanceOf(CopyError);
    expect(err.message).toContain(`snapshot ${snap.snapName} in the source store is corrupt`);
    expect(await dest.list()).toEqual([]);
  });
});
