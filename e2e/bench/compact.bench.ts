/**
 * Compaction pays off at restore time: a full snapshot plus deltas covering ~100,000 revisions is restored
 * as is, then compacted with `compactSnapshots`, then restored again from the compacted full alone. Target:
 * the restore after compaction takes about as long as restoring the base full without deltas.
 *
 *   npx tsx e2e/bench/compact.bench.ts [--revisions=100000] [--base-keys=20000] [--hot-keys=5000] [--value-bytes=256] [--per-delta=1000]
 *
 * The base full comes from a real etcd (filled with `--base-keys` values, snapshotted with
 * takeFullSnapshot). The deltas are written directly with DeltaBuffer + saveDeltaSnapshot from generated
 * events whose revisions continue the base's: puts over `--hot-keys` keys (so most revisions overwrite
 * something) and every 20th revision a delete of a live key, `--per-delta` revisions per delta, gzip.
 * Both restores are dumped and must be identical. The last line is a JSON summary.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Etcd3 } from 'etcd3';
import { openSnapStore, silentLogger, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { systemClock } from '../../src/clock.js';
import { compactSnapshots } from '../../src/compactor/compactor.js';
import type { RestorationConfig } from '../../src/config/types.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { planRestore, type RestorePlan } from '../../src/restorer/plan.js';
import { executeRestore } from '../../src/restorer/restore.js';
import { DeltaBuffer } from '../../src/snapshotter/delta-buffer.js';
import { saveDeltaSnapshot } from '../../src/snapshotter/delta-snapshot.js';
import { takeFullSnapshot } from '../../src/snapshotter/full-snapshot.js';
import { etcdBinaries, startTestEtcd } from '../../test/support/etcd.js';
import { ours } from '../../test/support/etcd-client.js';
import { compactionRestoration } from '../../test/support/restore.js';
import { dumpEtcd } from '../../test/support/etcd-dump.js';
import { arg, measured, round1, table, type Run } from './support/measure.js';

const revisions = arg('revisions', 100_000);
const baseKeys = arg('base-keys', 20_000);
const hotKeys = arg('hot-keys', 5_000);
const valueBytes = arg('value-bytes', 256);
const perDelta = arg('per-delta', 1_000);

const restoration = (dir: string): RestorationConfig => compactionRestoration(dir);

/** A base full snapshot from a real etcd holding `baseKeys` values. */
async function baseSnapshot(store: SnapStore): Promise<Snapshot> {
  const etcd = await startTestEtcd();
  const client = new Etcd3({ hosts: etcd.clientUrl });
  try {
    const pool = randomBytes(1 << 20);
    const value = (n: number) =>
      pool.subarray((n * 4099) % (pool.length - valueBytes), ((n * 4099) % (pool.length - valueBytes)) + valueBytes);
    for (let i = 0; i < baseKeys; i += 64) {
      await Promise.all(
        Array.from({ length: Math.min(64, baseKeys - i) }, (_, j) =>
          client.put(`/bench/base/${String(i + j).padStart(8, '0')}`).value(value(i + j)),
        ),
      );
    }
    return await takeFullSnapshot(
      { client: ours(client), store, compression: 'gzip', now: () => new Date(Date.now() - 3_600_000), logger: silentLogger },
      { isFinal: false, snapshotTimeoutMs: 600_000, connectionTimeoutMs: 30_000 },
    );
  } finally {
    client.close();
    await etcd.cleanup();
  }
}

/** Deltas continuing the base: `revisions` revisions of puts (and some deletes) over the hot keys. */
async function writeDeltas(store: SnapStore, base: Snapshot): Promise<{ deltas: number; bytes: number }> {
  const live = new Map<number, { create: number; version: number }>();
  const pool = randomBytes(1 << 20);
  let buf = new DeltaBuffer();
  let start = base.lastRevision + 1;
  let deltas = 0;
  let bytes = 0;
  const created = base.createdOn.getTime();
  const time = '2027-01-01T00:00:00.123456789Z';
  for (let rev = base.lastRevision + 1; rev <= base.lastRevision + revisions; rev++) {
    const k = (rev * 7919) % hotKeys;
    const key = Buffer.from(`/bench/hot/${String(k).padStart(8, '0')}`);
    const state = live.get(k);
    if (rev % 20 === 0 && state) {
      buf.append({ type: 'DELETE', key, value: Buffer.alloc(0), createRevision: 0, modRevision: rev, version: 0, lease: '0', time });
      live.delete(k);
    } else {
      const next = state ? { create: state.create, version: state.version + 1 } : { create: rev, version: 1 };
      live.set(k, next);
      const off = (rev * 131) % (pool.length - valueBytes);
      buf.append({
        type: 'PUT',
        key,
        value: pool.subarray(off, off + valueBytes),
        createRevision: next.create,
        modRevision: rev,
        version: next.version,
        lease: '0',
        time,
      });
    }
    if ((rev - base.lastRevision) % perDelta === 0 || rev === base.lastRevision + revisions) {
      const payload = buf.take();
      if (!payload) continue;
      bytes += payload.byteLength;
      await saveDeltaSnapshot(store, payload, start, 'gzip', new Date(created + (deltas + 1) * 1000));
      deltas++;
      start = payload.lastRevision + 1;
      buf = new DeltaBuffer();
    }
  }
  return { deltas, bytes };
}

interface Restored {
  run: Run;
  digest: string;
  keys: number;
  revision: number;
}

