/**
 * Publishes this member's `EtcdMember.status` (etcd-druid proposal 04-etcd-member-custom-resource.md): folds events into the pure model
 * (member-status.ts) and decides when to write; src/k8s/etcd-member-status.ts does the requests.
 *
 * Updates are coalesced: at most one request is in flight, and whatever the model holds when it ends is
 * what goes next, so a burst of events costs one or two requests. Publishing is best effort (DEP-04 asks
 * druid to tolerate stale status): failures are warned and retried with backoff, never fatal. An EtcdMember
 * not created yet is reported once and looked for again later. A resource this sidecar cannot use at all
 * (etcd-druid v0.37's Role has no rule for it, or no CRD is installed) ends publishing for good: the access
 * check (src/k8s/etcd-member-access.ts) logs that once, and nothing is sent or retried after it.
 * Before the first write the existing `status.transitions` are read, so the history survives restarts.
 */
import type { Logger, Snapshot } from '@etcdbrctl/snapstore';
import type { Clock, TimerHandle } from '../clock.js';
import type { MemberDefragmentation } from './defrag.js';
import type { EtcdMemberStatus } from './leadership.js';
import { currentState, eventFromInitializationProgress, initialMemberStatus, reduceMemberStatus, snapshotFacts } from './member-status.js';
import type { EtcdMemberStatusBody, MemberEvent, MemberEventInput, MemberStatusModel } from './member-status-types.js';
import type { InitializationOutcome, InitializationProgress } from '../initializer/initializer.js';
import type { StoredSnapshotInfo } from '../snapshotter/snapshotter.js';
import type { EtcdMemberAccess } from '../k8s/etcd-member-access.js';
import { KubeError, toKubeError } from '../k8s/errors.js';
import { patchEtcdMemberStatus, readEtcdMemberStatus } from '../k8s/etcd-member-status.js';

export interface EtcdMemberStatusPublisherOptions {
  /** EtcdMember requests, shared with the create-as-learner annotation: one verdict on whether they work. */
  etcdMembers: EtcdMemberAccess;
  /** POD_NAMESPACE. */
  namespace: string;
  /** POD_NAME: etcd-druid names each EtcdMember after its pod. */
  name: string;
  /** From the etcd config: tells the reason of the initial `New` state. */
  clusterSize: number;
  peerTLSEnabled: boolean;
  clock: Clock;
  logger: Logger;
  /** Deadline of one request (default 10 s). */
  requestTimeoutMs?: number;
  /** Wait after the first failed request, doubled per further failure up to `retryMaxMs` (defaults 1 s, 60 s). */
  retryMinMs?: number;
  retryMaxMs?: number;
  /** Wait before looking again for a missing EtcdMember (default 30 s). */
  missingRetryMs?: number;
  /**
   * A change of dbSize/dbSizeInUse alone is written at most this often (the server passes the member lease
   * heartbeat period); anything else goes out at once. Default 30 s.
   */
  sizeRefreshMs?: number;
}

export class EtcdMemberStatusPublisher {
  private model: MemberStatusModel;
  /** The last status the API server accepted (and its JSON); undefined before the first write. */
  private sent: string | undefined;
  private sentBody: EtcdMemberStatusBody | undefined;
  private lastWriteAt = Number.NEGATIVE_INFINITY;
  /** Holds back a write that would only change the DB sizes; any other change cancels it. */
  private sizeTimer: TimerHandle | undefined;
  /** Whether the EtcdMember's existing history was read (redone after a 404). */
  private hydrated = false;
  private inFlight: Promise<void> | undefined;
  private timer: TimerHandle | undefined;
  private failures = 0;
  private missingReported = false;
  private stopped = false;
  /** The resource cannot be used (E_KUBE_UNAVAILABLE): the model still follows events, nothing is sent. */
  private unavailable = false;
  private readonly what: string;

  constructor(private readonly opts: EtcdMemberStatusPublisherOptions) {
    if (opts.namespace === '')
      throw new KubeError('E_KUBE_CONFIG', 'EtcdMember status publishing needs a namespace (POD_NAMESPACE is empty)');
    if (opts.name === '') throw new KubeError('E_KUBE_CONFIG', 'EtcdMember status publishing needs the member name (POD_NAME is empty)');
    this.what = `EtcdMember ${opts.namespace}/${opts.name}`;
    this.model = initialMemberStatus({ at: opts.clock.now(), clusterSize: opts.clusterSize, peerTLSEnabled: opts.peerTLSEnabled });
  }

