/**
 * The fallback of `compact` for a chain the offline writer cannot write, and its way with
 * `--delta-replay=online` (compactor.ts says when): the chain is restored into a throw-away data dir with a
 * local etcd kept running, compacted at its head revision (physical), optionally defragmented, and its
 * backend stored as the new full snapshot once etcd has stopped. This is how upstream's
 * `pkg/compactor/compactor.go` does every compaction, but the keys keep their lease (as in a restore of
 * ours). Loaded only when needed (it brings the etcd client).
 */
import { EtcdbrError } from '../errors.js';
import { createReadStream } from 'node:fs';
import { rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { CompressionPolicy, Logger, SnapStore, Snapshot } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import { type EtcdBinaries, type LocalEtcd, connectLocalEtcd, type EtcdClient } from '../etcd/index.js';
import type { RestorePlan } from '../restorer/plan.js';
import { backendPath, executeRestore, restoreSettings } from '../restorer/restore.js';
import { reenableAuth } from '../restorer/replay-etcd.js';
import { verifyRestoredBackend } from '../restorer/verify-backend.js';
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
  /** Size of the stored backend (without its sha256 trailer). */
  bytes: number;
}

/**
 * Restores, compacts and stores through a local etcd. The data dir `.part` and the local etcd are gone
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
  try {
    const restored = await executeRestore(store, plan, {
      ...restoreSettings(rc),
      // Through etcd, whatever --delta-replay says (compactor.ts chose this way): the online replay holds every
      // lease with a replay-long TTL, so none expires while etcd runs and deletes keys at revisions of its own.
      deltaReplay: 'online',
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
    // Not etcd's snapshot stream: its `lease` bucket has the replay's TTLs, and with an auth-enabled base, auth
    // off (upstream stores that: it re-enables auth only when its embedded etcd closes, after the snapshot).
    // Instead etcd stops, the backend gets the restore's `lease` bucket and auth back on, and that file, what
    // the snapshot stream would contain, is stored with its sha256 trailer.
    client.close();
    client = undefined;
    await etcd.stop();
    const db = backendPath(partDir);
    if (restored.leases) {
      const leases = await restored.leases.writeBucket(db, signal);
      logger.info({ leases }, 'leases of the compacted backend written');
    }
    if (restored.authDisabledForReplay) {
      await reenableAuth(partDir);
      logger.info({}, 'base snapshot has etcd auth enabled: storing the compacted backend with auth switched back on');
    }
    await verifyRestoredBackend(db);
    const bytes = (await stat(db)).size;
    const snapshot = await saveCompactedBackend(
      { store, clock, logger, ...(signal ? { signal } : {}) },
      withSha256Trailer(createReadStream(db, { highWaterMark: 1 << 20 })),
      { revision, compression, isFinal, timeoutMs: cc.snapshotTimeout },
    );
    return { snapshot, revision, restoreMs, uploadMs: Date.now() - uploadStarted, bytes };
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
