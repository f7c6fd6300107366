/**
 * What runs only while the local etcd member is the raft leader: cluster maintenance, the secondary backup
 * sync and the supervised snapshotter. Owns the ordering between leadership terms and what shutdown awaits.
 */
import type { Etcd3 } from 'etcd3';
import { latestSet, type StoreConfig } from '@etcdbrctl/snapstore';
import type { Env } from '../../cli/context.js';
import type { Clock } from '../../clock.js';
import { memberStatus } from '../../cluster/leadership.js';
import type { ClusterMaintenance } from '../../cluster/maintenance.js';
import type { ServerConfig } from '../../config/types.js';
import { secondarySyncFromConfig, type SecondarySyncHandle } from '../../copier/secondary-sync.js';
import type { EtcdMemberStatusPublisher } from '../../k8s/etcd-member-status.js';
import { snapshotLeaseHook, type FullSnapshotLeaseRenewer, type SnapshotLeases } from '../../k8s/snapshot-leases.js';
import type { Logger } from '../../log.js';
import type { Metrics } from '../../metrics.js';
import { ExponentialBackoff } from '../../snapshotter/backoff.js';
import { snapshotterFactory } from '../../snapshotter/from-config.js';
import { LeadershipLost, type Snapshotter } from '../../snapshotter/snapshotter.js';
import type { RotatingStore } from '../../snapshotter/store-provider.js';
import { superviseSnapshotter } from '../../snapshotter/supervisor.js';
import type { HealthState } from '../health.js';

export interface LeaderWorkOptions {
  config: ServerConfig;
  env: Env;
  /** The process shutdown signal: losing leadership while it is not aborted is a leadership change. */
  shutdown: AbortSignal;
  /** The resolved secondary store, and how to resolve it again (credential rotation). */
  secondaryStore: StoreConfig | undefined;
  resolveSecondary: () => Promise<StoreConfig | undefined>;
  client: Etcd3;
  store: RotatingStore | undefined;
  maintenance: ClusterMaintenance;
  leases: SnapshotLeases | undefined;
  renewer: FullSnapshotLeaseRenewer | undefined;
  etcdMemberStatus: EtcdMemberStatusPublisher | undefined;
  health: HealthState;
  onActiveSnapshotter: (s: Snapshotter | undefined) => void;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
}

export class LeaderWork {
  private readonly secondarySync: SecondarySyncHandle | undefined;
  /** Aborts the current term's work; undefined while not leading. */
  private abort: AbortController | undefined;
  private snapshotterDone = Promise.resolve();
  private maintenanceDone = Promise.resolve();
  private secondarySyncDone = Promise.resolve();

  constructor(private readonly opts: LeaderWorkOptions) {
    const { config, store, clock, logger, metrics } = opts;
    // On the leader: copy the backups to the secondary store and garbage-collect them there.
    this.secondarySync = secondarySyncFromConfig({
      config,
      secondary: opts.secondaryStore,
      resolveSecondary: opts.resolveSecondary,
      env: opts.env,
      primary: store ? () => store.get() : undefined,
      clock,
      logger,
      metrics,
    });
  }

  startLeading(): void {
    if (this.abort) return;
    const { config, client, store, leases, renewer, etcdMemberStatus, health, clock, logger, metrics } = this.opts;
    const abort = new AbortController();
    this.abort = abort;
    // Cluster maintenance runs on the leader with or without a store (upstream starts defragmentation there too).
    this.maintenanceDone = Promise.all([this.maintenanceDone, this.opts.maintenance.lead(abort.signal)]).then(() => undefined);
    if (this.secondarySync) {
      this.secondarySyncDone = Promise.all([this.secondarySyncDone, this.secondarySync.run(abort.signal)]).then(() => undefined);
    }
    if (!store) {
      // Without a store the leader only reports healthy (upstream).
      health.setHealthy(true);
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
      connection: config.etcdConnectionConfig,
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
    const previousTerm = this.snapshotterDone;
    this.snapshotterDone = previousTerm
      .then(() =>
        superviseSnapshotter(
          {
            ...factory,
            probeEtcd: async () => {
              await memberStatus(client, 5_000);
            },
            setHealthy: (h) => health.setHealthy(h),
            onActiveSnapshotter: this.opts.onActiveSnapshotter,
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
  }

  stopLeading(): void {
    this.opts.health.setHealthy(false);
    // Only a shutdown writes the buffered events; after a leadership change the next leader catches up.
    this.abort?.abort(this.opts.shutdown.aborted ? undefined : new LeadershipLost('this member is no longer the etcd leader'));
    this.abort = undefined;
    void this.opts.renewer?.stop();
  }

  /** Resolves once every term's work has finished and the secondary sync is closed; call after `stopLeading`. */
  async settle(): Promise<void> {
    await this.snapshotterDone;
    await this.secondarySyncDone;
    await this.secondarySync?.close();
    await this.maintenanceDone;
  }
}
