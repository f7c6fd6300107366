/**
 * The compactor against the upstream v0.23 stores: the new full snapshot, written offline with no etcd
 * process, restores to exactly the source's final state (expected.json, leases included), becomes the latest
 * full, and matches upstream's own compacted snapshot of the same chain but for the leases upstream drops.
 * Failure paths leave the store and the disk as they were. (compact-vs-etcd.test.ts compares with a
 * compaction through etcd.)
 */
import { createHash } from 'node:crypto';
import { cp, mkdir, readdir, readFile, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { compareSnapshots, latestSet, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { FakeClock } from '../../src/clock.js';
import { compactSnapshots, type CompactConfig } from '../../src/compactor/compactor.js';
import { CorruptFullSnapshotError } from '../../src/compactor/offline.js';
import type { CompactorConfig, RestorationConfig } from '../../src/config/types.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import type { SnapshotLeases } from '../../src/k8s/snapshot-leases.js';
import { planRestore } from '../../src/restorer/plan.js';
import { backendPath, executeRestore } from '../../src/restorer/restore.js';
import { readAuthEnabled } from '../../src/backend/auth-flag.js';
import { takeFullSnapshot } from '../../src/snapshotter/full-snapshot.js';
import { DeltaBuffer } from '../../src/snapshotter/delta-buffer.js';
import { saveDeltaSnapshot } from '../../src/snapshotter/delta-snapshot.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcdBinaries, startTestEtcd } from '../support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../support/etcd-dump.js';
import { ours } from '../support/etcd-client.js';
import { openLocalStore } from '../support/local-store.js';
import { recordingLogger } from '../support/logger.js';
import { compactionRestoration, restoreOptions } from '../support/restore.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';

const COMPAT = UPSTREAM_V023;
const cases = readdirSync(COMPAT, { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .map((d) => d.name);

const NOW = new Date('2027-01-02T03:04:05Z');

const cleanups = cleanupAfterEach();
const tempDir = (tag: string) => cleanups.tempDir(`etcdbr-compact-${tag}-`);

async function localStore(root: string, dir: string): Promise<SnapStore> {
  const store = await openLocalStore(root, dir);
  cleanups.push(() => store.close());
  return store;
}

/** A writable copy of a compat case's store. */
async function compatCopy(name: string, dir: string): Promise<SnapStore> {
  const root = join(dir, 'store');
  await cp(join(COMPAT, name, 'snapstore'), root, { recursive: true });
  return localStore(root, dir);
}

const restoration = (dir: string, over: Partial<RestorationConfig> = {}): RestorationConfig =>
  compactionRestoration(dir, { maxFetchers: 3, ...over });

const COMPACTOR: CompactorConfig = {
  defragment: true,
  snapshotTimeout: 60_000,
  defragTimeout: 60_000,
  fullSnapshotLeaseName: 'full-snapshot-revisions',
  deltaSnapshotLeaseName: 'delta-snapshot-revisions',
  snapshotLeaseRenewalEnabled: false,
  metricsScrapeWaitDuration: 0,
};

function config(dir: string): CompactConfig {
  return { restoration: restoration(dir), compactor: COMPACTOR };
}

/** Restores a store's latest chain into a fresh dir and dumps it (the local etcd is stopped afterwards). */
async function restoreAndDump(store: SnapStore, dir: string, extra?: (client: Etcd3) => Promise<void>): Promise<EtcdDump> {
  const binaries = await etcdBinaries();
  const dataDir = join(dir, `verify-${Math.random().toString(36).slice(2)}`);
  const plan = planRestore(await store.list());
  await executeRestore(store, plan, restoreOptions(binaries, dir, { dataDir, tempDir: join(dir, 'verify-tmp') }));
  const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
  try {
    if (extra) {
      const client = new Etcd3({ hosts: etcd.clientUrl });
      try {
        await extra(client);
      } finally {
        client.close();
      }
    }
    return await dumpEtcd(etcd.clientUrl);
  } finally {
    await etcd.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

/** The compaction must not need etcd: the getter fails the run if it is called. */
const noEtcd = () => Promise.reject(new Error('etcd must not be needed'));

const withoutLeases = (kvs: EtcdDump['kvs']) => kvs.map(({ lease: _lease, ...rest }) => rest);

/** Every object of the store with a content hash, to prove a failed run changed nothing. */
async function fingerprint(store: SnapStore): Promise<string[]> {
  const out: string[] = [];
  for (const s of await store.list()) {
    const h = createHash('sha256');
    for await (const c of await store.fetch(s)) h.update(c as Buffer);
    out.push(`${s.prefix}${s.snapDir}/${s.snapName} ${h.digest('hex')}`);
  }
  return out;
}

/** Processes whose command line mentions `needle` (a local etcd left behind would show up here). */
async function processesMentioning(needle: string): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(join('/proc', entry, 'cmdline'), 'utf8').catch(() => '');
    if (cmdline.includes(needle)) pids.push(Number(entry));
  }
  return pids;
}

async function gone(p: string): Promise<boolean> {
  return stat(p).then(
    () => false,
    () => true,
  );
}

async function expectCleanedUp(dir: string): Promise<void> {
  const rc = restoration(dir);
  expect(await gone(rc.dataDir)).toBe(true);
  expect(await gone(`${rc.dataDir}.part`)).toBe(true);
  expect(await gone(rc.tempDir)).toBe(true);
  expect(await processesMentioning(rc.dataDir)).toEqual([]);
}

describe('compact on the upstream v0.23 stores', () => {
  it('has cases', () => expect(cases.length).toBeGreaterThanOrEqual(7));

  it.each(cases)('%s: the new full restores to expected.json and becomes the latest full', async (name) => {
    const expected = JSON.parse(readFileSync(join(COMPAT, name, 'expected.json'), 'utf8')) as EtcdDump;
    const dir = await tempDir(name);
    const store = await compatCopy(name, dir);
    const before = await fingerprint(store);
    const listing = await store.list();
    const latest = latestSet(listing);
    const leaseCalls: Snapshot[] = [];
    const leases = { updateFull: async (s: Snapshot) => void leaseCalls.push(s) } as unknown as SnapshotLeases;

    const result = await compactSnapshots(
      { store, binaries: noEtcd, logger: recordingLogger(), clock: new FakeClock(NOW), leases: async () => leases },
      config(dir),
    );

    const snap = result.snapshot as Snapshot;
    expect(snap).toBeDefined();
    expect(result.path).toBe('offline');
    // Named after the head revision, now, the last delta's codec (the base's without deltas) and the base's finality.
    const suffixFrom = latest.deltas.at(-1) ?? (latest.full as Snapshot);
    const rev = String(expected.revision).padStart(8, '0');
    expect(snap.snapName).toBe(
      `Full-00000000-${rev}-${NOW.getTime() / 1000}${suffixFrom.compressionSuffix}${latest.full?.isFinal ? '.final' : ''}`,
    );
    expect(result.revision).toBe(expected.revision);
    expect(leaseCalls.map((s) => s.snapName)).toEqual([snap.snapName]);

    // Only added: every old object is unchanged, and the new one is the base of the next restore.
    const after = await fingerprint(store);
    expect(after.filter((l) => !l.includes(snap.snapName))).toEqual(before);
    expect(after).toHaveLength(before.length + 1);
    const plan = planRestore(await store.list());
    expect(plan.base?.snapName).toBe(snap.snapName);
    expect(plan.deltas).toEqual([]);
    await expectCleanedUp(dir);

    const got = await restoreAndDump(store, dir);
    expect(got.revision).toBe(expected.revision);
    if (name === 'compacted-gzip') {
      // Its newest full is upstream's compacted one (no delta after it), which lost the leases of the keys its deltas wrote.
      expect(withoutLeases(got.kvs)).toEqual(withoutLeases(expected.kvs));
    } else {
      // Every key keeps its lease, those written in a delta too.
      expect(got.kvs).toEqual(expected.kvs);
    }
  });

  it("gzip chain: ours equals upstream's own compacted snapshot (compacted-gzip), compacted history included, but keeps the leases upstream drops", async () => {
    const dir = await tempDir('vs-upstream');
    const upstreamName = 'Full-00000000-00000400-1795219493.gz';
    // The chain upstream compacted: its store without the compacted full it wrote.
    const oursStore = await compatCopy('compacted-gzip', dir);
    await unlink(join(dir, 'store', 'v2', upstreamName));
    const theirsRoot = join(dir, 'theirs');
    await cp(join(COMPAT, 'compacted-gzip', 'snapstore', 'v2', upstreamName), join(theirsRoot, 'v2', upstreamName));
    const theirs = await localStore(theirsRoot, dir);

    // A TTL of no lease of the source's: the leases the Go-written deltas name (they record no TTL) get it.
    const leaseTtl = 77;
    const result = await compactSnapshots(
      { store: oursStore, binaries: noEtcd, logger: recordingLogger(), clock: new FakeClock(NOW) },
      { ...config(dir), restoration: restoration(dir, { restoredLeaseTtl: leaseTtl * 1000 }) },
    );
    expect(result.snapshot?.snapName).toBe(`Full-00000000-00000400-${NOW.getTime() / 1000}.gz`);

    const expected = JSON.parse(readFileSync(join(COMPAT, 'compacted-gzip', 'expected.json'), 'utf8')) as EtcdDump;
    /** The leases that keys name in the source (expected.json). */
    const sourceLeases = [...new Set(expected.kvs.map((kv) => kv.lease).filter((l) => l !== '0'))];
    const leasesSeen = new Map<string, Array<{ ttl: number; grantedTtl: number; keys: number }>>();
    const historyGoneAndLeases = (who: string) => async (client: Etcd3) => {
      // Both snapshots carry compacted history: an old revision is not readable any more.
      await expect(client.get('x').revision(2).exec()).rejects.toThrow(/compacted/);
      const c = ours(client);
      leasesSeen.set(who, await Promise.all(sourceLeases.map((id) => c.leaseTimeToLive(id, { keys: true }))));
    };
    const mine = await restoreAndDump(oursStore, dir, historyGoneAndLeases('ours'));
    const upstream = await restoreAndDump(theirs, dir, historyGoneAndLeases('upstream'));

    // Where upstream and we agree: the revision, every key, value, create/mod revision and version.
    expect(mine.revision).toBe(upstream.revision);
    expect(withoutLeases(mine.kvs)).toEqual(withoutLeases(upstream.kvs));
    // Ours has the source's leases, all of them (expected.json); upstream's only the base's (the 7200 s preload lease).
    expect(mine.kvs).toEqual(expected.kvs);
    const differ = mine.kvs.filter((kv, i) => kv.lease !== upstream.kvs[i]!.lease);
    expect(differ.length).toBeGreaterThan(0);
    for (const kv of differ) expect(upstream.kvs.find((u) => u.key === kv.key)?.lease).toBe('0');
    expect(mine.kvs.filter((kv) => kv.lease !== '0').length).toBeGreaterThan(differ.length);
    // The leases exist in the member restored from ours: the base's with its TTL, the deltas' with --restored-lease-ttl.
    const deltaLeases = new Set(differ.map((kv) => kv.lease));
    sourceLeases.forEach((id, i) => {
      const keys = expected.kvs.filter((kv) => kv.lease === id).length;
      const seen = leasesSeen.get('ours')![i]!;
      expect(seen).toMatchObject({ keys, grantedTtl: deltaLeases.has(id) ? leaseTtl : 7200 });
      expect(seen.ttl).toBeGreaterThan(0);
      // Upstream's compacted snapshot has no record of a lease only a delta named.
      if (deltaLeases.has(id)) expect(leasesSeen.get('upstream')![i]!.ttl).toBe(-1);
      else expect(leasesSeen.get('upstream')![i]!).toMatchObject({ keys, grantedTtl: 7200 });
    });
  });
});

describe('compact: the name of the compacted full in upstream order', () => {
  it('a last delta written in the same second as the compaction: the compacted full is named a second later, strictly after it', async () => {
    // Found by the interop suite (e2e/interop): named in the second of the last delta, the compacted full tied
    // with it in upstream's order (last revision, then creation second, unstable sort), and the Go restore
    // then replayed that delta onto the compacted full ("mismatched event revision").
    const dir = await tempDir('same-second');
    const root = join(dir, 'store');
    await cp(join(COMPAT, 'gzip', 'snapstore'), root, { recursive: true });
    const nowSeconds = NOW.getTime() / 1000;
    const lastDelta = `Incr-00000356-00000385-${nowSeconds}.gz`;
    await rename(join(root, 'v2', 'Incr-00000356-00000385-1795219417.gz'), join(root, 'v2', lastDelta));
    const store = await localStore(root, dir);

    const result = await compactSnapshots(
      { store, binaries: noEtcd, logger: recordingLogger(), clock: new FakeClock(NOW.getTime() + 400) },
      config(dir),
    );
    const snap = result.snapshot as Snapshot;
    expect(snap.snapName).toBe(`Full-00000000-00000385-${nowSeconds + 1}.gz`);
    const listing = await store.list();
    const delta = listing.find((s) => s.snapName === lastDelta) as Snapshot;
    expect(compareSnapshots(delta, snap)).toBeLessThan(0);
    expect(latestSet(listing)).toEqual({ full: expect.objectContaining({ snapName: snap.snapName }), deltas: [] });
  });
});

describe('compact: nothing to do and failures', () => {
  it('no full snapshot: logs, exits without a restore, writes nothing', async () => {
    const dir = await tempDir('nobase');
    const root = join(dir, 'store');
    const store = await localStore(root, dir);
    // Deltas without a full snapshot.
    const delta = new DeltaBuffer();
    delta.append({
      type: 'PUT',
      key: Buffer.from('k'),
      value: Buffer.from('v'),
      createRevision: 5,
      modRevision: 5,
      version: 1,
      lease: '0',
      time: '2026-01-01T00:00:00Z',
    });
    await saveDeltaSnapshot(store, delta.take()!, 5, undefined, NOW);
    const before = await fingerprint(store);
    const logger = recordingLogger();
    const result = await compactSnapshots(
      {
        store,
        binaries: () => Promise.reject(new Error('etcd must not be needed')),
        logger,
        clock: new FakeClock(NOW),
        leases: () => Promise.reject(new Error('kubernetes must not be needed')),
      },
      config(dir),
    );
    expect(result.snapshot).toBeUndefined();
    expect(logger.lines).toContainEqual({ level: 'info', msg: 'No base snapshot found. Will do nothing.' });
    expect(await fingerprint(store)).toEqual(before);
    await expectCleanedUp(dir);
  });

  it('a tampered delta fails during the restore: nothing uploaded, no data dir, no etcd left', async () => {
    const dir = await tempDir('tampered');
    const store = await compatCopy('none', dir);
    const delta = (await store.list()).filter((s) => s.kind === 'Incr')[1] as Snapshot;
    const file = join(dir, 'store', 'v2', delta.snapName);
    const bytes = await readFile(file);
    bytes[100] = (bytes[100] as number) ^ 0x01; // inside the JSON: the sha256 trailer no longer matches
    await writeFile(file, bytes);
    const before = await fingerprint(store);
    await expect(
      compactSnapshots({ store, binaries: noEtcd, logger: recordingLogger(), clock: new FakeClock(NOW) }, config(dir)),
    ).rejects.toThrow(new RegExp(`${delta.snapName}.*SHA256|SHA256.*${delta.snapName}`));
    expect(await fingerprint(store)).toEqual(before);
    await expectCleanedUp(dir);
  });

  it('a gap in the chain fails before anything is restored', async () => {
    const dir = await tempDir('gap');
    const store = await compatCopy('gzip', dir);
    const deltas = (await store.list()).filter((s) => s.kind === 'Incr');
    await unlink(join(dir, 'store', 'v2', (deltas[1] as Snapshot).snapName));
    const before = await fingerprint(store);
    await expect(
      compactSnapshots(
        {
          store,
          binaries: () => Promise.reject(new Error('etcd must not be needed')),
          logger: recordingLogger(),
          clock: new FakeClock(NOW),
        },
        config(dir),
      ),
    ).rejects.toThrow(/gap in the delta chain/);
    expect(await fingerprint(store)).toEqual(before);
    await expectCleanedUp(dir);
  });

  it('a failing upload after the compaction: nothing visible, the dirs removed', async () => {
    const dir = await tempDir('upload');
    const inner = await compatCopy('lzw', dir);
    const before = await fingerprint(inner);
    const failing: SnapStore = Object.assign(Object.create(inner) as SnapStore, {
      save: async (_snap: Snapshot, data: Readable) => {
        data.destroy();
        throw new Error('injected: the store refuses writes');
      },
    });
    await expect(
      compactSnapshots({ store: failing, binaries: noEtcd, logger: recordingLogger(), clock: new FakeClock(NOW) }, config(dir)),
    ).rejects.toThrow(/injected/);
    expect(await fingerprint(inner)).toEqual(before);
    await expectCleanedUp(dir);
  });

  it('never touches the data dir: one that holds something is left alone', async () => {
    const dir = await tempDir('busy');
    const store = await compatCopy('zlib', dir);
    const rc = restoration(dir);
    await mkdir(rc.dataDir, { recursive: true });
    await writeFile(join(rc.dataDir, 'keep-me'), 'x');
    const result = await compactSnapshots({ store, binaries: noEtcd, logger: recordingLogger(), clock: new FakeClock(NOW) }, config(dir));
    expect(result.path).toBe('offline');
    expect(await readdir(rc.dataDir)).toEqual(['keep-me']);
  });

  it.each([
    ['truncated', (bytes: Buffer) => bytes.subarray(0, bytes.length - 4096)],
    [
      'with a flipped byte',
      (bytes: Buffer) => Buffer.concat([bytes.subarray(0, 5000), Buffer.from([bytes[5000]! ^ 0x01]), bytes.subarray(5001)]),
    ],
  ])('an uncompressed full snapshot %s: CorruptFullSnapshotError naming it, nothing uploaded', async (_what, damage) => {
    const dir = await tempDir('bad-full');
    const store = await compatCopy('none', dir);
    const full = (await store.list()).find((s) => s.kind === 'Full') as Snapshot;
    const file = join(dir, 'store', 'v2', full.snapName);
    await writeFile(file, damage(await readFile(file)));
    const before = await fingerprint(store);
    const err = await compactSnapshots({ store, binaries: noEtcd, logger: recordingLogger(), clock: new FakeClock(NOW) }, config(dir)).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(CorruptFullSnapshotError);
    expect((err as CorruptFullSnapshotError).code).toBe('E_CORRUPT');
    expect((err as Error).message).toMatch(new RegExp(`full snapshot ${full.snapName} is corrupt: .*SHA256`));
    expect(await fingerprint(store)).toEqual(before);
    await expectCleanedUp(dir);
  });

  it('a gzip full snapshot cut short: CorruptFullSnapshotError, nothing uploaded', async () => {
    const dir = await tempDir('short-gz');
    const store = await compatCopy('gzip', dir);
    const full = (await store.list()).find((s) => s.kind === 'Full') as Snapshot;
    const file = join(dir, 'store', 'v2', full.snapName);
    const bytes = await readFile(file);
    await writeFile(file, bytes.subarray(0, bytes.length >> 1));
    const before = await fingerprint(store);
    await expect(
      compactSnapshots({ store, binaries: noEtcd, logger: recordingLogger(), clock: new FakeClock(NOW) }, config(dir)),
    ).rejects.toThrow(CorruptFullSnapshotError);
    expect(await fingerprint(store)).toEqual(before);
    await expectCleanedUp(dir);
  });

  it('deltas the offline writer refuses (a new key at version 3) are compacted through etcd instead, saying so', async () => {
    const dir = await tempDir('fallback');
    // etcd writes a new key at version 1 with its create revision = mod revision; this delta could not come from etcd.
    const store = await refusedChain(dir);
    const logger = recordingLogger();
    const result = await compactSnapshots({ store, binaries: etcdBinaries, logger, clock: new FakeClock(NOW) }, config(dir));
    expect(result.path).toBe('online');
    expect(result.snapshot?.snapName).toBe(`Full-00000000-00000284-${NOW.getTime() / 1000}.gz`);
    expect(logger.lines).toContainEqual(
      expect.objectContaining({
        level: 'warn',
        msg: expect.stringMatching(/offline compaction cannot write this chain: compacting through a local etcd/),
      }),
    );
    const got = await restoreAndDump(store, dir);
    expect(got.revision).toBe(284);
    expect(got.kvs.some((kv) => Buffer.from(kv.key, 'base64').toString() === '/odd')).toBe(true);
    await expectCleanedUp(dir);
  });

  it('a small --embedded-etcd-quota-bytes changes nothing: compacted at the head, offline', async () => {
    const dir = await tempDir('lean');
    const root = join(dir, 'store');
    const store = await localStore(root, dir);
    const base = 'Full-00000000-00000283-1795219380';
    await cp(join(COMPAT, 'none', 'snapstore', 'v2', base), join(root, 'v2', base));
    // Ten single-put deltas after the base, and a quota the base alone passes 80 % of: the replay compacts
    // after every delta, the last time at the head revision.
    for (let i = 0; i < 10; i++) {
      const rev = 284 + i;
      const buf = new DeltaBuffer();
      buf.append({
        type: 'PUT',
        key: Buffer.from(`/lean/${i}`),
        value: Buffer.from(`v${i}`),
        createRevision: rev,
        modRevision: rev,
        version: 1,
        lease: '0',
        time: '2026-01-01T00:00:00Z',
      });
      await saveDeltaSnapshot(store, buf.take()!, rev, 'gzip', new Date(1795219380_000 + (i + 1) * 1000));
    }
    const logger = recordingLogger();
    const baseBytes = (await stat(join(root, 'v2', base))).size;
    const small = { ...config(dir), restoration: { ...restoration(dir), embeddedEtcdQuotaBytes: Math.ceil(baseBytes / 0.85) } };
    const result = await compactSnapshots({ store, binaries: noEtcd, logger, clock: new FakeClock(NOW) }, small);
    expect(result.snapshot?.snapName).toBe(`Full-00000000-00000293-${NOW.getTime() / 1000}.gz`);
    expect(result.path).toBe('offline');
    const got = await restoreAndDump(store, dir, async (client) => {
      await expect(client.get('/lean/0').revision(292).exec()).rejects.toThrow(/compacted/);
    });
    expect(got.revision).toBe(293);
    const lean = got.kvs.filter((kv) => Buffer.from(kv.key, 'base64').toString().startsWith('/lean/'));
    expect(lean.map((kv) => [Buffer.from(kv.key, 'base64').toString(), kv.mod_revision])).toEqual(
      Array.from({ length: 10 }, (_, i) => [`/lean/${i}`, 284 + i]),
    );
    await expectCleanedUp(dir);
  });
});

/** The `none` store's base with one delta the offline writer refuses (a new key at version 3). */
async function refusedChain(dir: string): Promise<SnapStore> {
  const root = join(dir, 'store');
  const store = await localStore(root, dir);
  const base = 'Full-00000000-00000283-1795219380';
  await cp(join(COMPAT, 'none', 'snapstore', 'v2', base), join(root, 'v2', base));
  const buf = new DeltaBuffer();
  buf.append({
    type: 'PUT',
    key: Buffer.from('/odd'),
    value: Buffer.from('v'),
    createRevision: 284,
    modRevision: 284,
    version: 3,
    lease: '0',
    time: '2026-01-01T00:00:00Z',
  });
  await saveDeltaSnapshot(store, buf.take()!, 284, 'gzip', new Date(1795219380_000 + 1000));
  return store;
}

describe('compact: --delta-replay picks the way, and both keep leases', () => {
  it('offline: a chain the writer refuses fails with its reason, nothing stored, no etcd needed', async () => {
    const dir = await tempDir('mode-offline');
    const store = await refusedChain(dir);
    const before = await fingerprint(store);
    const offline = { ...config(dir), restoration: restoration(dir, { deltaReplay: 'offline' }) };
    await expect(
      compactSnapshots({ store, binaries: noEtcd, logger: recordingLogger(), clock: new FakeClock(NOW) }, offline),
    ).rejects.toThrow(/puts key "\/odd" with create revision 284 and version 3/);
    expect(await fingerprint(store)).toEqual(before);
    await expectCleanedUp(dir);
  });

  it("online: through a local etcd at once; the keys keep their lease, the deltas' leases get --restored-lease-ttl", async () => {
    const name = 'gzip';
    const expected = JSON.parse(readFileSync(join(COMPAT, name, 'expected.json'), 'utf8')) as EtcdDump;
    const dir = await tempDir('mode-online');
    const store = await compatCopy(name, dir);
    const logger = recordingLogger();
    const online = { ...config(dir), restoration: restoration(dir, { deltaReplay: 'online', restoredLeaseTtl: 77_000 }) };
    const result = await compactSnapshots({ store, binaries: etcdBinaries, logger, clock: new FakeClock(NOW) }, online);
    expect(result.path).toBe('online');
    expect(result.revision).toBe(expected.revision);
    expect(result.backendBytes).toBeGreaterThan(0);
    expect(logger.lines).toContainEqual(expect.objectContaining({ level: 'info', msg: expect.stringMatching(/--delta-replay=online/) }));
    await expectCleanedUp(dir);

    // The base's leased key keeps the base's lease (its TTL, 7200 s); the lease only the deltas name gets 77 s.
    const leaseIds = [...new Set(expected.kvs.map((kv) => kv.lease).filter((l) => l !== '0'))];
    let seen: Array<{ ttl: number; grantedTtl: number; keys: number }> = [];
    const got = await restoreAndDump(store, dir, async (client) => {
      await expect(
        client
          .get('x')
          .revision(expected.revision - 1)
          .exec(),
      ).rejects.toThrow(/compacted/);
      const c = ours(client);
      seen = await Promise.all(leaseIds.map((id) => c.leaseTimeToLive(id, { keys: true })));
    });
    expect(got).toEqual(expected);
    expect(seen.map((l) => l.grantedTtl).sort((a, b) => a - b)).toEqual([77, 7200]);
    leaseIds.forEach((id, i) => expect(seen[i]!.keys).toBe(expected.kvs.filter((kv) => kv.lease === id).length));
  });
});

describe('compact: a base snapshot with etcd auth enabled', () => {
  it.each(['offline', 'online'] as const)(
    '%s: the compacted full keeps auth enabled (offline: the auth buckets copied as they are; online: auth back on before it is stored) and holds the replayed data',
    async (way) => {
      const dir = await tempDir(`auth-${way}`);
      const store = await localStore(join(dir, 'store'), dir);
      const root = { username: 'root', password: 'r00t-pw' };
      const src = await startTestEtcd();
      cleanups.push(() => src.cleanup());
      const setup = new Etcd3({ hosts: src.clientUrl });
      await setup.user(root.username).create(root.password);
      await setup.user(root.username).addRole('root');
      for (let i = 0; i < 20; i++) await setup.put(`/a/${i}`).value(`v${i}`);
      await setup.auth.authEnable({});
      setup.close();
      const admin = new Etcd3({ hosts: src.clientUrl, auth: root });
      let baseSnap: Snapshot;
      try {
        baseSnap = await takeFullSnapshot(
          { client: ours(admin), store, compression: 'gzip', now: () => new Date(NOW.getTime() - 60_000), logger: recordingLogger() },
          { isFinal: false, snapshotTimeoutMs: 30_000, connectionTimeoutMs: 5_000 },
        );
      } finally {
        admin.close();
      }
      // Two deltas after the base: overwrites and a new key.
      let rev = baseSnap.lastRevision;
      for (let d = 0; d < 2; d++) {
        const buf = new DeltaBuffer();
        const start = rev + 1;
        for (let i = 0; i < 3; i++) {
          rev++;
          buf.append({
            type: 'PUT',
            key: Buffer.from(`/a/${i}`),
            value: Buffer.from(`w${rev}`),
            createRevision: 2 + i,
            modRevision: rev,
            version: d + 2,
            lease: '0',
            time: '2026-01-01T00:00:00Z',
          });
        }
        await saveDeltaSnapshot(store, buf.take()!, start, 'gzip', new Date(NOW.getTime() - 50_000 + d * 1000));
      }

      const logger = recordingLogger();
      const result = await compactSnapshots(
        { store, binaries: way === 'offline' ? noEtcd : etcdBinaries, logger, clock: new FakeClock(NOW) },
        { ...config(dir), restoration: restoration(dir, { deltaReplay: way }) },
      );
      expect(result.snapshot?.snapName).toBe(`Full-00000000-${String(rev).padStart(8, '0')}-${NOW.getTime() / 1000}.gz`);
      expect(result.path).toBe(way);
      await expectCleanedUp(dir);

      // The restore of the compacted full needs no replay (auth untouched): anonymous refused, root served.
      const binaries = await etcdBinaries();
      const dataDir = join(dir, 'restored');
      await executeRestore(
        store,
        planRestore(await store.list()),
        restoreOptions(binaries, dir, { dataDir, tempDir: join(dir, 'verify-tmp') }),
      );
      expect(await readAuthEnabled(backendPath(dataDir))).toBe(true);
      const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
      const anon = new Etcd3({ hosts: etcd.clientUrl });
      const authed = new Etcd3({ hosts: etcd.clientUrl, auth: root });
      try {
        await expect(anon.get('/a/0').string()).rejects.toThrow(/user name is empty/);
        expect(await authed.get('/a/0').string()).toBe(`w${rev - 2}`);
        expect(await authed.get('/a/19').string()).toBe('v19');
        const res = await authed.get('/a/1').exec();
        expect(Number(res.header.revision)).toBe(rev);
        expect(Number(res.kvs[0]?.mod_revision)).toBe(rev - 1);
      } finally {
        anon.close();
        authed.close();
        await etcd.stop();
      }
    },
  );
});
