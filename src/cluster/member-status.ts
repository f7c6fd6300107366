/**
 * What this member publishes in `EtcdMember.status` (etcd-druid proposal 04-etcd-member-custom-resource.md): a pure model that folds the
 * sidecar's observations (initialization steps, etcd's Status answers, stored snapshots, defragmentations)
 * into the status body etcd-druid reads. No I/O here; src/k8s/etcd-member-status.ts sends the body.
 *
 * Field names and shapes are the DEP-04 API block's. Where the seed is silent or contradicts itself, the
 * choices are written next to the type (and in docs/differences.md).
 */
import { EtcdbrError } from '../errors.js';
import type { Snapshot } from '@etcdbrctl/snapstore';
import type { BootstrapDecision } from '../initializer/bootstrap.js';
import type { InitializationOutcome, InitializationProgress } from '../initializer/initializer.js';
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

/** The model at sidecar start: state `New`. */
export function initialMemberStatus(opts: { at: Date; clusterSize: number; peerTLSEnabled: boolean }): MemberStatusModel {
  const single = opts.clusterSize <= 1;
  const startup: StateTransition = {
    state: 'New',
    subState: 'New',
    reason: single ? 'NewSingleNodeClusterCreated' : 'NewMultiNodeClusterCreated',
    transitionTime: formatKubeTime(opts.at),
    message: single ? 'Member of a single-node etcd cluster started' : 'Member of a multi-node etcd cluster started',
  };
  return {
    status: { peerTLSEnabled: opts.peerTLSEnabled, transitions: [startup] },
    startup,
    initializing: false,
    pendingStart: undefined,
    accumulatedDeltaBytes: 0,
    snapshotsAdopted: false,
  };
}

/** The state and sub-state the member is in now (the newest transition). */
export function currentState(model: MemberStatusModel): { state: MemberState; subState: MemberSubState } {
  const last = model.status.transitions.at(-1);
  return last ? { state: last.state, subState: last.subState } : { state: 'New', subState: 'New' };
}

/** Applies one event. Pure: returns a new model, never mutates `model`. */
export function reduceMemberStatus(model: MemberStatusModel, event: MemberEvent): MemberStatusModel {
  switch (event.type) {
    case 'HistoryLoaded':
      return adoptSnapshots(adoptHistory(model, parseTransitions(event.transitions)), parseSnapshots(event.snapshots));
    case 'InitializationStarted': {
      const sanity = event.mode === 'sanity';
      const next = { ...model, initializing: true, pendingStart: undefined };
      return transition(
        next,
        event.at,
        'Initializing',
        sanity ? 'DBValidationSanity' : 'DBValidationFull',
        sanity ? 'DetectedPreviousCleanExit' : 'DetectedPreviousUncleanExit',
        sanity ? 'Detected previous clean exit, sanity DB validation' : 'Detected previous unclean exit, requires full DB validation',
      );
    }
    case 'DataDirValidated':
      if (event.valid) return { ...model, pendingStart: { reason: 'DBValidationSucceeded', message: 'Data directory is valid' } };
      if (!event.singleNode) return model; // the bootstrap decision says what follows
      return transition(
        model,
        event.at,
        'Initializing',
        'Restoration',
        'DBValidationFailed',
        `Data directory is not valid (${event.detail}); restoring it from the backups`,
      );
    case 'RestorationStarted': {
      const next = withStatus(model, {
        lastRestoration: {
          type: 'FromSnapshot',
          status: 'In-Progress',
          reason: 'DBValidationFailed',
          message: event.message,
          startTime: formatKubeTime(event.at),
        },
      });
      return transition(next, event.at, 'Initializing', 'Restoration', 'DBValidationFailed', event.message);
    }
    case 'BootstrapDecided':
      return onDecision(model, event.at, event.action, event.reason);
    case 'InitializationSucceeded':
      return onInitialized(model, event.at, event.outcome);
    case 'InitializationFailed': {
      let next: MemberStatusModel = { ...model, initializing: false, pendingStart: undefined };
      const r = next.status.lastRestoration;
      if (r?.status === 'In-Progress') {
        next = withStatus(next, {
          lastRestoration: {
            ...r,
            status: 'Failed',
            reason: 'RestorationFailed',
            message: event.message,
            endTime: formatKubeTime(event.at),
          },
        });
      }
      return transition(next, event.at, 'New', 'New', 'InitializationFailed', event.message);
    }
    case 'EtcdStatusObserved':
      return onEtcdStatus(model, event);
    case 'SnapshotStored':
      return onSnapshot(model, event.snapshot, event.baseFull);
    case 'MemberDefragmented': {
      if (model.status.id === undefined || event.memberId !== model.status.id) return model;
      return withStatus(model, {
        lastDefragmentation: {
          startTime: formatKubeTime(event.startTime),
          endTime: formatKubeTime(event.endTime),
          status: event.succeeded ? 'Succeeded' : 'Failed',
          message: event.message,
          ...(event.initialDBSize !== undefined ? { initialDBSize: formatQuantity(event.initialDBSize) } : {}),
          ...(event.finalDBSize !== undefined ? { finalDBSize: formatQuantity(event.finalDBSize) } : {}),
        },
      });
    }
  }
}

