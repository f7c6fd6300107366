/**
 * The offline `compact` against a compaction through etcd, with real etcd 3.4 and 3.5: the same Go-written
 * chain is compacted both ways (offline: compactSnapshots, no etcd process; through etcd: a local etcd
 * replays the chain, compacts at the head, defragments and is snapshotted, the fallback path online.ts).
 * Each stored full is restored by etcd's own tool (`etcdctl snapshot restore` on 3.4, `etcdutl` on 3.5)
 * straight from the object, and etcd serves the same keys, values, create/mod revisions and versions from
 * both, the same `hashkv` (hash and compact revision), and refuses reads below the head as compacted. Our
 * own `restore` of the offline one serves the same.
 */
import { execFile } from 'node:child_process';
import { cp, mkdir, readFile } from 'node:fs/promises';
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { createDecompressStream, latestSet, policyForSuffix, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { FakeClock } from '../../src/clock.js';
import { compactSnapshots, type CompactConfig } from '../../src/compactor/compactor.js';
import { compactThroughEtcd } from '../../src/compactor/online.js';
import { restoreTool } from '../../src/restorer/base-restore.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { planRestore } from '../../src/restorer/plan.js';
import { executeRestore } from '../../src/restorer/restore.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcd35Binaries, etcdBinaries } from '../support/etcd.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';
import { openLocalStore } from '../support/local-store.js';
import { recordingLogger } from '../support/logger.js';
import { compactionRestoration, restoreOptions } from '../support/restore.js';
import { client, dump, type Dump } from '../restorer/support.js';

const execFileAsync = promisify(execFile);
const NOW = new Date('2027-01-02T03:04:05Z');
const cleanups = cleanupAfterEach();

interface Seen {
  hashKv: { hash: number; compactRevision: number };
  latest: Dump;
  /** What a read one revision below the head gave. */
  below: string;
}

function config(dir: string): CompactConfig {
  return {
    restoration: compactionRestoration(dir, { maxFetchers: 3 }),
    compactor: {
      defragment: true,
      snapshotTimeout: 60_000,
      defragTimeout: 60_000,
      fullSnapshotLeaseName: '',
      deltaSnapshotLeaseName: '',
      snapshotLeaseRenewalEnabled: false,
      metricsScrapeWaitDuration: 0,
    },
  };
}

async function storeCopy(fixture: string, dir: string): Promise<SnapStore> {
  const root = join(dir, 'store');
  await cp(join(UPSTREAM_V023, fixture, 'snapstore'), root, { recursive: true });
  const store = await openLocalStore(root, dir);
  cleanups.push(() => store.close());
  return store;
}

/** etcd serving `dataDir`: the head, `hashkv`, and a read below the head. */
async function look(binaries: EtcdBinaries, dataDir: string): Promise<Seen> {
  const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
  const c = client(etcd.clientUrl);
  try {
    const latest = await dump(c);
    const below = await dump(c, latest.revision - 1).then(
      () => 'served',
      (err: unknown) => (err as Error).message,
    );
    const { stdout } = await execFileAsync(binaries.etcdctl!, [`--endpoints=${etcd.clientUrl}`, 'endpoint', 'hashkv', '-w', 'json'], {
      env: { ...process.env, ETCDCTL_API: '3' },
    });
    const [h] = JSON.parse(stdout) as Array<{ HashKV: { hash: number; compact_revision?: number } }>;
    return { hashKv: { hash: h!.HashKV.hash, compactRevision: h!.HashKV.compact_revision ?? 0 }, latest, below };
  } finally {
    c.close();
    await etcd.stop();
  }
}

/** The stored full restored by etcd's own tool straight from the object (decompressed), then looked at. */
async function etcdRestoreAndLook(binaries: EtcdBinaries, store: SnapStore, name: string, dir: string): Promise<Seen> {
  await mkdir(dir, { recursive: true });
  const snap = (await store.list()).find((s) => s.snapName === name) as Snapshot;
  const file = join(dir, 'snapshot.db');
  await pipeline(await store.fetch(snap), createDecompressStream(snap.compressionSuffix, snap.snapName), createWriteStream(file));
  const tool = (await restoreTool(binaries))!;
  const dataDir = join(dir, 'data');
  await execFileAsync(
    tool,
    [
      'snapshot',
      'restore',
      file,
      `--data-dir=${dataDir}`,
      '--name=default',
      '--initial-cluster=default=http://127.0.0.1:2380',
      '--initial-advertise-peer-urls=http://127.0.0.1:2380',
    ],
    { env: { ...process.env, ETCDCTL_API: '3' } },
  );
  return look(binaries, dataDir);
}

async function expectSameAsThroughEtcd(binaries: EtcdBinaries, fixture: string): Promise<void> {
  const dir = await cleanups.tempDir(`etcdbr-compact-vs-etcd-${fixture}-`);
  const offlineStore = await storeCopy(fixture, join(dir, 'offline'));
  const onlineStore = await storeCopy(fixture, join(dir, 'online'));

  const offline = await compactSnapshots(
    {
      store: offlineStore,
      binaries: () => Promise.reject(new Error('etcd must not be needed')),
      logger: recordingLogger(),
      clock: new FakeClock(NOW),
    },
    config(join(dir, 'offline')),
  );
  expect(offline.path).toBe('offline');
  const listing = await onlineStore.list();
  const plan = planRestore(listing);
  const suffix = (latestSet(listing).deltas.at(-1) ?? plan.base!).compressionSuffix;
  const online = await compactThroughEtcd(
    { store: onlineStore, binaries, logger: recordingLogger(), clock: new FakeClock(NOW) },
    config(join(dir, 'online')),
    plan,
    policyForSuffix(suffix),
    plan.base!.isFinal,
  );
  expect(offline.snapshot!.snapName).toBe(online.snapshot.snapName);

  const seenOffline = await etcdRestoreAndLook(binaries, offlineStore, offline.snapshot!.snapName, join(dir, 'look-offline'));
  const seenOnline = await etcdRestoreAndLook(binaries, onlineStore, online.snapshot.snapName, join(dir, 'look-online'));
  expect(seenOffline.latest.revision).toBe(plan.targetRevision);
  expect(seenOffline.hashKv.compactRevision).toBe(plan.targetRevision);
  expect(seenOffline.below).toMatch(/compacted/);
  expect(seenOffline.latest.kvs.length).toBeGreaterThan(100);
  expect(seenOffline).toEqual(seenOnline);

  // Our restore of the offline one (the compacted full alone is the plan now) serves the same.
  const ourData = join(dir, 'ours');
  const ourPlan = planRestore(await offlineStore.list());
  expect(ourPlan.base?.snapName).toBe(offline.snapshot!.snapName);
  await executeRestore(offlineStore, ourPlan, restoreOptions(binaries, dir, { dataDir: ourData, tempDir: join(dir, 'ours-tmp') }));
  expect(await look(binaries, ourData)).toEqual(seenOffline);
  // And the Go-written expected state (leases aside) is what every one of them serves at the head.
  const expected = JSON.parse(await readFile(join(UPSTREAM_V023, fixture, 'expected.json'), 'utf8')) as {
    revision: number;
    kvs: Array<{ key: string }>;
  };
  expect(seenOffline.latest.revision).toBe(expected.revision);
  expect(seenOffline.latest.kvs.map((kv) => kv.key)).toEqual(expected.kvs.map((kv) => Buffer.from(kv.key, 'base64').toString('hex')));
}

describe('offline compact = compaction through etcd, restored by etcd itself', () => {
  it.each(['gzip', 'two-fulls-gzip', 'none', 'lzw'])(
    'etcd 3.4, Go-written store %s',
    async (fixture) => {
      await expectSameAsThroughEtcd(await etcdBinaries(), fixture);
    },
    120_000,
  );

  it.each(['gzip', 'zlib'])(
    'etcd 3.5, Go-written store %s',
    async (fixture) => {
      await expectSameAsThroughEtcd(await etcd35Binaries(), fixture);
    },
    120_000,
  );
});
