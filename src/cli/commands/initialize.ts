import { etcdBinaryLookup } from '../../config/pod-environment.js';
import type { InitializeCommandConfig } from '../../config/types.js';
import { pathsTheTempDirKeeps, STORE_ENV_PREFIX } from '../../config/store.js';
import { findEtcdBinaries, type EtcdBinaries } from '../../etcd/index.js';
import { initializeDataDir } from '../../initializer/initializer.js';
import { restoreSettings } from '../../restorer/restore.js';
import { Metrics } from '../../metrics.js';
import { RotatingStore } from '../../config/store-provider.js';
import type { CommandContext } from '../../config/context.js';
import { reportFailure } from '../failure.js';

/**
 * `etcdbrctl initialize`: validate `--data-dir` (`--validation-mode`) and restore it from the store when it
 * is missing or corrupt, as the server does on `/initialization/start`. As upstream, the cluster size is
 * not known here, so this is the single-node path.
 */
export async function run(config: InitializeCommandConfig, ctx: CommandContext): Promise<number> {
  const rc = config.restorationConfig;
  const store = ctx.stores.primary
    ? new RotatingStore({
        resolve: () => ctx.resolveStore('primary'),
        env: ctx.env,
        envPrefix: STORE_ENV_PREFIX.primary,
        logger: ctx.logger,
      })
    : undefined;
  let binaries: Promise<EtcdBinaries> | undefined;
  try {
    const outcome = await initializeDataDir(config.validationMode, {
      dataDir: rc.dataDir,
      ...(ctx.env.POD_NAMESPACE ? { podNamespace: ctx.env.POD_NAMESPACE } : {}),
      clusterSize: 1,
      ...(store ? { store: () => store.get() } : {}),
      ...(ctx.stores.primary
        ? { snapstoreTempDir: ctx.stores.primary.tempDir, keepInTempDir: pathsTheTempDirKeeps(ctx.pod.etcdConfigPath, ctx.stores.primary) }
        : {}),
      binaries: () => (binaries ??= findEtcdBinaries(etcdBinaryLookup(ctx.pod))),
      restore: { ...restoreSettings(rc), tempDir: rc.tempDir, signal: ctx.signal },
      logger: ctx.logger,
      metrics: new Metrics({ defaultMetrics: false }),
    });
    ctx.logger.info({ outcome, dataDir: rc.dataDir }, 'initialization finished');
    return 0;
  } catch (err) {
    return reportFailure(ctx.io, ctx.logger, 'etcdbrctl initialize', err);
  } finally {
    await store?.close();
  }
}
