/**
 * What runs only while the local etcd member is the raft leader: cluster maintenance, the secondary backup
 * sync and the supervised snapshotter. Owns the ordering between leadership terms and what shutdown awaits.
 */
import type { EtcdClient } from '../../etcd/index.js';
import { latestSet, type StoreConfig } from '@etcdbrctl/snapstore';
import type { Env } from '../../config/context.js';
import type { Clock } from '../../clock.js';
import { memberStatus, type LeadershipLossReason } from '../../cluster/leadership.js';
import type { ClusterMaintenance } from '../../cluster/maintenance.js';
import type { ServerConfig } from '../../config/types.js';
import { secondarySyncFromConfig, type SecondarySyncHandle } from '../../copier/secondary-sync.js';
import type { EtcdMemberStatusPublisher } from '../../cluster/member-status-publisher.js';
import { snapshotLeaseHooks, type FullSnapshotLeaseRenewer, type SnapshotLeases } from '../../k8s/snapshot-leases.js';
import type { Logger } from '../../log.js';
import type { Metrics } from '../../metrics.js';
import { ExponentialBackoff } from '../../snapshotter/backoff.js';
import { snapshotterFactory } from '../../snapshotter/from-config.js';
import { LeadershipLost, type Snapshotter } from '../../snapshotter/snapshotter.js';
import type { RotatingStore } from '../../config/store-provider.js';
import { CronSchedule } from '../../config/schedule.js';
import { superviseSnapshotter } from '../../snapshotter/supervisor.js';
import type { BackupScrubber } from '../../verifier/scrubber.js';
import { drillScheduleOf, type DrillSchedule } from '../../config/drill-schedule.js';
import { HashDrillRunner } from '../../verifier/drill-runner.js';
import { memberHashSource } from '../../verifier/member-source.js';
import type { HealthState } from '../health.js';

export interface LeaderWorkOptions {
  config: ServerConfig;
  env: Env;
  /** The process shutdown signal: losing leadership while it is not aborted is a leadership change. */
  shutdown: AbortSignal;
  /** The resolved secondary store, and how to resolve it again (credential rotation). */
  secondaryStore: StoreConfig | undefined;
  resolveSecondary: () => Promise<StoreConfig | undefined>;
  /** Names this sidecar's temp files in a Local store (OpenOptions.tempOwner). */
  tempOwner: string;
  client: EtcdClient;
  /** The cluster has one member (its etcd config's initial-cluster): no other sidecar can take over. */
  singleMember: boolean;
  store: RotatingStore | undefined;
  /** Backup verification; runs on `--verify-schedule` while this member leads. */
  scrubber: BackupScrubber | undefined;
  /** The hash drill may run (on `--hash-drill-schedule`): false when it cannot read the store (drillScheduleProblem). */
  hashDrill?: boolean;
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
  /** What the leadership watcher last said: this member leads. */
  private leading = false;
  /** Initializations under way: no term runs while the data dir may be validated or restored. */
  private pauses = 0;
  private maintenanceDone = Promise.resolve();
  private secondarySyncDone = Promise.resolve();
  private scrubDone = Promise.resolve();
  private readonly verifySchedule: CronSchedule | undefined;
  /** The hash drill and its schedule; undefined without a store or with `--hash-drill-schedule=''`. */
  private readonly drill: { runner: HashDrillRunner; schedule: DrillSchedule } | undefined;
  private drillDone = Promise.resolve();

  constructor(private readonly opts: LeaderWorkOptions) {
    const { config, store, clock, logger, metrics } = opts;
    this.verifySchedule = config.verifySchedule !== '' && opts.scrubber ? new CronSchedule(config.verifySchedule) : undefined;
    const drillSchedule = drillScheduleOf(config.hashDrillSchedule);
    if (store && drillSchedule.kind !== 'off' && opts.hashDrill !== false) {
      const endpoint = config.etcdConnectionConfig.endpoints[0] ?? '';
      const runner = new HashDrillRunner({
        store: () => store.get(),
        // The leader's own member: HashKV is answered by the member asked, and this client reaches the local one.
        members: () => [memberHashSource(endpoint, opts.client, config.etcdConnectionConfig.connectionTimeout)],
        tempDir: config.snapstoreConfig.tempDir,
        clock,
        logger,
        metrics,
      });
      this.drill = { runner, schedule: drillSchedule };
    }
    // On the leader: copy the backups to the secondary store and garbage-collect them there.
    this.secondarySync = secondarySyncFromConfig({
      config,
      secondary: opts.secondaryStore,
      resolveSecondary: opts.resolveSecondary,
      tempOwner: opts.tempOwner,
      env: opts.env,
      primary: store ? () => store.get() : undefined,
      clock,
      logger,
      metrics,
    });
  }

  /** While this sidecar leads (a term runs): the signal that ends the term; otherwise undefined. */
  get termSignal(): AbortSignal | undefined {
    return this.abort?.signal;
  }