/** Restores a plan into a fresh dir, then dumps it for the equality check (not timed). */
async function restore(store: SnapStore, plan: RestorePlan, dir: string, tag: string): Promise<Restored> {
  const binaries = await etcdBinaries();
  const rc = restoration(dir);
  const dataDir = path.join(dir, `restore-${tag}`);
  const { run } = await measured(() =>
    executeRestore(store, plan, {
      binaries,
      dataDir,
      tempDir: path.join(dir, `restore-${tag}.tmp`),
      name: rc.name,
      initialCluster: rc.initialCluster,
      initialClusterToken: rc.initialClusterToken,
      initialAdvertisePeerUrls: rc.initialAdvertisePeerURLs,
      skipHashCheck: false,
      maxFetchers: rc.maxFetchers,
      embeddedEtcdQuotaBytes: rc.embeddedEtcdQuotaBytes,
      maxRequestBytes: rc.maxRequestBytes,
      maxTxnOps: rc.maxTxnOps,
      logger: silentLogger,
    }),
  );
  const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default' });
  try {
    const dump = await dumpEtcd(etcd.clientUrl);
    const digest = createHash('sha256')
      .update(JSON.stringify(dump.kvs.map(({ lease: _l, ...kv }) => kv)))
      .digest('hex');
    return { run, digest, keys: dump.kvs.length, revision: dump.revision };
  } finally {
    await etcd.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'compact-bench-'));
  try {
    const store = await openSnapStore({
      provider: 'Local',
      rootDir: path.join(dir, 'store'),
      container: 'store',
      prefix: 'v2',
      maxParallelChunkUploads: 5,
      minChunkSize: 5 * 1024 * 1024,
      tempDir: dir,
    });
    const t0 = Date.now();
    const base = await baseSnapshot(store);
    const written = await writeDeltas(store, base);
    const setupSeconds = (Date.now() - t0) / 1000;
    console.log(
      `chain: ${base.snapName} + ${written.deltas} deltas, ${revisions} revisions (${round1(written.bytes / 1048576)} MiB of delta payload), set up in ${round1(setupSeconds)} s`,
    );

    const listing = await store.list();
    const baseOnly = await restore(store, planRestore(listing.filter((s) => s.snapName === base.snapName)), dir, 'base');
    const chain = await restore(store, planRestore(listing), dir, 'chain');
    const compacted = await measured(() =>
      compactSnapshots(
        { store, binaries: etcdBinaries, logger: silentLogger, clock: systemClock },
        {
          restoration: restoration(dir),
          compactor: {
            defragment: true,
            snapshotTimeout: 1_800_000,
            defragTimeout: 480_000,
            fullSnapshotLeaseName: '',
            deltaSnapshotLeaseName: '',
            snapshotLeaseRenewalEnabled: false,
            metricsScrapeWaitDuration: 0,
          },
        },
      ),
    );
    const newFull = compacted.value.snapshot as Snapshot;
    const after = await restore(store, planRestore(await store.list()), dir, 'compacted');
    if (after.digest !== chain.digest || after.revision !== chain.revision) {
      throw new Error(`the compacted snapshot restores to a different state (revision ${after.revision} vs ${chain.revision})`);
    }
    const sizes = new Map((await store.list()).map((s) => [s.snapName, s.sizeBytes ?? 0]));
    await store.close();

    const s = (r: Run) => round1(r.seconds);
    console.log(
      '\n' +
        table(
          ['phase', 'seconds', 'cpu s', 'peak RSS MiB', 'note'],
          [
            [
              'restore base full only',
              s(baseOnly.run),
              round1(baseOnly.run.cpuSeconds),
              baseOnly.run.peakRssMB,
              `${base.snapName} (${sizes.get(base.snapName)} B)`,
            ],
            [
              'restore full + deltas',
              s(chain.run),
              round1(chain.run.cpuSeconds),
              chain.run.peakRssMB,
              `${written.deltas} deltas, ${revisions} revisions`,
            ],
            [
              'compact (restore+compact+defrag+snapshot)',
              s(compacted.run),
              round1(compacted.run.cpuSeconds),
              compacted.run.peakRssMB,
              `restore ${round1(compacted.value.restoreMs / 1000)} s, snapshot ${round1(compacted.value.snapshotMs / 1000)} s; db ${compacted.value.dbSizeBefore} -> ${compacted.value.dbSizeAfter} B`,
            ],
            [
              'restore compacted full',
              s(after.run),
              round1(after.run.cpuSeconds),
              after.run.peakRssMB,
              `${newFull.snapName} (${sizes.get(newFull.snapName)} B)`,
            ],
          ],
        ),
    );
    console.log(`state after restore: ${after.keys} keys at revision ${after.revision}; chain and compacted restores identical`);
    console.log(
      JSON.stringify({
        bench: 'compact',
        revisions,
        deltas: written.deltas,
        baseKeys,
        hotKeys,
        valueBytes,
        restoreBaseSeconds: s(baseOnly.run),
        restoreChainSeconds: s(chain.run),
        compactSeconds: s(compacted.run),
        compactRestoreSeconds: round1(compacted.value.restoreMs / 1000),
        compactSnapshotSeconds: round1(compacted.value.snapshotMs / 1000),
        restoreCompactedSeconds: s(after.run),
        speedup: round1(chain.run.seconds / after.run.seconds),
        compactedVsBase: round1(after.run.seconds / baseOnly.run.seconds),
        baseBytes: sizes.get(base.snapName),
        compactedBytes: sizes.get(newFull.snapName),
        identical: true,
      }),
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
