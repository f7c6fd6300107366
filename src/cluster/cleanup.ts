import type { Logger } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { EtcdClient } from '../etcd/index.js';
import type { Metrics } from '../metrics.js';
import {
  EndpointClients,
  listClusterMembers,
  probeMembers,
  type MaintenanceClientFactory,
  type ClusterMember,
  type EndpointClientFactory,
} from './defrag.js';

/**
 * Removal of superfluous etcd members by the leading sidecar (etcd-druid proposal 01-multi-node-etcd-clusters.md; issue 5).
 *
 * Pods of the etcd StatefulSet are `<statefulset>-<ordinal>`, and a member is named after its pod (with
 * `<member-name-prefix>-` in front when the etcd config sets one). A member whose ordinal is at or above the
 * configured cluster size has no pod any more, e.g. after a failed scale-up was rolled back, and only hurts
 * quorum. Upstream dropped its (never enabled) member GC in v0.42; we do it because etcd-druid's multi-node proposal asks for it.
 */

/** Upstream's `DefaultMemberGarbageCollectionPeriod`. */
export const MEMBER_CLEANUP_PERIOD_MS = 60_000;

/**
 * How long a member must look superfluous before it is removed. The leader reads the cluster size from its
 * mounted ConfigMap, which kubelet refreshes only after a delay (about a minute or two); during a scale-up a
 * new pod's member can exist before the leader sees the larger size, and must not be removed for that.
 */
export const MEMBER_CLEANUP_GRACE_MS = 5 * 60_000;

export interface CleanupPolicy {
  /** Configured cluster size (`initial-cluster` of the etcd config). */
  clusterSize: number;
  /** Name of the StatefulSet: pods are `<statefulSetName>-<n>`. Members of other names are never touched. */
  statefulSetName: string;
  /** `member-name-prefix` of the etcd config, if any. */
  memberNamePrefix?: string;
}

export interface CleanupCandidate {
  id: string;
  name: string;
  peerURLs: string[];
  isLearner: boolean;
  healthy: boolean;
}

export interface CleanupPlan {
  remove: CleanupCandidate[];
  /** Superfluous members that stay, and why. */
  kept: Array<{ member: CleanupCandidate; reason: string }>;
}

/**
 * The StatefulSet ordinal of a member: from its name (after removing the member-name prefix), or, for a
 * member that was added but never started (empty name), from the first label of its peer URL's host, which
 * is the pod's name in the StatefulSet's peer service DNS. Undefined when the member does not belong to
 * `statefulSetName`.
 */
export function memberOrdinal(member: { name: string; peerURLs: readonly string[] }, policy: CleanupPolicy): number | undefined {
  let podName = member.name;
  if (podName === '') {
    const peer = member.peerURLs[0];
    if (peer === undefined) return undefined;
    try {
      podName = new URL(peer).hostname.split('.')[0] ?? '';
    } catch {
      return undefined;
    }
  } else if (policy.memberNamePrefix) {
    const p = `${policy.memberNamePrefix}-`;
    if (!podName.startsWith(p)) return undefined;
    podName = podName.slice(p.length);
  }
  const m = /^(.+)-(0|[1-9][0-9]*)$/.exec(podName);
  if (!m || m[1] !== policy.statefulSetName) return undefined;
  return Number(m[2]);
}

/** The members whose ordinal is at or above the configured cluster size. */
export function superfluousMembers<T extends { name: string; peerURLs: readonly string[] }>(
  members: readonly T[],
  policy: CleanupPolicy,
): T[] {
  if (!Number.isInteger(policy.clusterSize) || policy.clusterSize < 1) return [];
  return members.filter((m) => {
    const n = memberOrdinal(m, policy);
    return n !== undefined && n >= policy.clusterSize;
  });
}

function quorum(voters: number): number {
  return Math.floor(voters / 2) + 1;
}

/**
 * Which superfluous members to remove, in order. Learners first (they do not vote), then unhealthy voting
 * members (removing them only helps quorum), then healthy ones, highest ordinal first. A voting member is
 * removed only if afterwards the healthy voting members still form a quorum of the remaining voting
 * members, and never the last voting member. `protectedIds` (the leader, this sidecar's own member) and
 * members not yet `eligible` (grace period) are never removed; they do not change the counts.
 */
export function planMemberCleanup(
  members: readonly CleanupCandidate[],
  policy: CleanupPolicy,
  opts: { protectedIds?: ReadonlySet<string>; eligible?: ReadonlySet<string> } = {},
): CleanupPlan {
  const plan: CleanupPlan = { remove: [], kept: [] };
  const superfluous = superfluousMembers(members, policy);
  let voters = members.filter((m) => !m.isLearner).length;
  let healthyVoters = members.filter((m) => !m.isLearner && m.healthy).length;
  const rank = (m: CleanupCandidate) => (m.isLearner ? 0 : m.healthy ? 2 : 1);
  const ordered = [...superfluous].sort((a, b) => rank(a) - rank(b) || (memberOrdinal(b, policy) ?? 0) - (memberOrdinal(a, policy) ?? 0));
  for (const m of ordered) {
    if (opts.protectedIds?.has(m.id)) {
      plan.kept.push({ member: m, reason: 'it is the leader / this sidecar’s own member' });
      continue;
    }
    if (opts.eligible && !opts.eligible.has(m.id)) {
      plan.kept.push({ member: m, reason: 'it became superfluous only recently (grace period)' });
      continue;
    }
    if (m.isLearner) {
      plan.remove.push(m);
      continue;
    }
    const votersAfter = voters - 1;
    const healthyAfter = healthyVoters - (m.healthy ? 1 : 0);
    if (votersAfter < 1) {
      plan.kept.push({ member: m, reason: 'it is the last voting member' });
      continue;
    }
    if (healthyAfter < quorum(votersAfter)) {
      plan.kept.push({
        member: m,
        reason: `removing it would leave ${healthyAfter} healthy of ${votersAfter} voting members, below the quorum of ${quorum(votersAfter)}`,
      });
      continue;
    }
    plan.remove.push(m);
    voters = votersAfter;
    healthyVoters = healthyAfter;
  }
  return plan;
}

