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
import { secondarySyncFromConfig } from '../copier/secondary-sync.js';
import { latestSet } from '@etcdbrctl/snapstore';
import { createKubeClient, resolveKubeConnection, type KubeClient } from '../k8s/client.js';
import { MemberLeaseHeartbeat, etcdIdToHex } from '../k8s/member-lease.js';
import { FullSnapshotLeaseRenewer, SnapshotLeases, snapshotLeaseHook } from '../k8s/snapshot-leases.js';
import { EtcdMemberStatusPublisher, recordInitialization } from '../k8s/etcd-member-status.js';
import { LeadershipLost, type Snapshotter } from '../snapshotter/snapshotter.js';
import { buildHttpServer } from './app.js';
import { findEtcdBinaries, type EtcdBinaries } from '../etcd/binaries.js';
import { clusterSize, etcdConfigPath, parseInitialCluster, readEtcdConfigTemplate } from '../initializer/etcd-config.js';
import { initializeDataDir } from '../initializer/initializer.js';
import { restoreSettings } from '../restorer/restore.js';
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
  // --- EtcdMember status (DEP-04): published whenever Kubernetes is enabled ---
  const etcdMemberStatus = kube
    ? new EtcdMemberStatusPublisher({
        kube,
        namespace,
        name: ctx.env.POD_NAME ?? rc.name,
        clusterSize: size,
        peerTLSEnabled: rc.initialAdvertisePeerURLs.every((u) => u.startsWith('https://')),
        // DB sizes change with every write: refreshed at the member lease heartbeat, not every reelection period.
        sizeRefreshMs: health.heartbeatDuration,
        clock,
        logger,
      })
    : undefined;
  etcdMemberStatus?.start();
  // --- end EtcdMember status ---
  // --- multi-node membership: bootstrap decision, /config cluster view, learner promotion ---
  const multiNode = new MultiNode({ env: ctx.env, connection: conn, ...(kube ? { kube } : {}), namespace, clock, logger, metrics });
  // --- end multi-node membership ---
  let binaries: Promise<EtcdBinaries> | undefined;
  const initState = new InitializationState(
    recordInitialization(etcdMemberStatus, async (mode) => {
      // Multi-node: cluster size and member identity from the etcd config as it is now (druid rewrites it on scale-up).
      const mn = size > 1 ? await multiNode.initOptions(ctx.signal) : undefined;
      return initializeDataDir(mode, {
        dataDir: rc.dataDir,
        ...(ctx.env.POD_NAMESPACE ? { podNamespace: ctx.env.POD_NAMESPACE } : {}),
        clusterSize: mn?.clusterSize ?? size,
        ...(mn ? { multiNode: mn.multiNode } : {}),
        ...(store ? { store: () => store.get() } : {}),
        ...(ctx.stores.primary ? { snapstoreTempDir: ctx.stores.primary.tempDir } : {}),
        binaries: () => (binaries ??= findEtcdBinaries({ etcdBin: ctx.env.ETCD_BIN, path: ctx.env.PATH ?? '' })),
        restore: { ...restoreSettings(rc), tempDir: rc.tempDir },
        logger,
        metrics,
        ...(etcdMemberStatus ? { onProgress: (p) => etcdMemberStatus.onInitializationProgress(p) } : {}),
      });
    }),
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
  const maintenance = new ClusterMaintenance({
    config,
    env: ctx.env,
    clock,
    logger,
    metrics,
    ...(etcdMemberStatus ? { onMemberDefragmented: (r) => etcdMemberStatus.onMemberDefragmented(r) } : {}),
  });
  const peerUrlsDone = maintenance.updatePeerUrls(ctx.signal);
  let maintenanceDone = Promise.resolve();
  // --- end cluster maintenance ---

  // --- secondary backup sync: on the leader, copy the backups to the secondary store and GC it there ---
  const secondarySync = secondarySyncFromConfig({
    config,
    secondary: ctx.stores.secondary,
    resolveSecondary: () => ctx.resolveStore('secondary'),
    env: ctx.env,
    primary: store ? () => store.get() : undefined,
    clock,
    logger,
    metrics,
  });
  let secondarySyncDone = Promise.resolve();
  // --- end secondary backup sync ---

  const leaderWork = { abort: undefined as AbortController | undefined, done: Promise.resolve() };
  const startLeading = () => {
    if (leaderWork.abort) return;
    const abort = new AbortController();
    leaderWork.abort = abort;
    // Cluster maintenance runs on the leader with or without a store (upstream starts defragmentation there too).
    maintenanceDone = Promise.all([maintenanceDone, maintenance.lead(abort.signal)]).then(() => undefined);
    // --- secondary backup sync ---
    if (secondarySync) secondarySyncDone = Promise.all([secondarySyncDone, secondarySync.run(abort.signal)]).then(() => undefined);
    // --- end secondary backup sync ---
    if (!store) {
      // Without a store the leader only reports healthy (upstream).
      healthState.setHealthy(true);
      return;
    }
    const leaseHook =
      leases && renewer
        ? snapshotLeaseHook({
            leases,
            renewer,
            latestDeltas: async () => latestSet(await (await store.get()).list()).deltas,
            logger,
          })
        : undefined;
    const factory = snapshotterFactory({
      connection: conn,
      snapshotter: config.snapshotterConfig,
      compression: config.compressionConfig,
      client,
      store: () => store.get(),
      clock,
      logger,
      metrics,
      onSnapshot: async (snap, info) => {
        etcdMemberStatus?.onSnapshot(snap, info);
        await leaseHook?.(snap);
      },
    });
    renewer?.start();
    // The previous term's snapshotter may still be finishing a write (an upload under way, the last delta on
    // shutdown): the new one reads the store only after that, or both would write from the same revision,
    // and the old supervisor's final "unhealthy" would land after the new one reported healthy.
    const previousTerm = leaderWork.done;
    leaderWork.done = previousTerm
      .then(() =>
        superviseSnapshotter(
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
        ),
      )
      .catch((err: unknown) => logger.error({ err }, 'snapshotter supervisor stopped'));
  };
  const stopLeading = () => {
    healthState.setHealthy(false);
    // Only a shutdown writes the buffered events; after a leadership change the next leader catches up.
    leaderWork.abort?.abort(ctx.signal.aborted ? undefined : new LeadershipLost('this member is no longer the etcd leader'));
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
      onStatus: (_state, st) => {
        multiNode.onStatus(st);
        if (st) etcdMemberStatus?.onEtcdStatus(st);
      },
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
    // --- secondary backup sync ---
    await secondarySyncDone;
    await secondarySync?.close();
    // --- end secondary backup sync ---
    await maintenanceDone;
    await peerUrlsDone;
    await multiNode.settle();
    await etcdMemberStatus?.stop();
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