/** The initializer's progress report as a model event. */
export function eventFromInitializationProgress(p: InitializationProgress): MemberEventInput {
  switch (p.step) {
    case 'validated':
      return {
        type: 'DataDirValidated',
        valid: p.valid,
        singleNode: p.clusterSize <= 1,
        detail: p.reason ? `${p.status}: ${p.reason}` : p.status,
      };
    case 'restoring':
      return {
        type: 'RestorationStarted',
        message: `Restoring from full snapshot ${p.base} and ${p.deltas} delta snapshot${p.deltas === 1 ? '' : 's'}`,
      };
    case 'decided':
      return { type: 'BootstrapDecided', action: p.decision.action, reason: p.decision.reason };
  }
}

/** A stored snapshot as the model records it. */
export function snapshotFacts(snap: Snapshot, sizeBytes?: number): SnapshotFacts {
  return {
    kind: snap.kind,
    name: snap.snapName,
    startRevision: snap.startRevision,
    endRevision: snap.lastRevision,
    createdOn: snap.createdOn,
    ...(sizeBytes !== undefined ? { sizeBytes } : {}),
  };
}

function onDecision(model: MemberStatusModel, at: Date, action: BootstrapDecision['action'], reason: string): MemberStatusModel {
  switch (action) {
    case 'start':
      return { ...model, pendingStart: { reason: 'DBValidationSucceeded', message: reason } };
    case 'bootstrap':
      return { ...model, pendingStart: { reason: 'BootstrappedNewCluster', message: reason } };
    case 'join-as-learner':
      return transition(
        model,
        at,
        'Starting',
        'PendingLearner',
        'WaitingToJoinAsLearner',
        `Waiting to join the cluster as a learner: ${reason}`,
      );
    case 'rejoin-as-learner': {
      // DEP-04: a voting member whose data failed validation is removed from the cluster and starts over as New.
      const renewed = transition(model, at, 'New', 'New', 'DBValidationFailed', reason);
      return transition(renewed, at, 'Starting', 'PendingLearner', 'WaitingToJoinAsLearner', 'Waiting to join the cluster as a learner');
    }
    case 'restore':
    case 'fail':
      return model;
  }
}

function onInitialized(model: MemberStatusModel, at: Date, outcome: InitializationOutcome): MemberStatusModel {
  const done: MemberStatusModel = { ...model, initializing: false };
  switch (outcome) {
    case 'valid':
      return { ...done, pendingStart: done.pendingStart ?? { reason: 'DBValidationSucceeded', message: 'Data directory is valid' } };
    case 'restored': {
      const r = done.status.lastRestoration;
      const next = r
        ? withStatus(done, {
            lastRestoration: {
              ...r,
              status: 'Success',
              reason: 'RestorationSucceeded',
              message: 'Restored from the backups',
              endTime: formatKubeTime(at),
            },
          })
        : done;
      return { ...next, pendingStart: { reason: 'RestorationSucceeded', message: 'Restored the data directory from the backups' } };
    }
    case 'empty-start':
      return {
        ...done,
        pendingStart: { reason: 'RestorationSucceeded', message: 'No backups to restore: etcd starts with an empty data directory' },
      };
    case 'bootstrap':
      return { ...done, pendingStart: done.pendingStart ?? { reason: 'BootstrappedNewCluster', message: 'Bootstrapping a new cluster' } };
    case 'joined-as-learner':
    case 'rejoined-as-learner':
      return transition(
        { ...done, pendingStart: undefined },
        at,
        'Starting',
        'Learner',
        'JoinedAsLearner',
        'Joined the cluster as a learner',
      );
  }
}

