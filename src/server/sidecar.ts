import { readFile } from 'node:fs/promises';
import type { Etcd3 } from 'etcd3';
import type { CommandContext } from '../cli/context.js';
import { systemClock, type Clock } from '../clock.js';
import { LeadershipWatcher, memberStatus } from '../cluster/leadership.js';
import type { ServerConfig } from '../config/types.js';
import { STORE_ENV_PREFIX } from '../config/store.js';
import { createEtcdClient } from '../etcd/client.js';
import { Metrics } from '../metrics.js';
import { ExponentialBackoff } from '../snapshotter/backoff.js';
import { snapshotterFactory } from '../snapshotter/from-config.js';
import { RotatingStore } from '../snapshotter/store-provider.js';
import { superviseSnapshotter } from '../snapshotter/supervisor.js';
import { buildHttpServer } from './app.js';
import { HealthState } from './health.js';
import type { SnapshotterControl } from './types.js';

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
  const health = new HealthState();
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
  const client: Etcd3 = await createEtcdClient({
    endpoints: conn.endpoints,
    username: conn.username,
    password: conn.password,
    certFile: conn.certFile,
    keyFile: conn.keyFile,
    caFile: conn.caFile,
    insecureTransport: conn.insecureTransport,
    insecureSkipVerify: conn.insecureSkipVerify,
    connectionTimeoutMs: conn.connectionTimeout,
  });

  let active: SnapshotterControl | undefined;
  const serverTls = Boolean(config.serverConfig.serverCert && config.serverConfig.serverKey);
  const http = await buildHttpServer({
    config: config.serverConfig,
    logger,
    metrics,
    health,
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
  });
  const { url } = await http.listen();
  opts.onListening?.(url);

  const leaderWork = { abort: undefined as AbortController | undefined, done: Promise.resolve() };
  const startLeading = () => {
    if (leaderWork.abort) return;
    const abort = new AbortController();
    leaderWork.abort = abort;
    if (!store) {
      // Without a store the leader only reports healthy (upstream).
      health.setHealthy(true);
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
    });
    leaderWork.done = superviseSnapshotter(
      {
        ...factory,
        probeEtcd: async () => {
          await memberStatus(client, 5_000);
        },
        setHealthy: (h) => health.setHealthy(h),
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
    health.setHealthy(false);
    leaderWork.abort?.abort();
    leaderWork.abort = undefined;
  };

  const leadership = new LeadershipWatcher(
    client,
    { periodMs: config.leaderElectionConfig.reelectionPeriod, timeoutMs: config.leaderElectionConfig.etcdConnectionTimeout },
    { onStartedLeading: startLeading, onStoppedLeading: stopLeading },
    clock,
    logger,
  );
  try {
    await leadership.run(ctx.signal);
  } finally {
    stopLeading();
    await leaderWork.done;
    await http.close();
    await store?.close();
    client.close();
  }
  logger.info({}, 'server stopped');
  return 0;
}

