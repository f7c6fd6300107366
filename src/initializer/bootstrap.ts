/**
 * The bootstrap decision of a member (upstream `pkg/initializer/initializer.go` `Initialize`;
 * etcd-druid proposal 01-multi-node-etcd-clusters.md, its decision table and single-member restoration;
 * docs/design-decisions.md "Multi-node members"): a pure function of what the
 * initializer observed — cluster size, the member list (or that no quorate cluster answered), whether this
 * member is in it, the data-dir validation status, the WAL's member and cluster ids, whether backups exist,
 * and the Kubernetes hints (EtcdMember `create-as-learner` annotation, a member lease that has a holder).
 * The effects (wiping, member add/remove, restore) live in initializer.ts; this file only decides.
 *
 * Safety rules that every branch follows:
 * - a data dir is only wiped when the member is not a healthy member of the running cluster: it is invalid,
 *   or it belongs to a member id the cluster has removed, and the cluster it belongs to is the one answering;
 * - a multi-node member is never restored from the object store (its data would carry the old cluster
 *   metadata, docs/design-decisions.md "Multi-node members"); it re-syncs from the leader as a learner;
 * - with no quorate cluster, a member without valid data only bootstraps a new cluster when nothing says a
 *   cluster existed before (no WAL metadata, no backups, no member-lease holder, no create-as-learner);
 *   otherwise it fails with a clear reason instead of guessing (full quorum loss needs an operator).
 */
import { DataDirStatus, dataDirStatusName } from './validation-status.js';

/** One entry of etcd's member list, ids as lower-case hex without padding (as etcdctl prints them). */
export interface ObservedMember {
  id: string;
  /** Empty until the member has started once (a learner that was added but never ran). */
  name: string;
  peerUrls: string[];
  /** Empty until the member has started once and published itself. */
  clientUrls: string[];
  isLearner: boolean;
}

export type ClusterObservation =
  /** A linearizable read succeeded through the service endpoints: the cluster has quorum. */
  | { kind: 'quorate'; clusterId: string; members: ObservedMember[] }
  /** No endpoint could serve a linearizable read (nothing running yet, or quorum lost). */
  | { kind: 'unreachable'; reason: string }
  /** The endpoints answer for more than one cluster id: two clusters behind one service. */
  | { kind: 'split'; clusterIds: string[] };

export interface BootstrapInput {
  /** Members in the etcd config's initial-cluster. */
  clusterSize: number;
  /** `[member-name-prefix-]POD_NAME`. */
  memberName: string;
  /** Whether `memberName` has an entry in the config's initial-cluster. */
  inInitialCluster: boolean;
  /** This member's peer URLs from the config. */
  peerUrls: string[];
  /** Not consulted for a single-node cluster. */
  cluster: ClusterObservation;
  dataDir: { status: DataDirStatus; reason?: string };
  /** Member and cluster id from the WAL (hex), when the data dir has a readable WAL. */
  wal?: { memberId: string; clusterId: string };
  /** Whether the store holds a backup; 'unknown' when it could not be listed; false without a store. */
  backupsExist: boolean | 'unknown';
  /** The EtcdMember's `druid.gardener.cloud/create-as-learner` annotation; undefined without Kubernetes. */
  createAsLearner?: boolean;
  /** The member lease has a holder (this member heartbeated before); undefined without Kubernetes. */
  memberLeaseHeld?: boolean;
}

export type FailCode =
  | 'wrong-volume'
  | 'db-locked'
  | 'status-unknown'
  | 'not-in-initial-cluster'
  | 'cluster-id-mismatch'
  | 'peer-url-conflict'
  | 'foreign-member-data'
  | 'quorum-lost'
  | 'cluster-unreachable'
  | 'backups-unknown';