type Role = 'Learner' | 'Follower' | 'Leader';

function onEtcdStatus(model: MemberStatusModel, e: Extract<MemberEvent, { type: 'EtcdStatusObserved' }>): MemberStatusModel {
  let next = withStatus(model, {
    id: e.memberId,
    ...(e.clusterId !== undefined ? { clusterID: e.clusterId } : {}),
    dbSize: formatQuantity(e.dbSize),
    dbSizeInUse: formatQuantity(e.dbSizeInUse),
  });
  // While initialization runs, an answering etcd is not the one initialization prepares: no state change.
  if (next.initializing) return next;
  const role: Role = e.isLearner ? 'Learner' : e.memberId === e.leaderId ? 'Leader' : 'Follower';
  const { state, subState } = currentState(next);
  if (role === 'Learner') {
    if (state === 'Starting' && subState === 'Learner') return next;
    return transition(
      { ...next, pendingStart: undefined },
      e.at,
      'Starting',
      'Learner',
      'JoinedAsLearner',
      'Joined the cluster as a learner',
    );
  }
  switch (state) {
    case 'Initializing': {
      const pending = next.pendingStart ?? { reason: 'DBValidationSucceeded', message: 'Data directory is valid' };
      next = { ...next, pendingStart: undefined };
      return transition(next, e.at, 'Started', role, pending.reason, pending.message);
    }
    case 'New':
      return transition(
        next,
        e.at,
        'Started',
        role,
        'DetectedRunningMember',
        `etcd is running as ${role === 'Leader' ? 'the leader' : 'a follower'}`,
      );
    case 'Starting': {
      next = transition(next, e.at, 'Started', 'Follower', 'PromotedAsVotingMember', 'Now in sync with leader, promoted as voting member');
      return role === 'Leader' ? transition(next, e.at, 'Started', 'Leader', 'GainedClusterLeadership', 'Won the leader election') : next;
    }
    case 'Started':
      if (subState === role) return next;
      return role === 'Leader'
        ? transition(next, e.at, 'Started', 'Leader', 'GainedClusterLeadership', 'Won the leader election')
        : transition(next, e.at, 'Started', 'Follower', 'LostClusterLeadership', 'Another member leads the cluster');
  }
}

function onSnapshot(model: MemberStatusModel, snap: SnapshotFacts, baseFull: SnapshotFacts | undefined): MemberStatusModel {
  const current = model.status.snapshots ?? {};
  if (snap.kind === 'Full') {
    return {
      ...withStatus(model, { snapshots: { ...current, lastFull: snapshotStatus(snap), accumulatedDeltaSize: formatQuantity(0) } }),
      accumulatedDeltaBytes: 0,
    };
  }
  let lastFull = current.lastFull;
  let accumulated = model.accumulatedDeltaBytes;
  if (baseFull !== undefined && baseFull.name !== lastFull?.name) {
    // A chain this sidecar did not start (restart, another leader in between): count from this delta on.
    lastFull = snapshotStatus(baseFull);
    accumulated = 0;
  }
  accumulated += snap.sizeBytes ?? 0;
  return {
    ...withStatus(model, {
      snapshots: {
        ...(lastFull ? { lastFull } : {}),
        lastDelta: snapshotStatus(snap),
        accumulatedDeltaSize: formatQuantity(accumulated),
      },
    }),
    accumulatedDeltaBytes: accumulated,
  };
}

function snapshotStatus(s: SnapshotFacts): SnapshotStatus {
  return {
    timestamp: formatKubeTime(s.createdOn),
    name: s.name,
    ...(s.sizeBytes !== undefined ? { size: formatQuantity(s.sizeBytes) } : {}),
    startRevision: s.startRevision,
    endRevision: s.endRevision,
  };
}

