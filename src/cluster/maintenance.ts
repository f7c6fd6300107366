/**
 * The server's cluster maintenance, wired from its configuration: rolling defragmentation and superfluous
 * member cleanup while this sidecar leads, and the peer URL update once at start. Kept out of sidecar.ts so
 * the server only starts and stops it.
 */
import { readFile } from 'node:fs/promises';
import type { Logger } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { ServerConfig } from '../config/types.js';
import { parseGoDuration } from '../config/values.js';
import { DEFRAG_RETRY_PERIOD_ENV, type PodEnvironment } from '../config/pod-environment.js';
import { clusterSize, memberName, memberUrls, readEtcdConfigTemplate } from '../config/etcd-config.js';
import type { Metrics } from '../metrics.js';
import { MemberCleanup, type CleanupPolicy } from './cleanup.js';
import {
  DEFRAG_RETRY_PERIOD_MS,
  DefragRunner,
  endpointClientFactory,
  endpointsClientFactory,
  type MemberDefragmentation,
} from './defrag.js';
import { OnDemandMaintenance } from './on-demand.js';
import { ETCD_WRAPPER_PORT, updatePeerUrlsWhenReachable, wrapperStopUrl } from './peer-url.js';

/**
 * Ours, for tests and impatient operators: `ETCDBRCTL_DEFRAG_RETRY_PERIOD`, the wait before and between
 * defragmentation attempts (Go duration; default 1m as upstream's constant).
 */
export { DEFRAG_RETRY_PERIOD_ENV };

export interface ClusterMaintenanceOptions {
  config: ServerConfig;
  pod: PodEnvironment;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  /** Tests: etcd-wrapper's port (default 9095). */
  wrapperPort?: number;
  /** Tests: member cleanup period and grace (defaults 1 min and 5 min). */
  cleanupPeriodMs?: number;
  cleanupGraceMs?: number;
  /** Told each member's defragmentation result (EtcdMember status). */
  onMemberDefragmented?: (result: MemberDefragmentation) => void;
}

export class ClusterMaintenance {
  private readonly defrag: DefragRunner;
  /** `POST /maintenance/defrag|compact` while this sidecar leads. */
  readonly onDemand: OnDemandMaintenance;
  private readonly cleanup: MemberCleanup;
  private warnedNoPod = false;

  constructor(private readonly opts: ClusterMaintenanceOptions) {
    const { config, clock, logger, metrics } = opts;
    const conn = config.etcdConnectionConfig;
    this.defrag = new DefragRunner({
      clusterClient: endpointsClientFactory(conn),
      endpointClient: endpointClientFactory(conn),
      schedule: config.defragmentationSchedule,
      defragTimeoutMs: conn.defragTimeout,
      statusTimeoutMs: conn.connectionTimeout,
      retryPeriodMs: defragRetryPeriodMs(opts.pod.defragRetryPeriod, logger),
      clock,
      logger,
      metrics,
      ...(opts.onMemberDefragmented ? { onMemberDefragmented: opts.onMemberDefragmented } : {}),
    });
    this.onDemand = new OnDemandMaintenance({
      defragNow: (signal) => this.defrag.defragNow(signal),
      clusterClient: endpointsClientFactory(conn),
      statusTimeoutMs: conn.connectionTimeout,
      clock,
      logger,
      metrics,
    });
    this.cleanup = new MemberCleanup({
      clusterClient: endpointsClientFactory(conn),
      endpointClient: endpointClientFactory(conn),
      policy: () => this.cleanupPolicy(),
      statusTimeoutMs: conn.connectionTimeout,
      ...(opts.cleanupPeriodMs !== undefined ? { periodMs: opts.cleanupPeriodMs } : {}),
      ...(opts.cleanupGraceMs !== undefined ? { graceMs: opts.cleanupGraceMs } : {}),
      clock,
      logger,
      metrics,
    });
  }

