/**
 * The server's multi-node pieces in one place: who this member is (from the etcd config template, read
 * again on every use because etcd-druid rewrites the mounted ConfigMap on scale-up, as upstream reads the file
 * each time), the member operations over the service endpoints, the initializer's multi-node options, the
 * cluster view `/config` renders from, and learner promotion.
 */
import { EtcdbrError } from '../errors.js';
import type { Logger } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { EtcdConnectionConfig } from '../config/types.js';
import type { PodEnvironment } from '../config/pod-environment.js';
import {
  memberName,
  initialClusterMembers,
  memberUrls,
  parseInitialCluster,
  readEtcdConfigTemplate,
  type ClusterView,
  type EtcdConfigTemplate,
} from '../config/etcd-config.js';
import type { BootstrapDecision } from '../initializer/bootstrap.js';
import type { MultiNodeInit } from '../initializer/initializer.js';
import type { KubeClient } from '../k8s/client.js';
import { memberLeaseHasHolder } from '../k8s/member-lease.js';
import type { Metrics } from '../metrics.js';
import { clearCreateAsLearner, readCreateAsLearner } from '../k8s/etcd-member.js';
import type { EtcdMemberAccess } from '../k8s/etcd-member-access.js';
import type { EtcdMemberStatus } from './leadership.js';
import {
  clusterClientFactory,
  MemberControl,
  memberOpEndpoints,
  type ClusterClientFactory,
  type MemberControlOptions,
  type RetryPolicy,
} from './members.js';
import { LearnerPromoter } from './promoter.js';

export interface MultiNodeOptions {
  pod: PodEnvironment;
  connection: EtcdConnectionConfig;
  /** Present when Kubernetes is enabled (lease renewal flags). */
  kube?: KubeClient;
  /** The EtcdMember requests (create-as-learner annotation), with Kubernetes; shared with the status publisher. */
  etcdMembers?: EtcdMemberAccess;
  namespace: string;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  /** Tests: a client factory and shorter retries. */
  newClient?: ClusterClientFactory;
  retries?: Partial<Pick<MemberControlOptions, 'addRetry' | 'observeRetry' | 'removeRetry' | 'tooManyLearnersWaitMs'>> & {
    observeRetry?: RetryPolicy;
  };
  /** Learner promotion: escalate logs after this long (default 5 min). */
  stuckAfterMs?: number;
}

export interface MemberContext {
  template: EtcdConfigTemplate;
  clusterSize: number;
  podName: string;
  memberName: string;
  peerUrls: string[];
  inInitialCluster: boolean;
  members: MemberControl;
}

const KUBE_TIMEOUT_MS = 10_000;

export class MultiNode {
  private lastDecision: BootstrapDecision | undefined;
  private promoter: LearnerPromoter | undefined;
  private readonly newClient: ClusterClientFactory;

  constructor(private readonly opts: MultiNodeOptions) {
    const c = opts.connection;
    this.newClient =
      opts.newClient ??
      clusterClientFactory({
        username: c.username,
        password: c.password,
        certFile: c.certFile,
        keyFile: c.keyFile,
        caFile: c.caFile,
        insecureTransport: c.insecureTransport,
        insecureSkipVerify: c.insecureSkipVerify,
        connectionTimeoutMs: c.connectionTimeout,
      });
  }

  /** This member as the etcd config describes it now; undefined for a single-node cluster. */
  async member(): Promise<MemberContext | undefined> {
    const template = await readEtcdConfigTemplate(this.opts.pod.etcdConfigPath);
    const cluster = initialClusterMembers(template['initial-cluster']);
    if (cluster.size <= 1) return undefined;
    const podName = this.opts.pod.podName ?? '';
    if (podName === '')
      throw new EtcdbrError('E_INVALID_INPUT', 'POD_NAME is not set: a member of a multi-node cluster cannot tell which member it is');
    const name = memberName(template, podName);
    const peerUrls = memberUrls(template, 'initial-advertise-peer-urls', name, podName);
    const ownEntries = cluster.get(name);
    const inInitialCluster = ownEntries !== undefined;
    // Without its own peer URLs the member cannot be added; fall back to its initial-cluster entries.
    const peers = peerUrls.length > 0 ? peerUrls : (ownEntries ?? []);
    const members = new MemberControl({
      endpoints: memberOpEndpoints(this.opts.connection.serviceEndpoints, template),
      newClient: this.newClient,
      memberName: name,
      peerUrls: peers,
      logger: this.opts.logger,
      metrics: this.opts.metrics,
      clock: this.opts.clock,
      ...this.opts.retries,
    });
    return { template, clusterSize: cluster.size, podName, memberName: name, peerUrls: peers, inInitialCluster, members };
  }

