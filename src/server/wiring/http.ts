/**
 * The sidecar's HTTP server with what only the sidecar knows: where the leading sidecar listens (from
 * etcd's leader and member list) and the etcd-wrapper's initialization routes. Built, not listening yet.
 */
import { readFile } from 'node:fs/promises';
import type { EtcdClient } from '../../etcd/index.js';
import type { PodEnvironment } from '../../config/pod-environment.js';
import { memberStatus } from '../../cluster/leadership.js';
import type { MultiNode } from '../../cluster/multinode.js';
import type { ServerConfig } from '../../config/types.js';
import type { Logger } from '../../log.js';
import type { Metrics } from '../../metrics.js';
import type { RotatingStore } from '../../config/store-provider.js';
import type { BackupScrubber } from '../../verifier/scrubber.js';
import type { OnDemandMaintenance } from '../../cluster/on-demand.js';
import { buildHttpServer, type HttpServer } from '../app.js';
import type { HealthState } from '../health.js';
import { registerInitRoutes } from '../init-routes.js';
import type { InitializationState } from '../initialization.js';
import type { SnapshotterControl } from '../types.js';

export async function wireHttp(input: {
  config: ServerConfig;
  pod: PodEnvironment;
  client: EtcdClient;
  health: HealthState;
  snapshots: () => SnapshotterControl | undefined;
  store: RotatingStore | undefined;
  initState: InitializationState;
  multiNode: MultiNode;
  scrubber: BackupScrubber | undefined;
  maintenance: () => { control: OnDemandMaintenance; signal: AbortSignal } | undefined;
  logger: Logger;
  metrics: Metrics;
}): Promise<HttpServer> {
  const { config, client, store, multiNode } = input;
  const conn = config.etcdConnectionConfig;
  const serverTls = Boolean(config.serverConfig.serverCert && config.serverConfig.serverKey);
  return buildHttpServer({
    config: config.serverConfig,
    logger: input.logger,
    metrics: input.metrics,
    health: input.health,
    snapshots: input.snapshots,
    store: () => store?.peek(),
    ...(input.scrubber ? { scrubber: input.scrubber } : {}),
    ...(config.serverConfig.address !== '' ? { host: config.serverConfig.address } : {}),
    maintenance: input.maintenance,
    auth: {
      ...(config.apiClientCaFile !== '' ? { clientCa: await readFile(config.apiClientCaFile) } : {}),
      ...(config.apiTokenFile !== '' ? { tokenFile: config.apiTokenFile } : {}),
      openProbes: config.apiOpenProbes,
    },
    leaderProxy: {
      findLeaderUrl: async () => {
        const status = await memberStatus(client, conn.connectionTimeout);
        const members = await client.memberList();
        const leader = members.members.find((m) => m.id === status.leaderId);
        const clientUrl = leader?.clientUrls[0];
        if (!clientUrl) return undefined;
        const host = new URL(clientUrl).hostname;
        return `${serverTls ? 'https' : 'http'}://${host}:${config.serverConfig.port}`;
      },
    },
    ...(serverTls && conn.caFile ? { proxyCa: await readFile(conn.caFile) } : {}),
    extraRoutes: (app) =>
      registerInitRoutes(app, {
        state: input.initState,
        pod: input.pod,
        // Through the service endpoints: before /config the local etcd is not running yet.
        clusterView: () => multiNode.clusterView(),
      }),
  });
}