export interface MemberCleanupOptions {
  /** Client of the cluster for MemberList and MemberRemove, opened per round and closed afterwards. */
  clusterClient: MaintenanceClientFactory;
  endpointClient: EndpointClientFactory;
  /** Read on every round (the ConfigMap may change); undefined skips the round. */
  policy: () => Promise<CleanupPolicy | undefined>;
  statusTimeoutMs: number;
  periodMs?: number;
  graceMs?: number;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
}

export interface CleanupRound {
  removed: ClusterMember[];
  kept: Array<{ member: CleanupCandidate; reason: string }>;
  /** A removal etcd refused (e.g. "unhealthy cluster" right after a member restarted); retried next round. */
  failed?: { member: CleanupCandidate; error: string };
}

/** Runs the cleanup every period while this sidecar leads. */
export class MemberCleanup {
  private readonly periodMs: number;
  private readonly graceMs: number;
  /** When each member was first seen superfluous (hex ID → epoch ms); forgotten once it is not. */
  private readonly superfluousSince = new Map<string, number>();

  constructor(private readonly opts: MemberCleanupOptions) {
    this.periodMs = opts.periodMs ?? MEMBER_CLEANUP_PERIOD_MS;
    this.graceMs = opts.graceMs ?? MEMBER_CLEANUP_GRACE_MS;
  }

  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.opts.clock.sleep(this.periodMs, signal);
      } catch {
        return;
      }
      try {
        await this.runOnce();
      } catch (err) {
        this.opts.logger.warn({ err }, 'member cleanup failed; retrying next period');
      }
    }
  }

  /** One round: list, probe, decide, remove. */
  async runOnce(): Promise<CleanupRound> {
    const policy = await this.opts.policy();
    if (policy === undefined) return { removed: [], kept: [] };
    const client = await this.opts.clusterClient();
    try {
      return await this.round(client, policy);
    } finally {
      client.close();
    }
  }

  private async round(client: EtcdClient, policy: CleanupPolicy): Promise<CleanupRound> {
    const { statusTimeoutMs, logger, metrics, clock } = this.opts;
    const round: CleanupRound = { removed: [], kept: [] };
    const members = await listClusterMembers(client, statusTimeoutMs);
    const superfluous = superfluousMembers(members, policy);
    const now = clock.now().getTime();
    const seen = new Set(superfluous.map((m) => m.id));
    for (const id of [...this.superfluousSince.keys()]) if (!seen.has(id)) this.superfluousSince.delete(id);
    if (superfluous.length === 0) return round;
    const eligible = new Set<string>();
    for (const m of superfluous) {
      const since = this.superfluousSince.get(m.id) ?? now;
      this.superfluousSince.set(m.id, since);
      if (now - since >= this.graceMs) eligible.add(m.id);
    }

    const clients = new EndpointClients(this.opts.endpointClient);
    let probes;
    try {
      probes = await probeMembers(members, (ep) => clients.get(ep), statusTimeoutMs);
    } finally {
      await clients.closeAll();
    }
    const leaderIds = new Set(probes.map((p) => p.status?.leaderId).filter((id): id is string => id !== undefined && id !== '0'));
    const candidates: CleanupCandidate[] = probes.map((p) => ({
      id: p.member.id,
      name: p.member.name,
      peerURLs: p.member.peerURLs,
      isLearner: p.member.isLearner,
      healthy: p.status !== undefined,
    }));
    const plan = planMemberCleanup(candidates, policy, { protectedIds: leaderIds, eligible });
    round.kept = plan.kept;
    for (const k of plan.kept) {
      logger.info({ member: k.member.name || k.member.id, id: k.member.id, reason: k.reason }, 'superfluous etcd member kept');
    }
    for (const c of plan.remove) {
      const member = members.find((m) => m.id === c.id) as ClusterMember;
      const started = performance.now();
      try {
        await client.memberRemove(c.id, { timeoutMs: statusTimeoutMs });
      } catch (err) {
        metrics.memberRemoveDurationSeconds.observe({ succeeded: 'false' }, (performance.now() - started) / 1000);
        logger.error({ err, member: c.name || c.id, id: c.id }, 'removing superfluous etcd member failed');
        round.failed = { member: c, error: err instanceof Error ? err.message : String(err) };
        // Counts in the plan assumed this removal; stop here and decide again next round.
        break;
      }
      metrics.memberRemoveDurationSeconds.observe({ succeeded: 'true' }, (performance.now() - started) / 1000);
      this.superfluousSince.delete(c.id);
      logger.info(
        { member: c.name || c.id, id: c.id, clusterSize: policy.clusterSize, healthy: c.healthy, learner: c.isLearner },
        'removed superfluous etcd member',
      );
      round.removed.push(member);
    }
    return round;
  }
}