/**
 * Puts what the EtcdMember already holds in front of our own transitions: the startup `New` goes (the
 * member is not new), entries we already have are not repeated, and a first own entry that only restates
 * where the history ended is dropped (or, for a leadership change, given the matching reason).
 */
function adoptHistory(model: MemberStatusModel, previous: StateTransition[]): MemberStatusModel {
  const key = (t: StateTransition): string => `${t.state}|${t.subState}|${t.reason}|${t.transitionTime}`;
  const known = new Set(model.status.transitions.map(key));
  const older = previous.filter((t) => !known.has(key(t)));
  if (older.length === 0) return model;
  let own = model.status.transitions.filter((t) => model.startup === undefined || key(t) !== key(model.startup));
  const last = older.at(-1) as StateTransition;
  const first = own[0];
  if (first !== undefined && first.reason === 'DetectedRunningMember' && last.state === 'Started') {
    if (first.subState === last.subState) own = own.slice(1);
    else {
      const gained = first.subState === 'Leader';
      own = [
        {
          ...first,
          reason: gained ? 'GainedClusterLeadership' : 'LostClusterLeadership',
          message: gained ? 'Won the leader election' : 'Another member leads the cluster',
        },
        ...own.slice(1),
      ];
    }
  }
  return {
    ...model,
    startup: undefined,
    status: { ...model.status, transitions: [...older, ...own].slice(-MAX_TRANSITIONS) },
  };
}

/**
 * Takes over the snapshots block an earlier sidecar published, so that after a restart the deltas added
 * to the same full keep counting from its `accumulatedDeltaSize` instead of from zero (the stored deltas
 * only show compressed sizes). Deltas this sidecar stored before the EtcdMember was read are added when
 * they build on that same full; once this sidecar stored a full itself, or the chain differs, its own
 * block stands. Looked at once only, so reading the EtcdMember again cannot count anything twice.
 */
function adoptSnapshots(model: MemberStatusModel, previous: PublishedSnapshots | undefined): MemberStatusModel {
  if (model.snapshotsAdopted) return model;
  const adopted = { ...model, snapshotsAdopted: true };
  if (previous === undefined) return adopted;
  const own = model.status.snapshots;
  if (own === undefined)
    return { ...withStatus(adopted, { snapshots: previous.snapshots }), accumulatedDeltaBytes: previous.accumulatedBytes };
  // A full this sidecar stored has its uncompressed size; one it only built deltas on has none.
  const onSameFull =
    own.lastFull !== undefined && own.lastFull.size === undefined && own.lastFull.name === previous.snapshots.lastFull?.name;
  if (!onSameFull) return adopted;
  const accumulated = previous.accumulatedBytes + model.accumulatedDeltaBytes;
  const lastDelta = own.lastDelta ?? previous.snapshots.lastDelta;
  return {
    ...withStatus(adopted, {
      snapshots: { ...previous.snapshots, ...(lastDelta ? { lastDelta } : {}), accumulatedDeltaSize: formatQuantity(accumulated) },
    }),
    accumulatedDeltaBytes: accumulated,
  };
}

/** A snapshots block read from the EtcdMember, with its accumulatedDeltaSize as bytes. */
export interface PublishedSnapshots {
  snapshots: SnapshotsStatus;
  accumulatedBytes: number;
}

/** A `status.snapshots` someone else may have written, when its lastFull and accumulatedDeltaSize are well-formed. */
export function parseSnapshots(value: unknown): PublishedSnapshots | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const v = value as Record<string, unknown>;
  const lastFull = parseSnapshotStatus(v.lastFull);
  const accumulatedBytes = typeof v.accumulatedDeltaSize === 'string' ? parseBinaryQuantity(v.accumulatedDeltaSize) : undefined;
  if (lastFull === undefined || accumulatedBytes === undefined) return undefined;
  const lastDelta = parseSnapshotStatus(v.lastDelta);
  return {
    snapshots: { lastFull, ...(lastDelta ? { lastDelta } : {}), accumulatedDeltaSize: formatQuantity(accumulatedBytes) },
    accumulatedBytes,
  };
}

