import type { CommandContext } from '../config/context.js';
import { systemClock, type Clock } from '../clock.js';
import { LeadershipWatcher } from '../cluster/leadership.js';
import { ClusterMaintenance } from '../cluster/maintenance.js';
import { MultiNode } from '../cluster/multinode.js';
import type { ServerConfig } from '../config/types.js';
import { STORE_ENV_PREFIX } from '../config/store.js';
import { createEtcdClientFromFlags } from '../etcd/index.js';
import { Metrics } from '../metrics.js';
import type { Snapshotter } from '../snapshotter/snapshotter.js';
import { RotatingStore } from '../config/store-provider.js';
import { HealthState } from './health.js';
import { wireHttp } from './wiring/http.js';
import { BackupScrubber, scheduledVerificationProblem } from '../verifier/scrubber.js';
import { drillScheduleProblem } from '../verifier/drill-runner.js';
import { EtcdbrError } from '../errors.js';
import { resolveClusterSize, wireInitialization } from './wiring/initialization.js';
import { startEtcdMemberStatus, wireKube } from './wiring/kube.js';
import { LeaderWork } from './wiring/leader-work.js';

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
  const verifyProblem = scheduledVerificationProblem(config.verifySchedule, ctx.stores.primary?.encryption);
  if (verifyProblem !== undefined) throw new EtcdbrError('E_INVALID_INPUT', verifyProblem);
  const drillProblem = drillScheduleProblem(config.hashDrillSchedule, ctx.stores.primary?.encryption);
  if (drillProblem.refuse !== undefined) throw new EtcdbrError('E_INVALID_INPUT', drillProblem.refuse);
  if (drillProblem.off !== undefined) logger.info({}, drillProblem.off);
  // One sidecar per member runs at a time (its pod), so the temp files a store holds under this name were
  // left by this member's previous sidecar, killed mid-save, and can go at once.
  const tempOwner = `server/${ctx.pod.podName ?? config.restorationConfig.name}`;
  const store = storeConfigured
    ? new RotatingStore({
        resolve: () => ctx.resolveStore('primary'),
        env: ctx.env,
        envPrefix: STORE_ENV_PREFIX.primary,
        logger,
        tempOwner,
      })
    : undefined;
  // A Local store is opened now, so that every member removes its killed predecessor's temp files, not only
  // the next leader. A cloud store waits for its first use: opening it would load its SDK on members that
  // may never use it.
  if (store && ctx.stores.primary?.provider === 'Local') {
    store.get().catch((err: unknown) => logger.warn({ err }, 'cannot open the Local store at start; it is tried again when used'));
  }
  const client = await createEtcdClientFromFlags(conn);
  let active: Snapshotter | undefined;

  const k8s = await wireKube({ config, env: ctx.env, pod: ctx.pod, client, latestFull: () => active?.chain.prevFull, clock, logger });
  const size = await resolveClusterSize(ctx.pod, config.restorationConfig.initialCluster, logger);
  metrics.clusterSize.set(size);
  const etcdMemberStatus = startEtcdMemberStatus(k8s, { config, pod: ctx.pod, clusterSize: size, clock, logger });
  // Multi-node membership: bootstrap decision, /config cluster view, learner promotion.
  const multiNode = new MultiNode({
    pod: ctx.pod,
    connection: conn,
    ...(k8s.kube ? { kube: k8s.kube } : {}),
    ...(k8s.etcdMembers ? { etcdMembers: k8s.etcdMembers } : {}),
    namespace: k8s.namespace,
    clock,
    logger,
    metrics,
  });
  // The leader's work is built after the HTTP server; initialization reaches it through this late binding.
  let leaderWork: LeaderWork | undefined;
  let clusterMaintenance: ClusterMaintenance | undefined;
  const initState = wireInitialization({
    config,
    pod: ctx.pod,
    signal: ctx.signal,
    clusterSize: size,
    multiNode,
    store,
    primaryStore: ctx.stores.primary,
    etcdMemberStatus,
    health: healthState,
    leaderTerm: {
      pause: async () => leaderWork?.pauseForInitialization(),
      resume: () => leaderWork?.resumeAfterInitialization(),
    },
    logger,
    metrics,
  });
  // Backup verification: /snapshot/verify on any member with a store, --verify-schedule on the leader.
  const scrubber = store ? new BackupScrubber({ store: () => store.get(), metrics, clock, logger }) : undefined;
  const http = await wireHttp({
    config,
    pod: ctx.pod,
    client,
    health: healthState,
    snapshots: () => active,
    store,
    initState,
    multiNode,
    scrubber,
    // Late-bound: the maintenance and the leader's work are built after the HTTP server.
    maintenance: () => {
      const signal = leaderWork?.termSignal;
      return signal && clusterMaintenance ? { control: clusterMaintenance.onDemand, signal } : undefined;
    },
    logger,
    metrics,
  });
  const { url } = await http.listen();
  opts.onListening?.(url);

  // Cluster maintenance: peer URL update at start; defragmentation and member cleanup on the leader.
  const maintenance = (clusterMaintenance = new ClusterMaintenance({
    config,
    pod: ctx.pod,
    clock,
    logger,
    metrics,
    ...(etcdMemberStatus ? { onMemberDefragmented: (r) => etcdMemberStatus.onMemberDefragmented(r) } : {}),
  }));
  const peerUrlsDone = maintenance.updatePeerUrls(ctx.signal);
  leaderWork = new LeaderWork({
    config,
    env: ctx.env,
    shutdown: ctx.signal,
    secondaryStore: ctx.stores.secondary,
    resolveSecondary: () => ctx.resolveStore('secondary'),
    tempOwner,
    client,
    singleMember: size === 1,
    store,
    scrubber,
    hashDrill: drillProblem.off === undefined,
    maintenance,
    leases: k8s.leases,
    renewer: k8s.renewer,
    etcdMemberStatus,
    health: healthState,
    onActiveSnapshotter: (s) => {
      active = s;
    },
    clock,
    logger,
    metrics,
  });

  const leadership = new LeadershipWatcher(
    client,
    { periodMs: config.leaderElectionConfig.reelectionPeriod, timeoutMs: config.leaderElectionConfig.etcdConnectionTimeout },
    {
      onStartedLeading: () => leaderWork.startLeading(),
      onStoppedLeading: (why) => leaderWork.stopLeading(why),
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
  k8s.memberLease?.start();
  try {
    await leadership.run(ctx.signal);
  } finally {
    leaderWork.stopLeading();
    await k8s.memberLease?.stop();
    await k8s.renewer?.stop();
    await leaderWork.settle();
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
