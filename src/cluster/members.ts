/**
 * Membership operations of a multi-node cluster (upstream `pkg/member/member_control.go`): observe
 * the cluster through the service endpoints, add this member as a learner, remove a member, promote a
 * learner. Every operation builds a fresh client for one endpoint at a time: the etcd client's per-host circuit breaker
 * would otherwise keep refusing calls for seconds after the "unhealthy cluster" answers a fresh cluster
 * gives, and a learner endpoint must be skipped (learners serve no member RPCs).
 */
import { EtcdbrError } from '../errors.js';
import { systemClock, type Clock } from '../clock.js';
import { type EtcdClientOptions, createEtcdClient, type EtcdClient, type EtcdMember } from '../etcd/index.js';
import { legacyUrlTemplate, type EtcdConfigTemplate } from '../config/etcd-config.js';
import type { ClusterObservation, ObservedMember } from '../initializer/bootstrap.js';
import type { Logger } from '@etcdbrctl/snapstore';
import type { Metrics } from '../metrics.js';

/** Builds a client for the given endpoints; the caller closes it. */
export type ClusterClientFactory = (endpoints: string[]) => Promise<EtcdClient>;

export interface RetryPolicy {
  attempts: number;
  initialMs: number;
  factor: number;
  capMs: number;
}

/** Upstream AddLearnerWithRetry: 6 attempts, waits 2 s, 4 s, 8 s, … capped at 120 s. */
export const ADD_LEARNER_RETRY: RetryPolicy = { attempts: 6, initialMs: 2_000, factor: 2, capMs: 120_000 };
/** Upstream IsMemberInCluster's probe: RetryPeriod 2 s, RetrySteps 4. */
export const OBSERVE_RETRY: RetryPolicy = { attempts: 4, initialMs: 2_000, factor: 2, capMs: 120_000 };
/** client-go retry.DefaultBackoff (10 ms × 5, 4 steps), which upstream's RemoveMember runs under. */
export const REMOVE_RETRY: RetryPolicy = { attempts: 4, initialMs: 10, factor: 5, capMs: 120_000 };
/** Upstream sleeps EtcdTimeout after "too many learners" before the next attempt. */
export const TOO_MANY_LEARNERS_WAIT_MS = 5_000;
/** Upstream EtcdTimeout. */
export const MEMBER_OP_TIMEOUT_MS = 5_000;

export function retryDelay(policy: RetryPolicy, attempt: number): number {
  return Math.min(policy.capMs, policy.initialMs * policy.factor ** (attempt - 1));
}

export type MemberErrorKind =
  | 'member-exists'
  | 'peer-url-exists'
  | 'too-many-learners'
  | 'learner-not-in-sync'
  | 'not-learner'
  | 'member-not-found'
  | 'unhealthy-cluster'
  | 'learner-endpoint'
  | 'other';

/** etcd's member errors arrive as gRPC errors whose text is the etcdserver error (rpctypes). */
export function memberErrorKind(err: unknown): MemberErrorKind {
  const msg = err instanceof Error ? err.message : String(err);
  if (/member ID already exist/i.test(msg)) return 'member-exists';
  if (/Peer URLs already exists/i.test(msg)) return 'peer-url-exists';
  if (/too many learner members/i.test(msg)) return 'too-many-learners';
  if (/can only promote a learner member which is in sync/i.test(msg)) return 'learner-not-in-sync';
  if (/can only promote a learner member/i.test(msg)) return 'not-learner';
  if (/member not found/i.test(msg)) return 'member-not-found';
  if (/unhealthy cluster/i.test(msg)) return 'unhealthy-cluster';
  if (/not supported for learner/i.test(msg)) return 'learner-endpoint';
  return 'other';
}

export function toObservedMember(m: EtcdMember): ObservedMember {
  return { id: m.id, name: m.name, peerUrls: [...m.peerUrls], clientUrls: [...m.clientUrls], isLearner: m.isLearner };
}

/**
 * The endpoints member operations use (upstream: `--service-endpoints`, else every member's
 * advertise-client-urls from the etcd config file, which works because the config lists them all).
 */
