import { setFlagsFromString } from 'node:v8';
import { EtcdbrError } from '../../errors.js';
import { etcdBinaryLookup } from '../../config/pod-environment.js';
import { openSnapStore, SnapStoreError, type StoreConfig } from '@etcdbrctl/snapstore';
import { systemClock } from '../../clock.js';
import { compactSnapshots } from '../../compactor/compactor.js';
import { buildStoreConfig } from '../../config/store.js';
import type { CompactCommandConfig } from '../../config/types.js';
import { findEtcdBinaries } from '../../etcd/index.js';
import { createKubeClient, resolveKubeConnection } from '../../k8s/client.js';
import { SnapshotLeases } from '../../k8s/snapshot-leases.js';
import type { CommandContext } from '../../config/context.js';
import { reportFailure } from '../failure.js';

/**
 * `etcdbrctl compact`: the latest full snapshot and its deltas become one new full snapshot (see
 * src/compactor/compactor.ts: written offline, no etcd process). Exit 0 also when the store has no full snapshot (nothing to do).
 */
export async function run(config: CompactCommandConfig, ctx: CommandContext): Promise<number> {
  // V8 grows the heap less eagerly: the compaction's per-key maps and its stream of delta events otherwise
  // let the heap and its garbage grow far beyond what is live. 1,000,000-revision chain: peak RSS 182-308 MiB
  // without, 116-122 MiB with (npm run bench -- --compiled compact); the Job is a batch run, time matters less.
  setFlagsFromString('--optimize-for-size');
  const store = await openSnapStore(ctx.stores.primary ?? (await defaultLocalStore(config, ctx)));
  try {
    const cc = config.compactorConfig;
    const result = await compactSnapshots(
      {
        store,
        binaries: () => findEtcdBinaries(etcdBinaryLookup(ctx.pod)),
        logger: ctx.logger,
        clock: systemClock,
        signal: ctx.signal,
        ...(cc.snapshotLeaseRenewalEnabled
          ? {
              leases: async () => {
                const namespace = ctx.env.POD_NAMESPACE ?? '';
                if (namespace === '')
                  throw new EtcdbrError('E_INVALID_INPUT', 'POD_NAMESPACE must be set when snapshot lease renewal is enabled');
                return new SnapshotLeases({
                  kube: await createKubeClient(resolveKubeConnection({ env: ctx.env })),
                  namespace,
                  fullSnapshotLeaseName: cc.fullSnapshotLeaseName,
                  deltaSnapshotLeaseName: cc.deltaSnapshotLeaseName,
                  clock: systemClock,
                  logger: ctx.logger,
                });
              },
            }
          : {}),
      },
      { restoration: config.restorationConfig, compactor: cc },
    );
    if (!result.snapshot) return 0;
    if (cc.metricsScrapeWaitDuration > 0) {
      ctx.logger.info({ ms: cc.metricsScrapeWaitDuration }, 'Waiting for the metrics to be scraped');
      // A signal ends the wait early; the snapshot is stored already, so that is still a success.
      await systemClock.sleep(cc.metricsScrapeWaitDuration, ctx.signal).catch(() => undefined);
    }
    ctx.logger.info(
      {
        snapshot: result.snapshot.snapName,
        base: result.base?.snapName,
        deltas: result.deltas,
        path: result.path,
        buildMs: result.buildMs,
        uploadMs: result.uploadMs,
        totalMs: result.totalMs,
      },
      `Compacted snapshot name : ${result.snapshot.snapName}`,
    );
    ctx.io.stdout.write(`Compacted snapshot name : ${result.snapshot.snapName}\n`);
    return 0;
  } catch (err) {
    return reportFailure(ctx.io, ctx.logger, 'etcdbrctl compact', err, { signal: ctx.signal, interruptedNote: 'nothing was stored' });
  } finally {
    await store.close();
  }
}

/** Upstream's store factory treats an empty provider as Local (container `default.bkp` under $HOME). */
async function defaultLocalStore(config: CompactCommandConfig, ctx: CommandContext): Promise<StoreConfig> {
  const local = await buildStoreConfig(
    { ...config.snapstoreConfig, provider: 'Local' },
    { role: 'primary', env: ctx.env, homeDir: ctx.homeDir, logger: ctx.logger, encryption: config.encryptionConfig },
  );
  if (local?.provider !== 'Local') throw new SnapStoreError('E_CONFIG', 'cannot build the default Local store');
  ctx.logger.info({ rootDir: local.rootDir }, 'No storage provider given: using the Local store');
  return local;
}
