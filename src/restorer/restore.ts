import { createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Etcd3 } from 'etcd3';
import { createDecompressStream, type Logger, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { FullSnapshotVerifier } from '../backup/full-verify.js';
import { restoreBaseSnapshot } from '../etcd/base-restore.js';
import type { EtcdBinaries } from '../etcd/binaries.js';
import { startLocalEtcd, type LocalEtcd } from '../etcd/local-etcd.js';
import { compact } from '../etcd/ops.js';
import { currentRevision } from '../snapshotter/full-snapshot.js';
import { applyDeltaFile } from './apply.js';
import { fetchDeltasInOrder } from './fetch.js';
import type { RestorePlan } from './plan.js';

export interface RestoreOptions {
  binaries: EtcdBinaries;
  /** The data dir to produce. It is built in `<dataDir>.part` and renamed at the very end. */
  dataDir: string;
  /** `--restoration-temp-snapshots-dir`: scratch space for the base snapshot file and fetched deltas. */
  tempDir: string;
  name: string;
  initialCluster: string;
  initialClusterToken: string;
  initialAdvertisePeerUrls: string[];
  skipHashCheck: boolean;
  maxFetchers: number;
  embeddedEtcdQuotaBytes: number;
  maxRequestBytes: number;
  maxTxnOps: number;
  /** Sync writes of the replay etcd; off by default (upstream runs it with UnsafeNoFsync on 3.5+). */
  fsync?: boolean;
  /** Keep the replay etcd running and hand it to the caller (compact uses it); the caller stops it. */
  keepEtcdRunning?: boolean;
  /** Replace an existing data dir at the end instead of failing (the initializer's case). */
  replaceExisting?: boolean;
  logger: Logger;
  signal?: AbortSignal;
}

export interface RestoreResult {
  restored: boolean;
  revision: number;
  deltasApplied: number;
  revisionsApplied: number;
  durationMs: number;
  /** Only with `keepEtcdRunning`: the local etcd serving the restored data dir (at `dataDir`). */
  etcd?: LocalEtcd;
}

const LEAN_EVERY_DELTAS = 10;
const QUOTA_DEFRAG_RATIO = 0.8;

/**
 * Executes a restore plan: base snapshot through etcd's own restore into `<dataDir>.part`, then the deltas
 * replayed into a local etcd on that dir, then a rename. Any failure removes `.part` and leaves the data
 * dir and the store as they were.
 */
export async function executeRestore(store: SnapStore, plan: RestorePlan, opts: RestoreOptions): Promise<RestoreResult> {
  const started = Date.now();
  const { logger } = opts;
  if (!plan.base) return { restored: false, revision: 0, deltasApplied: 0, revisionsApplied: 0, durationMs: 0 };
  const partDir = `${opts.dataDir}.part`;
  if (!opts.replaceExisting && (await nonEmptyDir(opts.dataDir))) {
    throw new Error(`data-dir ${opts.dataDir} is not empty: refusing to restore over it`);
  }
  await mkdir(opts.tempDir, { recursive: true, mode: 0o700 });
  const scratch = await mkdtemp(join(opts.tempDir, 'restore-'));
  await rm(partDir, { recursive: true, force: true });
  let etcd: LocalEtcd | undefined;
  let client: Etcd3 | undefined;
  let handedOver = false;
  try {
    const base = plan.base;
    logger.info({ snapshot: base.snapName, deltas: plan.deltas.length, targetRevision: plan.targetRevision }, 'restoring');
    const dbFile = join(scratch, 'snapshot.db');
    await downloadFull(store, base, dbFile, opts.skipHashCheck, opts.signal);
    await restoreBaseSnapshot({
      binaries: opts.binaries,
      snapshotFile: dbFile,
      dataDir: partDir,
      name: opts.name,
      initialCluster: opts.initialCluster,
      initialClusterToken: opts.initialClusterToken,
      initialAdvertisePeerUrls: opts.initialAdvertisePeerUrls,
      skipHashCheck: opts.skipHashCheck,
    });
    await rm(dbFile, { force: true });
    logger.info({ snapshot: base.snapName, ms: Date.now() - started }, 'base snapshot restored');

    let revision = base.lastRevision;
    let deltasApplied = 0;
    let revisionsApplied = 0;
    if (plan.deltas.length > 0 || opts.keepEtcdRunning) {
      etcd = await startLocalEtcd({
        binaries: opts.binaries,
        dataDir: partDir,
        name: opts.name,
        quotaBackendBytes: opts.embeddedEtcdQuotaBytes,
        maxRequestBytes: opts.maxRequestBytes,
        maxTxnOps: opts.maxTxnOps,
        unsafeNoFsync: !opts.fsync,
      });
      client = new Etcd3({
        hosts: etcd.clientUrl,
        grpcOptions: { 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 },
      });
      revision = await currentRevision(client, 30_000);
      const progress = new Progress(plan, revision, logger);
      for await (const { snap, file } of fetchDeltasInOrder(store, plan.deltas, {
        maxFetchers: opts.maxFetchers,
        tempDir: scratch,
        ...(opts.signal ? { signal: opts.signal } : {}),
      })) {
        try {
          const r = await applyDeltaFile(client, file, `delta snapshot ${snap.snapName}`, revision, plan.targetRevision);
          revision = r.lastRevision;
          revisionsApplied += r.revisions;
        } finally {
          await rm(file, { force: true });
        }
        const expected = Math.min(snap.lastRevision, plan.targetRevision);
        const now = await currentRevision(client, 30_000);
        if (now !== expected && now < expected) {
          throw new Error(
            `mismatched event revision while applying delta snapshot ${snap.snapName}, expected ${expected} but applied ${now}`,
          );
        }
        deltasApplied++;
        progress.delta(snap, revision);
        if (deltasApplied % LEAN_EVERY_DELTAS === 0) await lean(client, revision, opts.embeddedEtcdQuotaBytes, logger);
      }
    }
    const result: RestoreResult = {
      restored: true,
      revision,
      deltasApplied,
      revisionsApplied,
      durationMs: 0,
    };
    if (opts.keepEtcdRunning && etcd) {
      // The caller keeps using this etcd; it serves `.part` until the caller stops it and renames.
      result.etcd = etcd;
      handedOver = true;
      client?.close();
      client = undefined;
    } else {
      client?.close();
      client = undefined;
      await etcd?.stop();
      etcd = undefined;
      if (opts.replaceExisting) await rm(opts.dataDir, { recursive: true, force: true });
      await rename(partDir, opts.dataDir);
    }
    result.durationMs = Date.now() - started;
    logger.info({ revision, deltasApplied, revisionsApplied, ms: result.durationMs }, 'restore finished');
    return result;
  } catch (err) {
    client?.close();
    await etcd?.stop();
    await rm(partDir, { recursive: true, force: true });
    throw err;
  } finally {
    if (!handedOver) client?.close();
    await rm(scratch, { recursive: true, force: true });
  }
}

async function nonEmptyDir(dir: string): Promise<boolean> {
  try {
    const s = await stat(dir);
    if (!s.isDirectory()) return true;
    const { readdir } = await import('node:fs/promises');
    return (await readdir(dir)).length > 0;
  } catch {
    return false;
  }
}

async function downloadFull(store: SnapStore, snap: Snapshot, file: string, skipHashCheck: boolean, signal?: AbortSignal) {
  const raw = await store.fetch(snap);
  const decompress = createDecompressStream(snap.compressionSuffix, snap.snapName);
  const out = createWriteStream(file, { mode: 0o600 });
  const options = signal ? { signal } : {};
  if (skipHashCheck) await pipeline(raw, decompress, out, options);
  else await pipeline(raw, decompress, new FullSnapshotVerifier(`full snapshot ${snap.snapName}`), out, options);
}

/** Keeps the replay etcd small: compact and, above 80 % of the quota, defragment (upstream §7 step 10). */
async function lean(client: Etcd3, revision: number, quota: number, logger: Logger): Promise<void> {
  try {
    await compact(client, revision, { physical: true, timeoutMs: 120_000 });
    const status = await client.maintenance.status();
    const size = Math.max(Number(status.dbSize), Number((status as { dbSizeInUse?: string }).dbSizeInUse ?? 0));
    if (size > quota * QUOTA_DEFRAG_RATIO) {
      logger.info({ dbSize: size, quota }, 'replay etcd near its quota: defragmenting');
      await client.maintenance.defragment({ deadline: new Date(Date.now() + 300_000) });
    }
  } catch (err) {
    logger.warn({ err }, 'compacting the replay etcd failed; will retry after the next delta');
  }
}

/** Logs deltas and revisions applied, the rate, and an estimate of the time left, every few seconds. */
class Progress {
  private readonly started = Date.now();
  private lastLog = 0;
  private readonly startRevision: number;

  constructor(
    private readonly plan: RestorePlan,
    startRevision: number,
    private readonly logger: Logger,
  ) {
    this.startRevision = startRevision;
  }

  delta(snap: Snapshot, revision: number): void {
    const now = Date.now();
    const last = snap === this.plan.deltas.at(-1);
    if (!last && now - this.lastLog < 5000) return;
    this.lastLog = now;
    const done = revision - this.startRevision;
    const total = this.plan.targetRevision - this.startRevision;
    const secs = (now - this.started) / 1000;
    const rate = secs > 0 ? done / secs : 0;
    const etaSeconds = rate > 0 ? Math.max(0, (total - done) / rate) : undefined;
    this.logger.info(
      {
        delta: snap.snapName,
        deltasApplied: this.plan.deltas.indexOf(snap) + 1,
        deltas: this.plan.deltas.length,
        revision,
        targetRevision: this.plan.targetRevision,
        revisionsPerSecond: Math.round(rate),
        ...(etaSeconds !== undefined ? { etaSeconds: Math.round(etaSeconds) } : {}),
      },
      'applying delta snapshots',
    );
  }
}