  /** The initializer's multi-node options, or undefined for a single-node cluster. */
  async initOptions(signal?: AbortSignal): Promise<{ clusterSize: number; multiNode: MultiNodeInit } | undefined> {
    const m = await this.member();
    if (!m) return undefined;
    this.lastDecision = undefined;
    const { kube, etcdMembers, namespace, clock } = this.opts;
    const ref = { namespace, name: m.podName };
    return {
      clusterSize: m.clusterSize,
      multiNode: {
        memberName: m.memberName,
        inInitialCluster: m.inInitialCluster,
        peerUrls: m.peerUrls,
        members: m.members,
        ...(etcdMembers && namespace !== ''
          ? { createAsLearner: () => readCreateAsLearner(etcdMembers, ref, clock, KUBE_TIMEOUT_MS) }
          : {}),
        ...(kube && namespace !== '' ? { memberLeaseHeld: () => memberLeaseHasHolder(kube, ref, clock, KUBE_TIMEOUT_MS) } : {}),
        onDecision: (d) => {
          this.lastDecision = d;
        },
        ...(signal ? { signal } : {}),
      },
    };
  }

  /**
   * What `/config` renders from (upstream `pkg/server/httpAPI.go` `/config`, `getClusterState`): the member list through the service endpoints, each
   * member named by its name or, for a learner that has not run yet, by the initial-cluster entry with its
   * peer URL (upstream counts that nameless member too). A learner present means state `existing`; so does
   * this member's own decision to join as a learner, even when the member list cannot be read right now.
   */
  async clusterView(): Promise<ClusterView> {
    const joining = this.lastDecision?.action === 'join-as-learner' || this.lastDecision?.action === 'rejoin-as-learner';
    const m = await this.member();
    if (!m) return { existingMembers: [], learnerPresent: false };
    let list;
    try {
      // Upstream retries the member list once after 2 s before giving up.
      list = await m.members.memberList().catch(async () => {
        await this.opts.clock.sleep(2_000);
        return m.members.memberList();
      });
    } catch (err) {
      if (joining) return { existingMembers: [], learnerPresent: true };
      throw err;
    }
    const byUrl = new Map(parseInitialCluster(m.template['initial-cluster']).map(([n, u]) => [u, n]));
    return {
      existingMembers: list.map((x) => x.name || x.peerUrls.map((u) => byUrl.get(u)).find((n) => n !== undefined) || ''),
      learnerPresent: joining || list.some((x) => x.isLearner),
    };
  }

  /** LeadershipWatcher's onLearner: promote this member once etcd accepts it. */
  onLearner(status: EtcdMemberStatus): void {
    void this.learnerPromoter().then(
      (p) => p?.onLearner(status),
      (err: unknown) => this.opts.logger.warn({ err }, 'cannot set up learner promotion'),
    );
  }

  /** LeadershipWatcher's onStatus: the learner gauge. */
  onStatus(status: EtcdMemberStatus | undefined): void {
    this.promoter?.observe(status);
    if (status && !this.promoter) this.opts.metrics.isLearner.set(status.isLearner ? 1 : 0);
  }

  async settle(): Promise<void> {
    await this.promoter?.settle();
  }

  private async learnerPromoter(): Promise<LearnerPromoter | undefined> {
    if (this.promoter) return this.promoter;
    const m = await this.member();
    if (!m) return undefined;
    const { etcdMembers, namespace, clock, logger, metrics } = this.opts;
    this.promoter ??= new LearnerPromoter({
      members: m.members,
      clusterSize: m.clusterSize,
      clock,
      logger,
      metrics,
      ...(this.opts.stuckAfterMs === undefined ? {} : { stuckAfterMs: this.opts.stuckAfterMs }),
      ...(etcdMembers && namespace !== ''
        ? { onPromoted: () => clearCreateAsLearner(etcdMembers, { namespace, name: m.podName }, clock, KUBE_TIMEOUT_MS) }
        : {}),
    });
    return this.promoter;
  }
}