  /** The status as this member sees it now (published or not yet). */
  get status(): EtcdMemberStatusBody {
    return this.model.status;
  }

  get state(): ReturnType<typeof currentState> {
    return currentState(this.model);
  }

  /** Whether a retry is waiting (tests). */
  get retryPending(): boolean {
    return this.timer !== undefined;
  }

  /** Publishes the initial `New` state (and everything recorded since). */
  start(): void {
    this.kick();
  }

  /** Folds an event into the status, stamped with the current time, and schedules a write. Never throws. */
  record(event: MemberEventInput): void {
    try {
      this.model = reduceMemberStatus(this.model, { ...event, at: this.opts.clock.now() } as MemberEvent);
    } catch (err) {
      this.opts.logger.warn({ err, event: event.type }, 'cannot record EtcdMember status event');
      return;
    }
    if (!this.stopped) this.kick();
  }

  /** The initializer's `onProgress`. */
  onInitializationProgress(p: InitializationProgress): void {
    this.record(eventFromInitializationProgress(p));
  }

  /** The LeadershipWatcher's status observations: ids, role and DB sizes. */
  onEtcdStatus(st: EtcdMemberStatus): void {
    this.record({
      type: 'EtcdStatusObserved',
      memberId: st.memberId,
      ...(st.clusterId !== undefined ? { clusterId: st.clusterId } : {}),
      leaderId: st.leaderId,
      isLearner: st.isLearner,
      dbSize: st.dbSize,
      dbSizeInUse: st.dbSizeInUse,
    });
  }

  /** The snapshotter's `onSnapshot`. */
  onSnapshot(snap: Snapshot, info: StoredSnapshotInfo): void {
    this.record({
      type: 'SnapshotStored',
      snapshot: snapshotFacts(snap, info.uncompressedBytes),
      ...(info.baseFull ? { baseFull: snapshotFacts(info.baseFull) } : {}),
    });
  }

  /** The defragmentation runner's per-member result (only this member's own is kept). */
  onMemberDefragmented(r: MemberDefragmentation): void {
    this.record({
      type: 'MemberDefragmented',
      memberId: r.memberId,
      startTime: r.startTime,
      endTime: r.endTime,
      succeeded: r.succeeded,
      message: r.message,
      ...(r.initialDBSize !== undefined ? { initialDBSize: r.initialDBSize } : {}),
      ...(r.finalDBSize !== undefined ? { finalDBSize: r.finalDBSize } : {}),
    });
  }

  /**
   * Stops retrying; a write still owed is tried once more (bounded by the request deadline), so the last
   * state (e.g. the final snapshot at shutdown) reaches the API server when it can.
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer !== undefined) this.opts.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.kick();
    await this.whenIdle();
  }

  /** Resolves when no request is running. */
  async whenIdle(): Promise<void> {
    while (this.inFlight !== undefined) await this.inFlight;
  }

  private kick(): void {
    if (this.unavailable || this.inFlight !== undefined || this.timer !== undefined) return;
    if (this.sizeTimer !== undefined) this.opts.clock.clearTimeout(this.sizeTimer);
    this.sizeTimer = undefined;
    this.inFlight = this.loop().finally(() => {
      this.inFlight = undefined;
    });
  }

  /** Writes until the server holds the latest status, or a failure arms a retry. */
  private async loop(): Promise<void> {
    for (;;) {
      try {
        if (!this.hydrated) await this.hydrate();
        const body = this.model.status;
        const json = JSON.stringify(body);
        if (json === this.sent) return;
        const wait = this.lastWriteAt + (this.opts.sizeRefreshMs ?? 30_000) - this.opts.clock.now().getTime();
        // At stop nothing is held back: it is the last chance to write.
        if (!this.stopped && wait > 0 && onlySizesDiffer(body, this.sentBody)) {
          this.sizeTimer = this.opts.clock.setTimeout(() => {
            this.sizeTimer = undefined;
            this.kick();
          }, wait);
          return;
        }
        await this.patchStatus(body);
        this.sent = json;
        this.sentBody = body;
        this.lastWriteAt = this.opts.clock.now().getTime();
        if (this.failures > 0)
          this.opts.logger.info({ etcdMember: this.what, failures: this.failures }, 'EtcdMember status update succeeded again');
        this.failures = 0;
        this.opts.logger.debug({ etcdMember: this.what, ...this.state }, 'EtcdMember status updated');
      } catch (err) {
        this.onFailure(toKubeError(err, `update of ${this.what} status`));
        return;
      }
    }
  }