  startLeading(): void {
    this.leading = true;
    if (this.pauses > 0) return;
    this.beginTerm();
  }

  /**
   * The term ends. Buffered events are written as a last delta on shutdown, and when the local etcd of a
   * single-member cluster became unreachable: no other member can catch up from the store then, and if
   * etcd's data turns out lost, a restore must include them. When another member may lead, they are left
   * to it (it catches up from the store; writing them now could overlap its first delta).
   */
  stopLeading(why: LeadershipLossReason = 'follower'): void {
    this.leading = false;
    this.endTerm(this.opts.shutdown.aborted || (why === 'unreachable' && this.opts.singleMember));
  }

  /**
   * `/initialization/start`: the leader term ends before anything touches the data dir. Its buffered events
   * are written as a last delta first (bounded, as on shutdown), so a restore includes them and nothing
   * captured is lost; then the snapshotter, its watch and its buffer stop. Resolves once they have; no
   * term starts again until `resumeAfterInitialization`.
   */
  async pauseForInitialization(): Promise<void> {
    this.pauses++;
    if (this.abort) this.opts.logger.info({}, 'initialization requested: ending the leader term (buffered events are written first)');
    this.endTerm(true);
    await this.snapshotterDone;
  }

  /**
   * After initialization: a term starts again if this member still leads. Its snapshotter reads the chain
   * from the store and compares it with the restored etcd (a full snapshot when etcd is below the store).
   */
  resumeAfterInitialization(): void {
    this.pauses = Math.max(0, this.pauses - 1);
    if (this.pauses === 0 && this.leading && !this.opts.shutdown.aborted) this.beginTerm();
  }

  private beginTerm(): void {
    if (this.abort) return;
    const { config, client, store, leases, renewer, etcdMemberStatus, health, clock, logger, metrics } = this.opts;
    const abort = new AbortController();
    this.abort = abort;
    // Cluster maintenance runs on the leader with or without a store (upstream starts defragmentation there too).
    this.maintenanceDone = Promise.all([this.maintenanceDone, this.opts.maintenance.lead(abort.signal)]).then(() => undefined);
    if (this.secondarySync) {
      this.secondarySyncDone = Promise.all([this.secondarySyncDone, this.secondarySync.run(abort.signal)]).then(() => undefined);
    }
    if (this.verifySchedule && this.opts.scrubber) {
      this.scrubDone = Promise.all([this.scrubDone, this.opts.scrubber.runOnSchedule(this.verifySchedule, abort.signal)]).then(
        () => undefined,
      );
    }
    if (this.drill) {
      const { runner, schedule } = this.drill;
      this.drillDone = Promise.all([this.drillDone, runner.runOnSchedule(schedule, abort.signal)]).then(() => undefined);
    }
    if (!store) {
      // Without a store the leader only reports healthy (upstream).
      health.setHealthy(true);
      return;
    }
    const leaseHooks =
      leases && renewer
        ? snapshotLeaseHooks({
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
        if (snap.kind === 'Full') this.drill?.runner.fullSnapshotStored();
        await leaseHooks?.onSnapshot(snap);
      },
      // With other members, leadership may have moved since the watcher's last check: ask etcd before each
      // delta write, so a former leader does not write after the new one read the store (docs/design-decisions.md).
      ...(this.opts.singleMember ? {} : { stillLeads: () => stillLeadsNow(client, config.etcdConnectionConfig.connectionTimeout) }),
      ...(leaseHooks ? { onIdleDeltaPeriod: leaseHooks.onIdleDeltaPeriod } : {}),
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

  /**
   * Ends the current term. The buffered events are written as a last delta on shutdown and before an
   * initialization (`writeBuffered`); after a leadership change the next leader catches up from the store.
   */
  private endTerm(writeBuffered = this.opts.shutdown.aborted): void {
    this.opts.health.setHealthy(false);
    this.abort?.abort(writeBuffered ? undefined : new LeadershipLost('this member is no longer the etcd leader'));
    this.abort = undefined;
    void this.opts.renewer?.stop();
  }

  /** Resolves once every term's work has finished and the secondary sync is closed; call after `stopLeading`. */
  async settle(): Promise<void> {
    await this.snapshotterDone;
    await this.secondarySyncDone;
    await this.secondarySync?.close();
    await this.scrubDone;
    await this.drillDone;
    await this.maintenanceDone;
  }
}

/** Whether the local etcd member leads; undefined when it cannot be asked (the write goes ahead then). */
async function stillLeadsNow(client: EtcdClient, timeoutMs: number): Promise<boolean | undefined> {
  try {
    const status = await memberStatus(client, Math.min(timeoutMs, 5_000));
    return status.leaderId === '0' ? undefined : status.memberId === status.leaderId;
  } catch {
    return undefined;
  }
}
