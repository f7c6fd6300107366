import { readFile } from 'node:fs/promises';
import type { Etcd3 } from 'etcd3';
import type { CommandContext } from '../cli/context.js';
import { systemClock, type Clock } from '../clock.js';
import { LeadershipWatcher, memberStatus } from '../cluster/leadership.js';
import { ClusterMaintenance } from '../cluster/maintenance.js';
import { MultiNode } from '../cluster/multinode.js';
import type { ServerConfig } from '../config/types.js';
import { STORE_ENV_PREFIX } from '../config/store.js';
import { createEtcdClientFromFlags } from '../etcd/client.js';
import { Metrics } from '../metrics.js';
import { ExponentialBackoff } from '../snapshotter/backoff.js';
import { snapshotterFactory } from '../snapshotter/from-config.js';
import { RotatingStore } from '../snapshotter/store-provider.js';
import { superviseSnapshotter } from '../snapshotter/supervisor.js';
import { latestSet } from '@etcdbrctl/snapstore';
import { createKubeClient, resolveKubeConnection, type KubeClient } from '../k8s/client.js';
import { MemberLeaseHeartbeat, etcdIdToHex } from '../k8s/member-lease.js';
import { FullSnapshotLeaseRenewer, SnapshotLeases, snapshotLeaseHook } from '../k8s/snapshot-leases.js';
import type { Snapshotter } from '../snapshotter/snapshotter.js';
import { buildHttpServer } from './app.js';
import { findEtcdBinaries, type EtcdBinaries } from '../etcd/binaries.js';
import { clusterSize, etcdConfigPath, parseInitialCluster, readEtcdConfigTemplate } from '../initializer/etcd-config.js';
import { initializeDataDir } from '../initializer/initializer.js';
import { InitializationState } from './initialization.js';
import { registerInitRoutes } from './init-routes.js';
import { HealthState } from './health.js';

export interface SidecarOptions {
  clock?: Clock;
  metrics?: Metrics;
  /** Called once the HTTP server listens (tests use it to learn the port). */
  onListening?: (url: string) => void;
}

/**
 * `etcdbrctl server`: the HTTP API at once (healthz 503), then, while the local etcd member is the raft
 * leader, the snapshotter and garbage collection; on SIGTERM everything stops and the last buffered
 * events are written as a delta.
 */