export type BootstrapDecision =
  /** The data dir is valid: etcd starts on it with the configuration it was created with. */
  | { action: 'start'; reason: string }
  /** Single node: restore the data dir from the newest backups (or start empty when there are none). */
  | { action: 'restore'; reason: string }
  /** Fresh multi-node bootstrap: remove an invalid data dir (if any) and start with state `new`. */
  | { action: 'bootstrap'; reason: string }
  /** Not (yet) a member: wipe the data dir, add this member as a learner, start with state `existing`. */
  | { action: 'join-as-learner'; reason: string }
  /** A member with an invalid data dir in a quorate cluster: remove it, wipe, re-add as a learner. */
  | { action: 'rejoin-as-learner'; reason: string; removeMemberId: string }
  | { action: 'fail'; code: FailCode; reason: string };

const FATAL_STATUSES: ReadonlyMap<DataDirStatus, [FailCode, string]> = new Map([
  [DataDirStatus.WrongVolumeMounted, ['wrong-volume', "won't initialize ETCD because wrong ETCD volume is mounted"]],
  [DataDirStatus.FailToOpenBoltDBError, ['db-locked', 'failed to initialize since another process still holds the file lock']],
  [DataDirStatus.DataDirectoryStatusUnknown, ['status-unknown', 'cannot tell whether the data directory is valid']],
]);

export function decideBootstrap(input: BootstrapInput): BootstrapDecision {
  const status = input.dataDir.status;
  const statusName = dataDirStatusName(status);
  const why = input.dataDir.reason ? `${statusName}: ${input.dataDir.reason}` : statusName;
  const fatal = FATAL_STATUSES.get(status);
  if (fatal) return { action: 'fail', code: fatal[0], reason: input.dataDir.reason ? `${fatal[1]}: ${input.dataDir.reason}` : fatal[1] };
  const valid = status === DataDirStatus.DataDirectoryValid;

  if (input.clusterSize <= 1) {
    return valid
      ? { action: 'start', reason: 'single-node cluster with a valid data directory' }
      : { action: 'restore', reason: `single-node cluster, data directory not valid (${why}): restoring from the snapstore` };
  }

  if (!input.inInitialCluster) {
    return {
      action: 'fail',
      code: 'not-in-initial-cluster',
      reason:
        `member ${input.memberName} has no entry in the etcd config's initial-cluster: check POD_NAME, ` +
        'member-name-prefix and the initial-cluster of the etcd config',
    };
  }

  const c = input.cluster;
  if (c.kind === 'split') {
    return {
      action: 'fail',
      code: 'cluster-id-mismatch',
      reason: `the service endpoints answer for different etcd clusters (cluster ids ${c.clusterIds.join(', ')}): refusing to join any of them`,
    };
  }
  if (c.kind === 'quorate') return decideQuorate(input, c, valid, why);
  return decideUnreachable(input, c.reason, valid, why);
}