export function memberOpEndpoints(serviceEndpoints: readonly string[], template: EtcdConfigTemplate | undefined): string[] {
  if (serviceEndpoints.length > 0) return [...serviceEndpoints];
  const value = template?.['advertise-client-urls'];
  // The legacy template names the client service: reach the ready members through it (upstream's releases of
  // that time used --endpoints, the local etcd, which is not running yet when this member must be added).
  const legacy = template ? legacyUrlTemplate(template, 'advertise-client-urls') : undefined;
  if (legacy) return [`${legacy.scheme}://${legacy.service}:${legacy.port}`];
  const urls: string[] = [];
  const add = (v: unknown): void => {
    if (typeof v === 'string')
      urls.push(
        ...v
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean),
      );
    else if (Array.isArray(v)) for (const x of v) add(x);
  };
  if (value && typeof value === 'object' && !Array.isArray(value)) for (const v of Object.values(value)) add(v);
  else add(value);
  const unique = [...new Set(urls)];
  if (unique.length === 0) {
    throw new EtcdbrError(
      'E_INVALID_INPUT',
      'failed to get etcd endpoints from config file: set --service-endpoints or advertise-client-urls in the etcd config',
    );
  }
  return unique;
}

/** A factory over the etcd-connection settings (TLS, auth) with the endpoints replaced per call. */
export function clusterClientFactory(base: Omit<EtcdClientOptions, 'endpoints'>): ClusterClientFactory {
  return (endpoints) => createEtcdClient({ ...base, endpoints });
}

export interface MemberControlOptions {
  /** Service endpoints (see memberOpEndpoints). */
  endpoints: string[];
  newClient: ClusterClientFactory;
  /** `[member-name-prefix-]POD_NAME`. */
  memberName: string;
  /** This member's peer URLs from the etcd config. */
  peerUrls: string[];
  logger: Logger;
  metrics: Metrics;
  clock?: Clock;
  timeoutMs?: number;
  addRetry?: RetryPolicy;
  observeRetry?: RetryPolicy;
  removeRetry?: RetryPolicy;
  tooManyLearnersWaitMs?: number;
}

export interface AddLearnerResult {
  /** Hex id of the new learner; undefined when etcd said it already exists. */
  memberId?: string;
  alreadyMember: boolean;
}

export class MemberControl {
  private readonly clock: Clock;
  private readonly timeoutMs: number;

  constructor(private readonly opts: MemberControlOptions) {
    if (opts.endpoints.length === 0) throw new EtcdbrError('E_INVALID_INPUT', 'member operations need at least one etcd endpoint');
    this.clock = opts.clock ?? systemClock;
    this.timeoutMs = opts.timeoutMs ?? MEMBER_OP_TIMEOUT_MS;
  }

  get memberName(): string {
    return this.opts.memberName;
  }

  private call(): { timeoutMs: number } {
    return { timeoutMs: this.timeoutMs };
  }

  private async withClient<T>(endpoints: string[], fn: (c: EtcdClient) => Promise<T>): Promise<T> {
    const client = await this.opts.newClient(endpoints);
    try {
      return await fn(client);
    } finally {
      client.close();
    }
  }

  /**
   * Runs `fn` against each endpoint in turn until one succeeds. Errors that are etcd's answer about the
   * cluster (not about the endpoint) end the search at once: asking another member gives the same answer.
   */
  private async onAnyEndpoint<T>(what: string, fn: (c: EtcdClient) => Promise<T>): Promise<T> {
    const errors: string[] = [];
    let last: unknown;
    for (const ep of this.opts.endpoints) {
      try {
        return await this.withClient([ep], fn);
      } catch (err) {
        const kind = memberErrorKind(err);
        if (kind !== 'other' && kind !== 'learner-endpoint' && kind !== 'unhealthy-cluster') throw err;
        last = err;
        errors.push(`${ep}: ${(err as Error).message}`);
      }
    }
    throw new EtcdbrError('E_UNAVAILABLE', `${what} failed on every endpoint (${errors.join('; ')})`, { cause: last });
  }

