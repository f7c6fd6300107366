/**
 * What this member publishes in `EtcdMember.status` (etcd-druid proposal 04-etcd-member-custom-resource.md): a pure model that folds the
 * sidecar's observations (initialization steps, etcd's Status answers, stored snapshots, defragmentations)
 * into the status body etcd-druid reads. No I/O here; src/k8s/etcd-member-status.ts sends the body.
 *
 * Field names and shapes are the DEP-04 API block's. Where the seed is silent or contradicts itself, the
 * choices are written next to the type (and in docs/differences.md).
 */
import type { Snapshot } from '@etcdbrctl/snapstore';
import type { BootstrapDecision } from '../initializer/bootstrap.js';
import type { InitializationOutcome, InitializationProgress } from '../initializer/initializer.js';
import {
  MAX_TRANSITIONS,
  type EtcdMemberStatusBody,
  type MemberEvent,
  type MemberEventInput,
  type MemberState,
  type MemberStatusModel,
  type MemberSubState,
  type SnapshotFacts,
  type SnapshotStatus,
  type StateTransition,
  type TransitionReason,
} from './member-status-types.js';
import { formatKubeTime, formatQuantity, parseSnapshots, parseTransitions, type PublishedSnapshots } from './member-status-wire.js';

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
