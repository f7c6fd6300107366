/**
 * What the etcd-wrapper's `/initialization/start` runs: data-dir validation and, when needed, a restore or
 * a multi-node join, reported to the EtcdMember status. Also the cluster size the sidecar starts with.
 */
import type { StoreConfig } from '@etcdbrctl/snapstore';
import { etcdBinaryLookup, type PodEnvironment } from '../../config/pod-environment.js';
import type { MultiNode } from '../../cluster/multinode.js';
import type { ServerConfig } from '../../config/types.js';
import { findEtcdBinaries, type EtcdBinaries } from '../../etcd/index.js';
import {
  clusterSize,
  initialClusterSize,
  readEtcdConfigTemplate,
  restoreIdentityFromConfig,
  type RestoreIdentity,
} from '../../config/etcd-config.js';
import type { InitializationOutcome } from '../../initializer/initializer.js';
import { recordInitialization, type EtcdMemberStatusPublisher } from '../../cluster/member-status-publisher.js';
import type { Logger } from '../../log.js';
import type { Metrics } from '../../metrics.js';
import type { RotatingStore } from '../../config/store-provider.js';
import { pathsTheTempDirKeeps } from '../../config/store.js';
import type { HealthState } from '../health.js';
import { InitializationState, type ValidationMode } from '../initialization.js';
import { speedFirstDuring } from '../../speed-first.js';

export function wireInitialization(input: {
  config: ServerConfig;
  pod: PodEnvironment;
  /** Aborted on shutdown; stops waiting for the multi-node cluster view. */
  signal: AbortSignal;
  /** The cluster size at start; above 1 the etcd config is read again at each initialization. */
  clusterSize: number;
  multiNode: MultiNode;
  store: RotatingStore | undefined;
  primaryStore: StoreConfig | undefined;
  etcdMemberStatus: EtcdMemberStatusPublisher | undefined;
  health: HealthState;
  /**
   * Ends the leader term (its buffered events written first) before the data dir is touched, and lets it
   * start again afterwards, so a restore never mixes two histories in the store.
   */
  leaderTerm: { pause(): Promise<void>; resume(): void };
  logger: Logger;
  metrics: Metrics;
}): InitializationState {
  const { pod, multiNode, store, primaryStore, etcdMemberStatus, logger, metrics } = input;
  const rc = input.config.restorationConfig;
  const size = input.clusterSize;
  let binaries: Promise<EtcdBinaries> | undefined;
  return new InitializationState(
    recordInitialization(etcdMemberStatus, async (mode) => {
      await input.leaderTerm.pause();
      try {
        // Validation and restore are a burst of CPU work: the short commands' settings for it (speed-first.ts).
        return await speedFirstDuring(() => initialize(mode));
      } finally {
        input.leaderTerm.resume();
      }
    }),
    logger,
    () => input.health.setHealthy(false),
  );

  async function initialize(mode: ValidationMode): Promise<InitializationOutcome> {
    // Multi-node: cluster size and member identity from the etcd config as it is now (druid rewrites it on scale-up).
    const mn = size > 1 ? await multiNode.initOptions(input.signal) : undefined;
    // The validator, the restorer and the bbolt and WAL code load when etcd-wrapper first asks for an
    // initialization, not with the server: a running sidecar without one does not hold them.
    const [{ initializeDataDir }, { restoreSettings }] = await Promise.all([
      import('../../initializer/initializer.js'),
      import('../../restorer/restore.js'),
    ]);
    const identity = mn ? undefined : await singleMemberRestoreIdentity(pod, logger);
    return initializeDataDir(mode, {
      dataDir: rc.dataDir,
      ...(pod.podNamespace ? { podNamespace: pod.podNamespace } : {}),
      clusterSize: mn?.clusterSize ?? size,
      ...(mn ? { multiNode: mn.multiNode } : {}),
      ...(store ? { store: () => store.get() } : {}),
      ...(primaryStore
        ? { snapstoreTempDir: primaryStore.tempDir, keepInTempDir: pathsTheTempDirKeeps(pod.etcdConfigPath, primaryStore) }
        : {}),
      binaries: () => (binaries ??= findEtcdBinaries(etcdBinaryLookup(pod))),
      restore: {
        ...restoreSettings(rc),
        ...(identity ? { name: identity.name, initialCluster: identity.initialCluster, initialAdvertisePeerUrls: identity.peerUrls } : {}),
        tempDir: rc.tempDir,
      },
      logger,
      metrics,
      ...(etcdMemberStatus ? { onProgress: (p) => etcdMemberStatus.onInitializationProgress(p) } : {}),
    });
  }
}

/**
 * Cluster size from the etcd config's initial-cluster (upstream reads it at start and fails without the
 * file); without the file we fall back to `--initial-cluster` so a plain local run works.
 */
export async function resolveClusterSize(
  pod: PodEnvironment,
  initialCluster: string,
  logger: { warn(o: object, m: string): void },
): Promise<number> {
  const path = pod.etcdConfigPath;
  try {
    return clusterSize(await readEtcdConfigTemplate(path));
  } catch (err) {
    logger.warn({ err, path }, 'cannot read the etcd config file; taking the cluster size from --initial-cluster');
    return Math.max(1, initialClusterSize(initialCluster));
  }
}

/**
 * A single member restores as its etcd config names it (restoreIdentityFromConfig), read at each
 * initialization as druid may have rewritten the file; the restoration flags when there is no usable file
 * or POD_NAME (a plain local run).
 */
async function singleMemberRestoreIdentity(pod: PodEnvironment, logger: Logger): Promise<RestoreIdentity | undefined> {
  if (pod.podName === undefined || pod.podName === '') return undefined;
  try {
    const identity = restoreIdentityFromConfig(await readEtcdConfigTemplate(pod.etcdConfigPath), pod.podName);
    if (identity)
      logger.debug({ member: identity.name, peerURLs: identity.peerUrls }, 'a restore takes its member identity from the etcd config');
    return identity;
  } catch (err) {
    logger.debug({ err, path: pod.etcdConfigPath }, 'no usable etcd config: a restore takes its member identity from the flags');
    return undefined;
  }
}