  /** The member list as any reachable member sees it (etcd 3.4 serves it without quorum). */
  async memberList(): Promise<ObservedMember[]> {
    const res = await this.onAnyEndpoint('member list', (c) => c.memberList(this.call()));
    return res.members.map(toObservedMember);
  }

  /**
   * One look at the cluster: every endpoint's Status (cluster ids: more than one means two clusters behind
   * the service), then a linearizable read through a voting member that knows a leader — only a quorate
   * cluster serves it — and the member list from that same member.
   */
  async observeOnce(): Promise<ClusterObservation> {
    const statuses = await Promise.all(
      this.opts.endpoints.map(async (ep) => {
        try {
          const st = await this.withClient([ep], (c) => c.status(this.call()));
          return { ep, clusterId: st.clusterId, leader: st.leaderId, isLearner: st.isLearner };
        } catch (err) {
          return { ep, error: (err as Error).message };
        }
      }),
    );
    const answered = statuses.filter((s): s is { ep: string; clusterId: string; leader: string; isLearner: boolean } => 'clusterId' in s);
    const clusterIds = [...new Set(answered.map((s) => s.clusterId))];
    if (clusterIds.length > 1) return { kind: 'split', clusterIds };
    if (answered.length === 0) {
      return {
        kind: 'unreachable',
        reason: `no etcd endpoint answered (${statuses.map((s) => ('error' in s ? `${s.ep}: ${s.error}` : s.ep)).join('; ')})`,
      };
    }
    const candidates = answered.filter((s) => !s.isLearner && s.leader !== '0');
    if (candidates.length === 0)
      return { kind: 'unreachable', reason: `the etcd members that answered (${answered.map((s) => s.ep).join(', ')}) have no leader` };
    const errors: string[] = [];
    for (const cand of candidates) {
      try {
        const members = await this.withClient([cand.ep], async (c) => {
          await c.currentRevision(this.timeoutMs);
          return (await c.memberList(this.call())).members;
        });
        return { kind: 'quorate', clusterId: cand.clusterId, members: members.map(toObservedMember) };
      } catch (err) {
        errors.push(`${cand.ep}: ${(err as Error).message}`);
      }
    }
    return { kind: 'unreachable', reason: `no linearizable read succeeded (${errors.join('; ')})` };
  }

  /** observeOnce with upstream's probe retry; returns the last observation when the cluster never became quorate. */
  async observe(signal?: AbortSignal): Promise<ClusterObservation> {
    const policy = this.opts.observeRetry ?? OBSERVE_RETRY;
    let obs: ClusterObservation = { kind: 'unreachable', reason: 'not observed' };
    for (let attempt = 1; attempt <= policy.attempts; attempt++) {
      obs = await this.observeOnce();
      if (obs.kind !== 'unreachable') return obs;
      this.opts.logger.info({ attempt, reason: obs.reason }, 'no quorate etcd cluster answered yet');
      if (attempt < policy.attempts) await this.clock.sleep(retryDelay(policy, attempt), signal);
    }
    return obs;
  }

