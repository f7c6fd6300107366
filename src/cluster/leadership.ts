import { EtcdbrError } from '../errors.js';
import type { Logger } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { EtcdClient } from '../etcd/index.js';

export type LeadershipState = 'Follower' | 'Leader' | 'Unknown';

export interface EtcdMemberStatus {
  /** Hex member ID of the member that answered. */
  memberId: string;
  /** Hex cluster ID from the answer's header (absent in hand-made statuses of tests). */
  clusterId?: string;
  /** Hex member ID of the raft leader; '0' when there is none. */
  leaderId: string;
  isLearner: boolean;
  dbSize: number;
  dbSizeInUse: number;
}

/** Status of the member behind the client's first endpoint (upstream: Status(endpoints[0])). */
export async function memberStatus(client: EtcdClient, timeoutMs: number): Promise<EtcdMemberStatus> {
  const st = await client.status({ timeoutMs });
  return {
    memberId: st.memberId,
    clusterId: st.clusterId,
    leaderId: st.leaderId,
    isLearner: st.isLearner,
    dbSize: st.dbSize,
    dbSizeInUse: st.dbSizeInUse,
  };
}

export type LeadershipLossReason = 'follower' | 'unreachable' | 'stopping';

export interface LeadershipCallbacks {
  /** This member became the raft leader: start the leader-only work. */
  onStartedLeading(): void;
  /**
   * Leadership was lost or can no longer be determined: stop the leader-only work. `why`: another member
   * leads now (`follower`), the local etcd cannot be asked (`unreachable`), or the watcher stops (`stopping`).
   */
  onStoppedLeading(why: LeadershipLossReason): void;
  /** A follower that is a learner (multi-node): try to promote it. */
  onLearner?(status: EtcdMemberStatus): void;
  /** Every observation, for status reporting. */
  onStatus?(state: LeadershipState, status?: EtcdMemberStatus): void;
}

/**
 * Mirrors etcd's raft leadership: every `periodMs`, ask the local member who leads. The sidecar of the
 * leader runs snapshots, GC and defragmentation; no Kubernetes lock is involved (upstream `pkg/leaderelection/leaderelection.go`).
 */
export class LeadershipWatcher {
  private state: LeadershipState = 'Follower';
  private stopped = false;

  constructor(
    private readonly client: EtcdClient,
    private readonly opts: { periodMs: number; timeoutMs: number },
    private readonly callbacks: LeadershipCallbacks,
    private readonly clock: Clock,
    private readonly logger: Logger,
  ) {}

  get current(): LeadershipState {
    return this.state;
  }

  /** Runs until the signal aborts; the first check happens at once. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted && !this.stopped) {
      await this.check();
      await this.clock.sleep(this.opts.periodMs, signal).catch(() => undefined);
    }
    if (this.state === 'Leader') this.callbacks.onStoppedLeading('stopping');
    this.state = 'Follower';
  }

  stop(): void {
    this.stopped = true;
  }

  /** One observation; public for tests. */
  async check(): Promise<LeadershipState> {
    let status: EtcdMemberStatus;
    try {
      status = await memberStatus(this.client, this.opts.timeoutMs);
      if (status.leaderId === '0') throw new EtcdbrError('E_UNAVAILABLE', 'no etcd leader');
    } catch (err) {
      if (this.state !== 'Unknown') this.logger.warn({ err }, 'cannot determine the etcd leader');
      if (this.state === 'Leader') this.callbacks.onStoppedLeading('unreachable');
      this.state = 'Unknown';
      this.callbacks.onStatus?.(this.state);
      return this.state;
    }
    const next: LeadershipState = status.memberId === status.leaderId ? 'Leader' : 'Follower';
    if (next !== this.state) {
      this.logger.info({ from: this.state, to: next, member: status.memberId, leader: status.leaderId }, 'leadership changed');
      if (next === 'Leader') this.callbacks.onStartedLeading();
      else if (this.state === 'Leader') this.callbacks.onStoppedLeading('follower');
    }
    this.state = next;
    if (next === 'Follower' && status.isLearner) this.callbacks.onLearner?.(status);
    this.callbacks.onStatus?.(this.state, status);
    return this.state;
  }
}
