/**
 * The fallback of `compact` for a chain the offline writer cannot write (compactor.ts says when): the chain
 * is restored into a throw-away data dir with a local etcd kept running, compacted at its head revision
 * (physical), optionally defragmented, and snapshotted back into the store. This is how upstream's
 * `pkg/compactor/compactor.go` does every compaction. Loaded only when needed (it brings the etcd client).
 */
import { EtcdbrError } from '../errors.js';
import { createReadStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { CompressionPolicy, Logger, SnapStore, Snapshot } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import { type EtcdBinaries, type LocalEtcd, connectLocalEtcd, type EtcdClient } from '../etcd/index.js';
import type { RestorePlan } from '../restorer/plan.js';
import { backendPath, executeRestore, restoreSettings } from '../restorer/restore.js';
import { reenableAuth } from '../restorer/replay-etcd.js';
import { takeFullSnapshot } from '../snapshotter/full-snapshot.js';
import type { CompactorConfig, RestorationConfig } from '../config/types.js';
import { saveCompactedBackend, withSha256Trailer } from './upload.js';

/** Upstream `etcdDialTimeout`: bounds the revision read on the local etcd. */
const REVISION_READ_TIMEOUT_MS = 30_000;

export interface OnlineCompactionDeps {
  store: SnapStore;
  binaries: EtcdBinaries;
  logger: Logger;
  clock: Clock;
  signal?: AbortSignal;
}

export interface OnlineCompaction {
  snapshot: Snapshot;
  revision: number;
  restoreMs: number;
  uploadMs: number;
}

/**
 * Restores, compacts and snapshots through a local etcd. The data dir `.part` and the local etcd are gone
 * afterwards either way; nothing is stored unless the whole snapshot verified.
 */
export async function compactThroughEtcd(
  deps: OnlineCompactionDeps,
  config: { restoration: RestorationConfig; compactor: CompactorConfig },
  plan: RestorePlan,
  compression: CompressionPolicy | undefined,
  isFinal: boolean,
): Promise<OnlineCompaction> {
  const { store, logger, clock, signal } = deps;
  const rc = config.restoration;
  const cc = config.compactor;
  const dataDir = path.resolve(rc.dataDir);
  const partDir = `${dataDir}.part`;
  const started = Date.now();
  let etcd: LocalEtcd | undefined;
  let client: EtcdClient | undefined;
  // The compacted snapshot has its keys without their lease, as upstream's (no restoredLeaseTtlSeconds).
  const { restoredLeaseTtlSeconds: _leases, ...settings } = restoreSettings(rc);
  try {
    const restored = await executeRestore(store, plan, {
      ...settings,
      binaries: deps.binaries,
      dataDir,
      tempDir: path.resolve(rc.tempDir),
      keepEtcdRunning: true,
      logger,
      ...(signal ? { signal } : {}),
    });
    etcd = restored.etcd;
    if (!etcd) throw new EtcdbrError('E_INTERNAL', 'restore for compaction did not hand over its local etcd');
    const restoreMs = Date.now() - started;
    client = await connectLocalEtcd(etcd.clientUrl);
    const revision = await client.currentRevision(REVISION_READ_TIMEOUT_MS);
    await compactAt(client, revision, cc.snapshotTimeout, logger);
    if (cc.defragment) await defragment(client, cc.defragTimeout, logger);
    signal?.throwIfAborted();
    const uploadStarted = Date.now();
    let snapshot: Snapshot;
    if (restored.authDisabledForReplay) {
      // The restore switched etcd auth off for the replay. A snapshot of the running etcd would carry auth
      // off into every later restore (upstream does that: it re-enables auth only when its embedded etcd
      // closes, after the snapshot). Instead: stop etcd, switch auth back on in its backend, and store that
      // backend file, which is what etcd's snapshot stream contains, with its sha256 trailer.
      client.close();
      client = undefined;
      await etcd.stop();
      await reenableAuth(partDir);
      logger.info({}, 'base snapshot has etcd auth enabled: storing the compacted backend with auth switched back on');
      snapshot = await saveCompactedBackend(
        { store, clock, logger, ...(signal ? { signal } : {}) },
        withSha256Trailer(createReadStream(backendPath(partDir), { highWaterMark: 1 << 20 })),
        { revision, compression, isFinal, timeoutMs: cc.snapshotTimeout },
      );
    } else {
      snapshot = await takeFullSnapshot(
        { client, store, compression, now: () => clock.now(), logger },
        { isFinal, snapshotTimeoutMs: cc.snapshotTimeout, connectionTimeoutMs: REVISION_READ_TIMEOUT_MS, ...(signal ? { signal } : {}) },
      );
    }
    return { snapshot, revision: snapshot.lastRevision, restoreMs, uploadMs: Date.now() - uploadStarted };
  } finally {
    client?.close();
    await etcd?.stop();
    await rm(partDir, { recursive: true, force: true });
  }
}

/**
 * Physical compaction at the head revision. A restore whose chain passed 80 % of its quota has compacted its
 * history already, so the head may be compacted; etcd then answers "required revision has been compacted",
 * which here means the work is done.
 */
async function compactAt(client: EtcdClient, revision: number, timeoutMs: number, logger: Logger): Promise<void> {
  try {
    await client.compact(revision, { physical: true, timeoutMs });
  } catch (err) {
    if (/required revision has been compacted/.test(String((err as Error)?.message ?? err))) {
      logger.info({ revision }, 'The restored etcd is already compacted at its head revision');
      return;
    }
    throw new EtcdbrError('E_FAILED', `failed to compact: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }
}

/** Defragmentation only saves space in the snapshot; as upstream, a failure is logged and ignored. */
async function defragment(client: EtcdClient, timeoutMs: number, logger: Logger): Promise<void> {
  const t0 = Date.now();
  try {
    await client.defragment({ timeoutMs });
    logger.info({ ms: Date.now() - t0 }, 'Defragmented the restored etcd');
  } catch (err) {
    logger.error({ err }, 'failed to defragment');
  }
}