  /**
   * Adds this member as a learner with upstream's retry: "member exists" and "peer URL exists" mean an
   * earlier attempt (or an earlier initialization) already added it; "too many learners" means another member
   * is joining, so wait before the next attempt. `beforeAttempt` runs first each time (the initializer wipes
   * the data dir there, as upstream does before every attempt).
   */
  async addAsLearner(opts: { beforeAttempt?: () => Promise<void>; signal?: AbortSignal } = {}): Promise<AddLearnerResult> {
    const { logger, metrics, memberName, peerUrls } = this.opts;
    const policy = this.opts.addRetry ?? ADD_LEARNER_RETRY;
    let last: unknown;
    for (let attempt = 1; attempt <= policy.attempts; attempt++) {
      await opts.beforeAttempt?.();
      const start = Date.now();
      try {
        const added = await this.onAnyEndpoint('member add', (c) => c.memberAdd(peerUrls, { learner: true, ...this.call() }));
        const seconds = (Date.now() - start) / 1000;
        metrics.isLearnerCountTotal.labels('true').inc();
        metrics.isLearner.set(1);
        metrics.addLearnerDurationSeconds.labels('true').observe(seconds);
        const memberId = added.id;
        logger.info({ member: memberName, memberId, peerUrls, attempt }, 'added member to the cluster as a learner');
        return { memberId, alreadyMember: false };
      } catch (err) {
        const kind = memberErrorKind(err);
        if (kind === 'member-exists' || kind === 'peer-url-exists') {
          logger.info({ member: memberName, peerUrls }, 'member is already part of the etcd cluster');
          return { alreadyMember: true };
        }
        metrics.isLearnerCountTotal.labels('false').inc();
        metrics.addLearnerDurationSeconds.labels('false').observe((Date.now() - start) / 1000);
        last = err;
        logger.warn({ err, attempt, attempts: policy.attempts, member: memberName }, 'could not add member as a learner');
        if (kind === 'too-many-learners') await this.clock.sleep(this.opts.tooManyLearnersWaitMs ?? TOO_MANY_LEARNERS_WAIT_MS, opts.signal);
      }
      if (attempt < policy.attempts) await this.clock.sleep(retryDelay(policy, attempt), opts.signal);
    }
    throw new EtcdbrError(
      'E_FAILED',
      `could not add member ${memberName} (${peerUrls.join(',')}) as a learner after ${policy.attempts} attempts: ${(last as Error)?.message ?? 'unknown error'}`,
      { cause: last },
    );
  }

  /** Removes a member by id; "member not found" means it is already gone. */
  async remove(memberId: string, signal?: AbortSignal): Promise<void> {
    const { logger, metrics } = this.opts;
    const policy = this.opts.removeRetry ?? REMOVE_RETRY;
    let last: unknown;
    for (let attempt = 1; attempt <= policy.attempts; attempt++) {
      const start = Date.now();
      try {
        await this.onAnyEndpoint('member remove', (c) => c.memberRemove(memberId, this.call()));
        metrics.memberRemoveDurationSeconds.labels('true').observe((Date.now() - start) / 1000);
        logger.info({ memberId }, 'removed member from the etcd cluster');
        return;
      } catch (err) {
        if (memberErrorKind(err) === 'member-not-found') {
          logger.info({ memberId }, 'member is not in the etcd cluster (already removed)');
          return;
        }
        metrics.memberRemoveDurationSeconds.labels('false').observe((Date.now() - start) / 1000);
        last = err;
        logger.warn({ err, attempt, memberId }, 'could not remove member from the etcd cluster');
      }
      if (attempt < policy.attempts) await this.clock.sleep(retryDelay(policy, attempt), signal);
    }
    throw new EtcdbrError(
      'E_FAILED',
      `unable to remove member ${memberId} from the etcd cluster: ${(last as Error)?.message ?? 'unknown error'}`,
      { cause: last },
    );
  }

  /** Removes the member with this name (upstream RemoveMember); false when there is none. */
  async removeByName(name: string, signal?: AbortSignal): Promise<boolean> {
    const member = (await this.memberList()).find((m) => m.name === name);
    if (!member) return false;
    await this.remove(member.id, signal);
    return true;
  }

  /**
   * One promotion attempt of a learner (the caller retries on its own period). "Not a learner" counts as
   * done: a previous attempt, or another sidecar, promoted it already.
   */
  async promote(memberId: string): Promise<'promoted' | 'not-learner'> {
    const { metrics } = this.opts;
    const start = Date.now();
    try {
      await this.onAnyEndpoint('member promote', (c) => c.memberPromote(memberId, this.call()));
      metrics.memberPromoteDurationSeconds.labels('true').observe((Date.now() - start) / 1000);
      return 'promoted';
    } catch (err) {
      if (memberErrorKind(err) === 'not-learner') return 'not-learner';
      metrics.memberPromoteDurationSeconds.labels('false').observe((Date.now() - start) / 1000);
      throw err;
    }
  }
}