function decideQuorate(
  input: BootstrapInput,
  c: Extract<ClusterObservation, { kind: 'quorate' }>,
  valid: boolean,
  why: string,
): BootstrapDecision {
  const name = input.memberName;
  if (input.wal && input.wal.clusterId !== c.clusterId) {
    return {
      action: 'fail',
      code: 'cluster-id-mismatch',
      reason:
        `the data directory belongs to etcd cluster ${input.wal.clusterId} but the running cluster is ${c.clusterId}: ` +
        'not wiping it; remove the volume by hand if it is stale',
    };
  }
  const mine = new Set(input.peerUrls);
  const byName = c.members.find((m) => m.name === name);
  const byPeer = c.members.find((m) => m.peerUrls.some((u) => mine.has(u)));
  if (byPeer && byPeer.name !== '' && byPeer.name !== name) {
    return {
      action: 'fail',
      code: 'peer-url-conflict',
      reason: `peer URL ${byPeer.peerUrls.join(',')} of member ${name} is registered for member ${byPeer.name} (${byPeer.id})`,
    };
  }
  const byWal = input.wal ? c.members.find((m) => m.id === input.wal!.memberId) : undefined;
  if (byWal && byWal.name !== '' && byWal.name !== name) {
    return {
      action: 'fail',
      code: 'foreign-member-data',
      reason: `the data directory holds member ${byWal.id}, which the cluster knows as ${byWal.name}, not ${name}: wrong volume?`,
    };
  }
  // An added learner has no name until it first runs; its peer URL identifies it.
  const own = byName ?? (byPeer && byPeer.name === '' ? byPeer : undefined);

  if (!own) {
    return {
      action: 'join-as-learner',
      reason:
        `member ${name} is not in the member list of cluster ${c.clusterId}` +
        (input.createAsLearner
          ? ' and its EtcdMember asks to be created as learner'
          : ' (scale-up, or a removal whose re-add did not finish)') +
        ': adding it as a learner',
    };
  }
  const neverStarted = own.clientUrls.length === 0;
  // The data dir is of a member id the cluster no longer has: etcd would refuse it ("member removed").
  const staleData = valid && input.wal !== undefined && !byWal;
  if (valid && !staleData) {
    return {
      action: 'start',
      reason: `member ${name} (${own.id}${own.isLearner ? ', learner' : ''}) is in cluster ${c.clusterId} and its data directory is valid`,
    };
  }
  const state = staleData ? `data directory of removed member ${input.wal!.memberId}` : `data directory not valid (${why})`;
  if (neverStarted && own.isLearner) {
    return {
      action: 'join-as-learner',
      reason: `member ${name} was added as learner ${own.id} but never started; ${state}: starting it as that learner`,
    };
  }
  if (neverStarted && input.wal === undefined) {
    // Seeds case 2: the cluster formed from initial-cluster while this member had not started yet; its id
    // is derived from initial-cluster and the token, so it joins with state `new` and no member change.
    return {
      action: 'bootstrap',
      reason: `member ${name} (${own.id}) is a bootstrap member that never started; ${state}: joining the bootstrap`,
    };
  }
  return {
    action: 'rejoin-as-learner',
    removeMemberId: own.id,
    reason: `member ${name} (${own.id}) is in quorate cluster ${c.clusterId} with ${state}: removing it and re-adding it as a learner`,
  };
}

function decideUnreachable(input: BootstrapInput, reason: string, valid: boolean, why: string): BootstrapDecision {
  if (valid) {
    // Seeds case 6, and every member of a cluster that restarts as a whole: quorum re-forms from valid data.
    return { action: 'start', reason: `no quorate cluster answered (${reason}) but the data directory is valid: starting on it` };
  }
  if (input.createAsLearner === true) {
    return {
      action: 'fail',
      code: 'cluster-unreachable',
      reason: `member ${input.memberName} must join as a learner (EtcdMember create-as-learner) but no quorate cluster answered (${reason}); will retry`,
    };
  }
  if (input.backupsExist === 'unknown') {
    return {
      action: 'fail',
      code: 'backups-unknown',
      reason: `no quorate cluster answered (${reason}) and the snapstore could not be listed: cannot tell a fresh cluster from a lost one`,
    };
  }
  const evidence: string[] = [];
  if (input.wal) evidence.push(`the WAL holds member ${input.wal.memberId} of cluster ${input.wal.clusterId}`);
  if (input.backupsExist) evidence.push('backups exist');
  if (input.memberLeaseHeld) evidence.push('the member lease has a holder');
  if (evidence.length > 0) {
    return {
      action: 'fail',
      code: 'quorum-lost',
      reason:
        `no quorate cluster answered (${reason}), the data directory is not valid (${why}) and a cluster existed before ` +
        `(${evidence.join('; ')}): quorum is lost or not yet back; a multi-node member is not restored from backups ` +
        '(recover the cluster as a single member first)',
    };
  }
  return {
    action: 'bootstrap',
    reason: `fresh multi-node cluster: no quorate cluster answered (${reason}), no member metadata and no backups`,
  };
}
