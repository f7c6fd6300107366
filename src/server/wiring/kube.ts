/**
 * The sidecar's Kubernetes side, kept in one place because every part of it exists only when a flag turns
 * Kubernetes on: snapshot leases and their renewer, the member lease heartbeat, the EtcdMember status.
 */
import { stat } from 'node:fs/promises';
import { EtcdbrError } from '../../errors.js';
import type { EtcdClient } from '../../etcd/index.js';
import type { Snapshot } from '@etcdbrctl/snapstore';
import type { Env, PodEnvironment } from '../../config/pod-environment.js';
import type { Clock } from '../../clock.js';
import type { ServerConfig } from '../../config/types.js';
import { peerUrlsUseTls, readEtcdConfigTemplate } from '../../config/etcd-config.js';
import { createKubeClient, resolveKubeConnection, type KubeClient } from '../../k8s/client.js';
import { EtcdMemberStatusPublisher } from '../../cluster/member-status-publisher.js';
import { EtcdMemberAccess } from '../../k8s/etcd-member-access.js';
import { MemberLeaseHeartbeat } from '../../k8s/member-lease.js';
import { FullSnapshotLeaseRenewer, SnapshotLeases } from '../../k8s/snapshot-leases.js';
import type { Logger } from '../../log.js';

export interface KubeParts {
  /** Undefined when neither snapshot nor member lease renewal is enabled. */
  kube: KubeClient | undefined;
  /** POD_NAMESPACE, '' when unset (only allowed without Kubernetes). */
  namespace: string;
  leases: SnapshotLeases | undefined;
  renewer: FullSnapshotLeaseRenewer | undefined;
  memberLease: MemberLeaseHeartbeat | undefined;
  /**
   * EtcdMember requests (status, create-as-learner annotation), one verdict for all of them on whether the
   * API server serves the resource and lets the sidecar use it; undefined without Kubernetes.
   */
  etcdMembers: EtcdMemberAccess | undefined;
  /** Whether this member's peer URLs use TLS, as the sidecar started (for the EtcdMember status). */
  peerTLSEnabled: boolean;
}

/** Connects to Kubernetes when a lease flag asks for it and builds the leases; nothing is started yet. */
export async function wireKube(input: {
  config: ServerConfig;
  /** Only for the Kubernetes connection (KUBECONFIG, the in-cluster service host and port). */
  env: Env;
  pod: PodEnvironment;
  client: EtcdClient;
  /** The newest full snapshot the active snapshotter knows, for the full snapshot lease. */
  latestFull: () => Snapshot | undefined;
  clock: Clock;
  logger: Logger;
}): Promise<KubeParts> {
  const { config, env, pod, client, clock, logger } = input;
  const health = config.healthConfig;
  let kube: KubeClient | undefined;
  if (health.snapshotLeaseRenewalEnabled || health.memberLeaseRenewalEnabled) {
    kube = await createKubeClient(resolveKubeConnection({ env }));
  }
  const namespace = pod.podNamespace ?? '';
  if (kube && namespace === '') throw new EtcdbrError('E_INVALID_INPUT', 'POD_NAMESPACE must be set when lease renewal is enabled');
  const peerTLS = peerTlsReader(pod, config.restorationConfig.initialAdvertisePeerURLs, logger);
  const leases =
    kube && health.snapshotLeaseRenewalEnabled
      ? new SnapshotLeases({
          kube,
          namespace,
          fullSnapshotLeaseName: health.fullSnapshotLeaseName,
          deltaSnapshotLeaseName: health.deltaSnapshotLeaseName,
          clock,
          logger,
        })
      : undefined;
  const renewer = leases ? new FullSnapshotLeaseRenewer({ leases, latestFull: input.latestFull, clock, logger }) : undefined;
  const memberLease =
    kube && health.memberLeaseRenewalEnabled
      ? new MemberLeaseHeartbeat({
          kube,
          namespace,
          memberName: pod.podName ?? config.restorationConfig.name,
          memberIdentity: async () => {
            const st = await client.status();
            return { memberId: st.memberId, clusterId: st.clusterId, isLeader: st.memberId === st.leaderId };
          },
          // Read again at every heartbeat: druid changes the etcd config to turn peer TLS on and reads this.
          peerTLSEnabled: peerTLS,
          clock,
          logger,
          heartbeatMs: health.heartbeatDuration,
          timeoutMs: config.etcdConnectionConfig.connectionTimeout,
        })
      : undefined;
  const etcdMembers = kube ? new EtcdMemberAccess(kube, logger) : undefined;
  return { kube, namespace, leases, renewer, memberLease, etcdMembers, peerTLSEnabled: kube ? await peerTLS() : false };
}

/**
 * Whether all of this member's peer URLs use https: from the etcd config file, as upstream reads them (any of
 * its URL forms, the legacy template included); without a usable file, from `--initial-advertise-peer-urls`.
 * Asked at every member lease heartbeat, it parses the file again only when the file changed: the answer is
 * kept with the file's device, inode, size, mtime and ctime (a ConfigMap update replaces the file through a
 * symlink, a new inode), so an unchanged file is not parsed again every 10 s for the same answer.
 */
function peerTlsReader(pod: PodEnvironment, flagUrls: readonly string[], logger: Logger): () => Promise<boolean> {
  const path = pod.etcdConfigPath;
  const fromFlags = flagUrls.every((u) => u.startsWith('https://'));
  let last: { file: string; answer: boolean } | undefined;
  return async () => {
    let file: string;
    try {
      const st = await stat(path, { bigint: true });
      file = `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    } catch (err) {
      last = undefined;
      logger.debug({ err, path }, 'peer TLS: no etcd config file; using --initial-advertise-peer-urls');
      return fromFlags;
    }
    if (last?.file === file) return last.answer;
    let answer = fromFlags;
    try {
      answer = peerUrlsUseTls(await readEtcdConfigTemplate(path), pod.podName ?? '') ?? fromFlags;
    } catch (err) {
      // A malformed file (/config reports that, naming the line): the flags decide.
      logger.debug({ err, path }, 'peer TLS: no usable peer URLs in the etcd config file; using --initial-advertise-peer-urls');
    }
    last = { file, answer };
    return answer;
  };
}

/**
 * The EtcdMember status (DEP-04), published whenever Kubernetes is enabled. Apart from `wireKube` because
 * it needs the cluster size, which is resolved only after the Kubernetes client exists.
 */
export function startEtcdMemberStatus(
  parts: KubeParts,
  input: { config: ServerConfig; pod: PodEnvironment; clusterSize: number; clock: Clock; logger: Logger },
): EtcdMemberStatusPublisher | undefined {
  const { etcdMembers, namespace } = parts;
  const { config, clock, logger } = input;
  const rc = config.restorationConfig;
  const publisher = etcdMembers
    ? new EtcdMemberStatusPublisher({
        etcdMembers,
        namespace,
        name: input.pod.podName ?? rc.name,
        clusterSize: input.clusterSize,
        peerTLSEnabled: parts.peerTLSEnabled,
        // DB sizes change with every write: refreshed at the member lease heartbeat, not every reelection period.
        sizeRefreshMs: config.healthConfig.heartbeatDuration,
        clock,
        logger,
      })
    : undefined;
  publisher?.start();
  return publisher;
}