  private async hydrate(): Promise<void> {
    const { etcdMembers, namespace, name, clock } = this.opts;
    const status = await readEtcdMemberStatus(etcdMembers, { namespace, name }, clock, this.requestTimeoutMs);
    this.model = reduceMemberStatus(this.model, {
      type: 'HistoryLoaded',
      at: clock.now(),
      transitions: status?.transitions,
      snapshots: status?.snapshots,
    });
    this.hydrated = true;
    if (this.missingReported) {
      this.missingReported = false;
      this.opts.logger.info({ etcdMember: this.what }, 'EtcdMember found: publishing its status');
    }
  }

  private async patchStatus(body: EtcdMemberStatusBody): Promise<void> {
    const { etcdMembers, namespace, name, clock } = this.opts;
    await patchEtcdMemberStatus(etcdMembers, { namespace, name }, body, clock, this.requestTimeoutMs);
  }

  private get requestTimeoutMs(): number {
    return this.opts.requestTimeoutMs ?? 10_000;
  }

  private onFailure(err: KubeError): void {
    const { logger } = this.opts;
    if (err.code === 'E_KUBE_UNAVAILABLE') {
      // Reported once by the access check, with the rule to grant; asking again would get the same answer.
      this.unavailable = true;
      return;
    }
    if (err.code === 'E_KUBE_NOT_FOUND') {
      // Deleted or not created yet: when it comes back it has a fresh history to read, and nothing we sent.
      this.hydrated = false;
      this.sent = undefined;
      this.sentBody = undefined;
      const wait = this.opts.missingRetryMs ?? 30_000;
      if (!this.missingReported) {
        this.missingReported = true;
        logger.warn(
          { etcdMember: this.what, retryInMs: wait, err },
          `${this.what} does not exist yet (etcd-druid creates it): its status is published once it exists; ` +
            `looking again every ${wait / 1000} s`,
        );
      }
      this.arm(wait);
      return;
    }
    this.failures++;
    const min = this.opts.retryMinMs ?? 1_000;
    const wait = Math.min(this.opts.retryMaxMs ?? 60_000, min * 2 ** Math.min(this.failures - 1, 30));
    logger.warn({ etcdMember: this.what, err, failures: this.failures, retryInMs: wait }, 'EtcdMember status update failed; retrying');
    this.arm(wait);
  }

  private arm(ms: number): void {
    if (this.stopped) return;
    this.timer = this.opts.clock.setTimeout(() => {
      this.timer = undefined;
      this.kick();
    }, ms);
  }
}

function onlySizesDiffer(a: EtcdMemberStatusBody, b: EtcdMemberStatusBody | undefined): boolean {
  if (b === undefined) return false;
  const strip = ({ dbSize: _s, dbSizeInUse: _u, ...rest }: EtcdMemberStatusBody): string => JSON.stringify(rest);
  return strip(a) === strip(b);
}

/**
 * Wraps the server's initialization run (InitializationState's callback) so its start, outcome and failure
 * reach the status; without a publisher it only drops the outcome.
 */
export function recordInitialization(
  publisher: EtcdMemberStatusPublisher | undefined,
  run: (mode: 'full' | 'sanity') => Promise<InitializationOutcome>,
): (mode: 'full' | 'sanity') => Promise<void> {
  return async (mode) => {
    publisher?.record({ type: 'InitializationStarted', mode });
    try {
      const outcome = await run(mode);
      publisher?.record({ type: 'InitializationSucceeded', outcome });
    } catch (err) {
      publisher?.record({ type: 'InitializationFailed', message: err instanceof Error ? err.message : String(err) });
      throw err;
    }
  };
}
