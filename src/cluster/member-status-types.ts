/**
 * The EtcdMember status (DEP-04, etcd-druid proposal 04-etcd-member-custom-resource.md) as types: the body this
 * member writes, the model behind it and the events it folds (member-status.ts). Field names and shapes are the
 * DEP-04 API block's.
 */
import type { BootstrapDecision } from '../initializer/bootstrap.js';
import type { InitializationOutcome } from '../initializer/initializer.js';
import type { MemberDefragmentation } from './defrag.js';
import type { EtcdMemberStatus } from './leadership.js';

export type MemberState = 'New' | 'Initializing' | 'Starting' | 'Started';

export type MemberSubState =
  'New' | 'DBValidationSanity' | 'DBValidationFull' | 'Restoration' | 'PendingLearner' | 'Learner' | 'Follower' | 'Leader';

export type TransitionReason =
  // From DEP-04's reason table.
  | 'NewSingleNodeClusterCreated'
  | 'DetectedPreviousCleanExit'
  | 'DetectedPreviousUncleanExit'
  | 'DBValidationFailed'
  | 'DBValidationSucceeded'
  /** The seed prints "Initializing (Restoration)Succeeded", an evident substitution typo. */
  | 'RestorationSucceeded'
  | 'WaitingToJoinAsLearner'
  | 'JoinedAsLearner'
  | 'PromotedAsVotingMember'
  | 'GainedClusterLeadership'
  | 'LostClusterLeadership'
  // Ours, for transitions the table does not cover.
  /** nil → New for a member of a multi-node cluster (the sidecar cannot tell a fresh cluster from a scale-up). */
  | 'NewMultiNodeClusterCreated'
  /** Initializing → New: initialization failed; etcd-wrapper starts it again. */
  | 'InitializationFailed'
  /** Initializing → Started: a multi-node member without valid data bootstrapped a new cluster. */
  | 'BootstrappedNewCluster'
  /** New → Started: etcd was already running when this sidecar started (no initialization through it). */
  | 'DetectedRunningMember';

/** One entry of `status.transitions` (DEP-04 "Representing State Transitions"). */
export interface StateTransition {
  state: MemberState;
  subState: MemberSubState;
  reason: string;
  /** metav1.Time: RFC 3339, whole seconds, UTC. */
  transitionTime: string;
  message: string;
}

/** `status.snapshots.lastFull` / `lastDelta`. */
export interface SnapshotStatus {
  timestamp: string;
  /** The snapshot's object name, e.g. `Incr-00000011-00000020-1700000000.gz`. */
  name: string;
  /** Uncompressed size as a Kubernetes quantity; absent when this sidecar did not store the snapshot itself. */
  size?: string;
  startRevision: number;
  endRevision: number;
}

export interface SnapshotsStatus {
  lastFull?: SnapshotStatus;
  lastDelta?: SnapshotStatus;
  /** Uncompressed bytes of the deltas stored after `lastFull`, as a quantity. */
  accumulatedDeltaSize?: string;
}

/**
 * `status.lastRestoration`: the API block's `type`, `status`, `startTime`, `endTime` plus the prose's
 * `reason` and `message`. Only restorations from the object store happen here (single-node), so `type` is
 * always `FromSnapshot`; a multi-node member re-syncs from the leader as a learner, which DEP-04 calls
 * learning, not restoration.
 */
export interface RestorationStatus {
  type: 'FromSnapshot' | 'FromLeader';
  status: 'Failed' | 'Success' | 'In-Progress';
  reason: string;
  message: string;
  startTime: string;
  endTime?: string;
}

/**
 * `status.lastDefragmentation`, as the "Monitoring Defragmentations" section writes it: `status`
 * (Succeeded|Failed) and `message`; the API block's empty `reason:` line is taken to be that `status`.
 */
export interface DefragmentationStatus {
  startTime: string;
  endTime: string;
  status: 'Succeeded' | 'Failed';
  message: string;
  initialDBSize?: string;
  finalDBSize?: string;
}

/** The body of `EtcdMember.status` this member writes (JSON merge patch onto `/status`). */
export interface EtcdMemberStatusBody {
  /** etcd member ID, lower-case hex without padding (as in the member lease). */
  id?: string;
  clusterID?: string;
  peerTLSEnabled?: boolean;
  /** Kubernetes quantities, e.g. `6Gi` (the seed's example), canonical binary form. */
  dbSize?: string;
  dbSizeInUse?: string;
  snapshots?: SnapshotsStatus;
  lastRestoration?: RestorationStatus;
  lastDefragmentation?: DefragmentationStatus;
  transitions: StateTransition[];
}

/** The model behind the body: the body plus what the next transitions depend on. */
export interface MemberStatusModel {
  readonly status: EtcdMemberStatusBody;
  /** The `New` entry recorded at sidecar start; dropped once the EtcdMember shows an earlier history. */
  readonly startup: StateTransition | undefined;
  /** Between InitializationStarted and its success or failure. */
  readonly initializing: boolean;
  /** How `Initializing` ends once etcd reports its role (the reason of the transition into `Started`). */
  readonly pendingStart: { reason: TransitionReason; message: string } | undefined;
  /** Exact uncompressed bytes behind `snapshots.accumulatedDeltaSize`. */
  readonly accumulatedDeltaBytes: number;
  /** Whether the snapshots block the EtcdMember held was looked at already (it is taken over at most once). */
  readonly snapshotsAdopted: boolean;
}

/** Transitions kept in the status: the list grows with every restart, so only the newest ones stay. */
export const MAX_TRANSITIONS = 20;

export interface SnapshotFacts {
  kind: 'Full' | 'Incr';
  name: string;
  startRevision: number;
  endRevision: number;
  createdOn: Date;
  /** Uncompressed size of the stored file; undefined when unknown. */
  sizeBytes?: number;
}

export type MemberEvent =
  /**
   * What the EtcdMember already holds (read once before the first write): its transitions and its
   * snapshots block; any JSON, checked here.
   */
  | { type: 'HistoryLoaded'; at: Date; transitions: unknown; snapshots?: unknown }
  | { type: 'InitializationStarted'; at: Date; mode: 'full' | 'sanity' }
  | { type: 'DataDirValidated'; at: Date; valid: boolean; singleNode: boolean; detail: string }
  | { type: 'RestorationStarted'; at: Date; message: string }
  | { type: 'BootstrapDecided'; at: Date; action: BootstrapDecision['action']; reason: string }
  | { type: 'InitializationSucceeded'; at: Date; outcome: InitializationOutcome }
  | { type: 'InitializationFailed'; at: Date; message: string }
  /** One answer of etcd's Status (ids in hex), from the leadership watcher's periodic check. */
  | ({ type: 'EtcdStatusObserved'; at: Date } & EtcdMemberStatus)
  /** A snapshot this sidecar stored; `baseFull` is the full snapshot the snapshotter's chain builds on. */
  | { type: 'SnapshotStored'; at: Date; snapshot: SnapshotFacts; baseFull?: SnapshotFacts }
  /** A defragmentation the leading sidecar ran on some member; only this member's own is recorded. */
  | ({ type: 'MemberDefragmented'; at: Date } & Omit<MemberDefragmentation, 'name' | 'endpoint'>);

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** An event before it is stamped with the time it happened. */
export type MemberEventInput = DistributiveOmit<MemberEvent, 'at'>;