function parseSnapshotStatus(value: unknown): SnapshotStatus | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const v = value as Record<string, unknown>;
  if (typeof v.name !== 'string' || typeof v.timestamp !== 'string') return undefined;
  if (!Number.isSafeInteger(v.startRevision) || !Number.isSafeInteger(v.endRevision)) return undefined;
  return {
    timestamp: v.timestamp,
    name: v.name,
    ...(typeof v.size === 'string' ? { size: v.size } : {}),
    startRevision: v.startRevision as number,
    endRevision: v.endRevision as number,
  };
}

/**
 * The byte count of a quantity in the form formatQuantity writes (digits, optionally one binary suffix);
 * undefined for anything else, such as decimal suffixes or fractions, which no sidecar writes here.
 */
export function parseBinaryQuantity(q: string): number | undefined {
  const m = /^(\d+)(Ki|Mi|Gi|Ti|Pi|Ei)?$/.exec(q);
  if (!m) return undefined;
  const power = m[2] === undefined ? 0 : BINARY_SUFFIXES.indexOf(m[2] as (typeof BINARY_SUFFIXES)[number]);
  const bytes = Number(m[1]) * 1024 ** power;
  return Number.isSafeInteger(bytes) ? bytes : undefined;
}

const STATES: ReadonlySet<string> = new Set(['New', 'Initializing', 'Starting', 'Started']);
const SUB_STATES: ReadonlySet<string> = new Set([
  'New',
  'DBValidationSanity',
  'DBValidationFull',
  'Restoration',
  'PendingLearner',
  'Learner',
  'Follower',
  'Leader',
]);

/** The well-formed entries of a `status.transitions` value someone else may have written; the rest is skipped. */
export function parseTransitions(value: unknown): StateTransition[] {
  if (!Array.isArray(value)) return [];
  const out: StateTransition[] = [];
  for (const v of value) {
    if (typeof v !== 'object' || v === null) continue;
    const t = v as Record<string, unknown>;
    if (typeof t.state !== 'string' || !STATES.has(t.state)) continue;
    if (typeof t.subState !== 'string' || !SUB_STATES.has(t.subState)) continue;
    if (typeof t.reason !== 'string' || typeof t.transitionTime !== 'string') continue;
    out.push({
      state: t.state as MemberState,
      subState: t.subState as MemberSubState,
      reason: t.reason,
      transitionTime: t.transitionTime,
      message: typeof t.message === 'string' ? t.message : '',
    });
  }
  return out;
}

function transition(
  model: MemberStatusModel,
  at: Date,
  state: MemberState,
  subState: MemberSubState,
  reason: TransitionReason,
  message: string,
): MemberStatusModel {
  const cur = currentState(model);
  if (cur.state === state && cur.subState === subState) return model;
  const entry: StateTransition = { state, subState, reason, transitionTime: formatKubeTime(at), message };
  return { ...model, status: { ...model.status, transitions: [...model.status.transitions, entry].slice(-MAX_TRANSITIONS) } };
}

function withStatus(model: MemberStatusModel, patch: Partial<EtcdMemberStatusBody>): MemberStatusModel {
  return { ...model, status: { ...model.status, ...patch } };
}

/** metav1.Time on the wire: RFC 3339 in UTC with whole seconds. */
export function formatKubeTime(d: Date): string {
  return `${d.toISOString().slice(0, 19)}Z`;
}

const BINARY_SUFFIXES = ['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'] as const;

/**
 * A byte count as a Kubernetes quantity in the canonical form resource.Quantity prints for binary sizes:
 * the largest power-of-1024 suffix that divides it exactly (`6442450944` → `6Gi`, `3072` → `3Ki`, `1536`
 * stays `1536`).
 */
export function formatQuantity(bytes: number): string {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new EtcdbrError('E_INTERNAL', `byte count ${bytes} is not a non-negative integer`);
  if (bytes < 1024) return String(bytes);
  let n = bytes;
  let i = 0;
  while (n % 1024 === 0 && i < BINARY_SUFFIXES.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n}${BINARY_SUFFIXES[i]}`;
}