  /** Leader-only work until `signal` aborts (leadership lost or shutdown). Never rejects. */
  async lead(signal: AbortSignal): Promise<void> {
    const cleanupEnabled = this.opts.config.enableMemberCleanup;
    if (!cleanupEnabled) this.opts.logger.info({}, 'superfluous member cleanup is off (--enable-member-cleanup=false)');
    await Promise.all([
      this.defrag.run(signal).catch((err: unknown) => this.opts.logger.error({ err }, 'defragmentation schedule stopped')),
      cleanupEnabled
        ? this.cleanup.run(signal).catch((err: unknown) => this.opts.logger.error({ err }, 'member cleanup stopped'))
        : undefined,
    ]);
  }

  /**
   * Once etcd answers: make the cluster's record of this member's peer URLs match the etcd config. Skipped
   * without POD_NAME or an etcd config file (a plain local run). Never rejects.
   */
  async updatePeerUrls(signal: AbortSignal): Promise<void> {
    const { config, clock, logger } = this.opts;
    const pod = this.opts.pod.podName;
    if (!pod) return;
    const conn = config.etcdConnectionConfig;
    const first = conn.endpoints[0];
    if (first === undefined) return;
    let client;
    try {
      const template = await readEtcdConfigTemplate(this.opts.pod.etcdConfigPath);
      const name = memberName(template, pod);
      const tls = Boolean(config.serverConfig.serverCert && config.serverConfig.serverKey);
      const ca = tls && conn.caFile ? await readFile(conn.caFile) : undefined;
      client = await endpointClientFactory(conn)(first);
      await updatePeerUrlsWhenReachable({
        client,
        memberName: name,
        configPeerUrls: memberUrls(template, 'initial-advertise-peer-urls', name, pod),
        useEtcdWrapper: config.useEtcdWrapper,
        wrapperStopUrl: wrapperStopUrl(first, tls, this.opts.wrapperPort ?? ETCD_WRAPPER_PORT),
        ...(ca ? { wrapperCa: ca } : {}),
        timeoutMs: conn.connectionTimeout,
        clock,
        logger,
        signal,
      });
    } catch (err) {
      logger.error({ err }, 'checking this member’s peer URLs failed');
    } finally {
      client?.close();
    }
  }

  /** Read on every round: druid changes the cluster size in the mounted ConfigMap. */
  private async cleanupPolicy(): Promise<CleanupPolicy | undefined> {
    const { logger } = this.opts;
    const pod = this.opts.pod.podName ?? '';
    const sts = /^(.+)-(?:0|[1-9][0-9]*)$/.exec(pod)?.[1];
    if (sts === undefined) {
      if (!this.warnedNoPod) logger.info({ pod }, 'POD_NAME is not a StatefulSet pod name: superfluous member cleanup is off');
      this.warnedNoPod = true;
      return undefined;
    }
    const path = this.opts.pod.etcdConfigPath;
    let template;
    try {
      template = await readEtcdConfigTemplate(path);
    } catch (err) {
      logger.warn({ err, path }, 'cannot read the etcd config file: skipping superfluous member cleanup');
      return undefined;
    }
    const size = clusterSize(template);
    if (size < 1) return undefined;
    const prefix = template['member-name-prefix'];
    return {
      clusterSize: size,
      statefulSetName: sts,
      ...(typeof prefix === 'string' && prefix !== '' ? { memberNamePrefix: prefix } : {}),
    };
  }
}

export function defragRetryPeriodMs(raw: string | undefined, logger: Logger): number {
  if (raw === undefined || raw === '') return DEFRAG_RETRY_PERIOD_MS;
  try {
    const ms = parseGoDuration(raw);
    if (ms > 0) return ms;
  } catch {
    // fall through
  }
  logger.warn({ value: raw }, `invalid ${DEFRAG_RETRY_PERIOD_ENV}: using the default of 1m`);
  return DEFRAG_RETRY_PERIOD_MS;
}