export async function runSidecar(config: ServerConfig, ctx: CommandContext, opts: SidecarOptions = {}): Promise<number> {
  const clock = opts.clock ?? systemClock;
  const logger = ctx.logger;
  const metrics = opts.metrics ?? new Metrics();
  const healthState = new HealthState();
  const conn = config.etcdConnectionConfig;
  const storeConfigured = ctx.stores.primary !== undefined;
  const store = storeConfigured
    ? new RotatingStore({
        resolve: () => ctx.resolveStore('primary'),
        env: ctx.env,
        envPrefix: STORE_ENV_PREFIX.primary,
        logger,
      })
    : undefined;
  const client: Etcd3 = await createEtcdClientFromFlags(conn);

  let active: Snapshotter | undefined;
  const health = config.healthConfig;
  let kube: KubeClient | undefined;
  if (health.snapshotLeaseRenewalEnabled || health.memberLeaseRenewalEnabled) {
    kube = await createKubeClient(resolveKubeConnection({ env: ctx.env }));
  }
  const namespace = ctx.env.POD_NAMESPACE ?? '';
  if (kube && namespace === '') throw new Error('POD_NAMESPACE must be set when lease renewal is enabled');
  const leases =
    kube && health.snapshotLeaseRenewalEnabled
      ? new SnapshotLeases({
          kube,
          namespace,
          fullSnapshotLeaseName: health.fullSnapshotLeaseName,
          deltaSnapshotLeaseName: health.deltaSnapshotLeaseName,
          clock,
          logger,
        })
      : undefined;
  const renewer = leases
    ? new FullSnapshotLeaseRenewer({ leases, latestFull: () => active?.chain.prevFull, clock, logger })
    : undefined;
  const memberLease =
    kube && health.memberLeaseRenewalEnabled
      ? new MemberLeaseHeartbeat({
          kube,
          namespace,
          memberName: ctx.env.POD_NAME ?? config.restorationConfig.name,
          memberIdentity: async () => {
            const st = (await client.maintenance.status()) as unknown as {
              header: { member_id: string; cluster_id: string };
              leader: string;
            };
            return {
              memberId: etcdIdToHex(st.header.member_id),
              clusterId: etcdIdToHex(st.header.cluster_id),
              isLeader: st.header.member_id === st.leader,
            };
          },
          peerTLSEnabled: config.restorationConfig.initialAdvertisePeerURLs.every((u) => u.startsWith('https://')),
          clock,
          logger,
          heartbeatMs: health.heartbeatDuration,
          timeoutMs: conn.connectionTimeout,
        })
      : undefined;
  const rc = config.restorationConfig;
  const size = await resolveClusterSize(ctx.env, rc.initialCluster, logger);
  metrics.clusterSize.set(size);
  // --- multi-node membership: bootstrap decision, /config cluster view, learner promotion ---
  const multiNode = new MultiNode({ env: ctx.env, connection: conn, ...(kube ? { kube } : {}), namespace, clock, logger, metrics });
  // --- end multi-node membership ---
  let binaries: Promise<EtcdBinaries> | undefined;
  const initState = new InitializationState(
    async (mode) => {
      // Multi-node: cluster size and member identity from the etcd config as it is now (druid rewrites it on scale-up).
      const mn = size > 1 ? await multiNode.initOptions(ctx.signal) : undefined;
      await initializeDataDir(mode, {
        dataDir: rc.dataDir,
        ...(ctx.env.POD_NAMESPACE ? { podNamespace: ctx.env.POD_NAMESPACE } : {}),
        clusterSize: mn?.clusterSize ?? size,
        ...(mn ? { multiNode: mn.multiNode } : {}),
        ...(store ? { store: () => store.get() } : {}),
        ...(ctx.stores.primary ? { snapstoreTempDir: ctx.stores.primary.tempDir } : {}),
        binaries: () => (binaries ??= findEtcdBinaries({ etcdBin: ctx.env.ETCD_BIN, path: ctx.env.PATH ?? '' })),
        restore: {
          tempDir: rc.tempDir,
          name: rc.name,
          initialCluster: rc.initialCluster,
          initialClusterToken: rc.initialClusterToken,
          initialAdvertisePeerUrls: rc.initialAdvertisePeerURLs,
          skipHashCheck: rc.skipHashCheck,
          maxFetchers: rc.maxFetchers,
          embeddedEtcdQuotaBytes: rc.embeddedEtcdQuotaBytes,
          maxRequestBytes: rc.maxRequestBytes,
          maxTxnOps: rc.maxTxnOps,
        },
        logger,
        metrics,
      });
    },
    logger,
    () => healthState.setHealthy(false),
  );
  const serverTls = Boolean(config.serverConfig.serverCert && config.serverConfig.serverKey);
  const http = await buildHttpServer({
    config: config.serverConfig,
    logger,
    metrics,
    health: healthState,
    snapshots: () => active,
    store: () => store?.peek(),
    leaderProxy: {
      findLeaderUrl: async () => {
        const status = await memberStatus(client, conn.connectionTimeout);
        const members = await client.cluster.memberList({});
        const leader = members.members.find((m) => BigInt(m.ID).toString(16) === status.leaderId);
        const clientUrl = leader?.clientURLs[0];
        if (!clientUrl) return undefined;
        const host = new URL(clientUrl).hostname;
        return `${serverTls ? 'https' : 'http'}://${host}:${config.serverConfig.port}`;
      },
    },
    ...(serverTls && conn.caFile ? { proxyCa: await readFile(conn.caFile) } : {}),
    extraRoutes: (app) =>
      registerInitRoutes(app, {
        state: initState,
        env: ctx.env,
        // Through the service endpoints: before /config the local etcd is not running yet.
        clusterView: () => multiNode.clusterView(),
      }),
  });
  const { url } = await http.listen();
  opts.onListening?.(url);

  // --- cluster maintenance: peer URL update at start; defragmentation and member cleanup on the leader ---
  const maintenance = new ClusterMaintenance({ config, env: ctx.env, clock, logger, metrics });
  const peerUrlsDone = maintenance.updatePeerUrls(ctx.signal);
  let maintenanceDone = Promise.resolve();
  // --- end cluster maintenance ---

  const leaderWork = { abort: undefined as AbortController | undefined, done: Promise.resolve() };
  const startLeading = () => {
    if (leaderWork.abort) return;
    const abort = new AbortController();
    leaderWork.abort = abort;
    // Cluster maintenance runs on the leader with or without a store (upstream starts defragmentation there too).
    maintenanceDone = Promise.all([maintenanceDone, maintenance.lead(abort.signal)]).then(() => undefined);
    if (!store) {
      // Without a store the leader only reports healthy (upstream).
      healthState.setHealthy(true);
      return;
    }
    const factory = snapshotterFactory({
      connection: conn,
      snapshotter: config.snapshotterConfig,
      compression: config.compressionConfig,
      client,
      store: () => store.get(),
      clock,
      logger,
      metrics,
      ...(leases && renewer
        ? {
            onSnapshot: snapshotLeaseHook({
              leases,
              renewer,
              latestDeltas: async () => latestSet(await (await store.get()).list()).deltas,
              logger,
            }),
          }
        : {}),
    });
    renewer?.start();
    leaderWork.done = superviseSnapshotter(
      {
        ...factory,
        probeEtcd: async () => {
          await memberStatus(client, 5_000);
        },
        setHealthy: (h) => healthState.setHealthy(h),
        onActiveSnapshotter: (s) => {
          active = s;
        },
        backoff: new ExponentialBackoff({
          multiplier: config.exponentialBackoffConfig.multiplier,
          attemptLimit: config.exponentialBackoffConfig.attemptLimit,
          thresholdMs: config.exponentialBackoffConfig.thresholdTime,
        }),
        schedule: config.snapshotterConfig.schedule,
        clock,
        logger,
        metrics,
      },
      abort.signal,
    ).catch((err: unknown) => logger.error({ err }, 'snapshotter supervisor stopped'));
  };
  const stopLeading = () => {
    healthState.setHealthy(false);
    leaderWork.abort?.abort();
    leaderWork.abort = undefined;
    void renewer?.stop();
  };

  const leadership = new LeadershipWatcher(
    client,
    { periodMs: config.leaderElectionConfig.reelectionPeriod, timeoutMs: config.leaderElectionConfig.etcdConnectionTimeout },
    {
      onStartedLeading: startLeading,
      onStoppedLeading: stopLeading,
      // Multi-node: a follower that is a learner promotes itself once in sync; etcdbr_is_learner follows etcd.
      onLearner: (st) => multiNode.onLearner(st),
      onStatus: (_state, st) => multiNode.onStatus(st),
    },
    clock,
    logger,
  );
  memberLease?.start();
  try {
    await leadership.run(ctx.signal);
  } finally {
    stopLeading();
    await memberLease?.stop();
    await renewer?.stop();
    await leaderWork.done;
    await maintenanceDone;
    await peerUrlsDone;
    await multiNode.settle();
    await http.close();
    await store?.close();
    client.close();
  }
  logger.info({}, 'server stopped');
  return 0;
}


/**
 * Cluster size from the etcd config's initial-cluster (upstream reads it at start and fails without the
 * file); without the file we fall back to `--initial-cluster` so a plain local run works.
 */
async function resolveClusterSize(
  env: Readonly<Record<string, string | undefined>>,
  initialCluster: string,
  logger: { warn(o: object, m: string): void },
): Promise<number> {
  const path = etcdConfigPath(env);
  try {
    return clusterSize(await readEtcdConfigTemplate(path));
  } catch (err) {
    logger.warn({ err, path }, 'cannot read the etcd config file; taking the cluster size from --initial-cluster');
    return Math.max(1, parseInitialCluster(initialCluster).length);
  }
}
