/** The EtcdMember status model (DEP-04): every state transition, snapshots, defragmentation, history. */
import { describe, expect, it } from 'vitest';
import { currentState, eventFromInitializationProgress, initialMemberStatus, reduceMemberStatus } from '../../src/cluster/member-status.js';
import {
  MAX_TRANSITIONS,
  type MemberEvent,
  type MemberEventInput,
  type MemberStatusModel,
  type StateTransition,
} from '../../src/cluster/member-status-types.js';
import { formatKubeTime, formatQuantity, parseBinaryQuantity, parseTransitions } from '../../src/cluster/member-status-wire.js';

const T0 = Date.parse('2026-05-06T07:00:00.000Z');
const at = (s: number): Date => new Date(T0 + s * 1000);
const time = (s: number): string => formatKubeTime(at(s));

const ME = '8e9e05c52164694d';
const OTHER = 'a1b2c3';
const CLUSTER = 'cdf818194e3a8c32';

function start(clusterSize = 1): MemberStatusModel {
  return initialMemberStatus({ at: at(0), clusterSize, peerTLSEnabled: false });
}

/** Applies events one second apart, starting at second 1. */
function run(model: MemberStatusModel, ...events: MemberEventInput[]): MemberStatusModel {
  return events.reduce((m, e, i) => reduceMemberStatus(m, { ...e, at: at(i + 1) } as MemberEvent), model);
}

function etcd(role: 'Leader' | 'Follower' | 'Learner', dbSize = 0, dbSizeInUse = 0): MemberEventInput {
  return {
    type: 'EtcdStatusObserved',
    memberId: ME,
    clusterId: CLUSTER,
    leaderId: role === 'Leader' ? ME : OTHER,
    isLearner: role === 'Learner',
    dbSize,
    dbSizeInUse,
  };
}

const states = (m: MemberStatusModel): string[] => m.status.transitions.map((t) => `${t.state}/${t.subState}:${t.reason}`);

describe('initial state', () => {
  it('a member of a single-node cluster starts New with NewSingleNodeClusterCreated', () => {
    const m = initialMemberStatus({ at: new Date('2026-05-06T07:00:00.789Z'), clusterSize: 1, peerTLSEnabled: true });
    expect(m.status).toEqual({
      peerTLSEnabled: true,
      transitions: [
        {
          state: 'New',
          subState: 'New',
          reason: 'NewSingleNodeClusterCreated',
          transitionTime: '2026-05-06T07:00:00Z',
          message: 'Member of a single-node etcd cluster started',
        },
      ],
    });
    expect(currentState(m)).toEqual({ state: 'New', subState: 'New' });
  });

  it('a member of a multi-node cluster starts New with NewMultiNodeClusterCreated', () => {
    expect(states(start(3))).toEqual(['New/New:NewMultiNodeClusterCreated']);
  });
});

describe('single-node initialization', () => {
  it('sanity validation of a valid data dir, then etcd leads: Initializing(DBValidationSanity) → Started(Leader)', () => {
    let m = run(start(), { type: 'InitializationStarted', mode: 'sanity' });
    expect(currentState(m)).toEqual({ state: 'Initializing', subState: 'DBValidationSanity' });
    expect(m.status.transitions.at(-1)).toEqual({
      state: 'Initializing',
      subState: 'DBValidationSanity',
      reason: 'DetectedPreviousCleanExit',
      transitionTime: time(1),
      message: 'Detected previous clean exit, sanity DB validation',
    });
    m = run(
      m,
      { type: 'DataDirValidated', valid: true, singleNode: true, detail: 'DataDirectoryValid' },
      { type: 'InitializationSucceeded', outcome: 'valid' },
    );
    expect(currentState(m).state).toBe('Initializing');
    m = run(m, etcd('Leader', 6 * 2 ** 30, 3.5 * 2 ** 30));
    expect(states(m)).toEqual([
      'New/New:NewSingleNodeClusterCreated',
      'Initializing/DBValidationSanity:DetectedPreviousCleanExit',
      'Started/Leader:DBValidationSucceeded',
    ]);
    expect(m.status).toMatchObject({ id: ME, clusterID: CLUSTER, dbSize: '6Gi', dbSizeInUse: '3584Mi' });
  });

  it('full validation after an unclean exit: Initializing(DBValidationFull) with DetectedPreviousUncleanExit', () => {
    const m = run(start(), { type: 'InitializationStarted', mode: 'full' });
    expect(m.status.transitions.at(-1)).toMatchObject({
      state: 'Initializing',
      subState: 'DBValidationFull',
      reason: 'DetectedPreviousUncleanExit',
      message: 'Detected previous unclean exit, requires full DB validation',
    });
  });

  it('invalid data restored from the backups: Restoration, lastRestoration In-Progress → Success, Started(Leader) RestorationSucceeded', () => {
    let m = run(
      start(),
      { type: 'InitializationStarted', mode: 'full' },
      { type: 'DataDirValidated', valid: false, singleNode: true, detail: 'DataDirectoryCorrupt: bad page' },
      { type: 'RestorationStarted', message: 'Restoring from full snapshot Full-00000000-00000010-1 and 2 delta snapshots' },
    );
    expect(m.status.transitions.at(-1)).toMatchObject({
      state: 'Initializing',
      subState: 'Restoration',
      reason: 'DBValidationFailed',
      transitionTime: time(2),
      message: 'Data directory is not valid (DataDirectoryCorrupt: bad page); restoring it from the backups',
    });
    expect(m.status.lastRestoration).toEqual({
      type: 'FromSnapshot',
      status: 'In-Progress',
      reason: 'DBValidationFailed',
      message: 'Restoring from full snapshot Full-00000000-00000010-1 and 2 delta snapshots',
      startTime: time(3),
    });
    m = run(m, { type: 'InitializationSucceeded', outcome: 'restored' });
    expect(m.status.lastRestoration).toMatchObject({
      status: 'Success',
      reason: 'RestorationSucceeded',
      startTime: time(3),
      endTime: time(1),
    });
    m = run(m, etcd('Leader'));
    expect(states(m).slice(1)).toEqual([
      'Initializing/DBValidationFull:DetectedPreviousUncleanExit',
      'Initializing/Restoration:DBValidationFailed',
      'Started/Leader:RestorationSucceeded',
    ]);
  });

  it('a restoration that fails records Failed and goes back to New; the next initialization starts from New', () => {
    let m = run(
      start(),
      { type: 'InitializationStarted', mode: 'full' },
      { type: 'DataDirValidated', valid: false, singleNode: true, detail: 'DataDirectoryNotExist' },
      { type: 'RestorationStarted', message: 'Restoring' },
      { type: 'InitializationFailed', message: 'fetch of Incr-00000011-00000020-2 failed: connection reset' },
    );
    expect(m.status.lastRestoration).toEqual({
      type: 'FromSnapshot',
      status: 'Failed',
      reason: 'RestorationFailed',
      message: 'fetch of Incr-00000011-00000020-2 failed: connection reset',
      startTime: time(3),
      endTime: time(4),
    });
    expect(m.status.transitions.at(-1)).toMatchObject({ state: 'New', subState: 'New', reason: 'InitializationFailed' });
    m = run(m, { type: 'InitializationStarted', mode: 'full' });
    expect(currentState(m)).toEqual({ state: 'Initializing', subState: 'DBValidationFull' });
  });

  it('a failure without a restoration leaves lastRestoration alone', () => {
    const m = run(start(), { type: 'InitializationStarted', mode: 'sanity' }, { type: 'InitializationFailed', message: 'wrong volume' });
    expect(m.status.lastRestoration).toBeUndefined();
    expect(states(m).at(-1)).toBe('New/New:InitializationFailed');
  });

  it('no backups to restore: Restoration, no lastRestoration, Started(Leader) with RestorationSucceeded and a message saying so', () => {
    const m = run(
      start(),
      { type: 'InitializationStarted', mode: 'full' },
      { type: 'DataDirValidated', valid: false, singleNode: true, detail: 'DataDirectoryNotExist' },
      { type: 'InitializationSucceeded', outcome: 'empty-start' },
      etcd('Leader'),
    );
    expect(m.status.lastRestoration).toBeUndefined();
    expect(m.status.transitions.at(-1)).toMatchObject({
      state: 'Started',
      subState: 'Leader',
      reason: 'RestorationSucceeded',
      message: 'No backups to restore: etcd starts with an empty data directory',
    });
  });

  it('while initialization runs, etcd answers update ids and sizes but not the state', () => {
    const m = run(start(), { type: 'InitializationStarted', mode: 'sanity' }, etcd('Leader', 4096, 2048));
    expect(currentState(m)).toEqual({ state: 'Initializing', subState: 'DBValidationSanity' });
    expect(m.status).toMatchObject({ id: ME, clusterID: CLUSTER, dbSize: '4Ki', dbSizeInUse: '2Ki' });
  });
});

describe('multi-node members', () => {
  it('scale-up: PendingLearner → Learner → Started(Follower) → Leader → Follower', () => {
    const m = run(
      start(3),
      { type: 'InitializationStarted', mode: 'full' },
      { type: 'DataDirValidated', valid: false, singleNode: false, detail: 'DataDirectoryNotExist' },
      { type: 'BootstrapDecided', action: 'join-as-learner', reason: 'not a member of the running cluster' },
      { type: 'InitializationSucceeded', outcome: 'joined-as-learner' },
      etcd('Learner'),
      etcd('Learner'),
      etcd('Follower'),
      etcd('Leader'),
      etcd('Follower'),
    );
    expect(states(m)).toEqual([
      'New/New:NewMultiNodeClusterCreated',
      'Initializing/DBValidationFull:DetectedPreviousUncleanExit',
      'Starting/PendingLearner:WaitingToJoinAsLearner',
      'Starting/Learner:JoinedAsLearner',
      'Started/Follower:PromotedAsVotingMember',
      'Started/Leader:GainedClusterLeadership',
      'Started/Follower:LostClusterLeadership',
    ]);
    expect(m.status.transitions[2]?.message).toBe('Waiting to join the cluster as a learner: not a member of the running cluster');
  });

  it('re-join after failed validation: New (DBValidationFailed) then PendingLearner, as DEP-04 draws the restart flow', () => {
    const m = run(
      start(3),
      { type: 'InitializationStarted', mode: 'full' },
      { type: 'DataDirValidated', valid: false, singleNode: false, detail: 'BoltDBCorrupt' },
      { type: 'BootstrapDecided', action: 'rejoin-as-learner', reason: 'data dir is corrupt: removing member and re-adding it' },
      { type: 'InitializationSucceeded', outcome: 'rejoined-as-learner' },
    );
    expect(states(m).slice(1)).toEqual([
      'Initializing/DBValidationFull:DetectedPreviousUncleanExit',
      'New/New:DBValidationFailed',
      'Starting/PendingLearner:WaitingToJoinAsLearner',
      'Starting/Learner:JoinedAsLearner',
    ]);
    expect(m.status.transitions[2]?.message).toBe('data dir is corrupt: removing member and re-adding it');
  });

  it('restart of a voting member with valid data: Started(Follower) with DBValidationSucceeded', () => {
    const m = run(
      start(3),
      { type: 'InitializationStarted', mode: 'sanity' },
      { type: 'DataDirValidated', valid: true, singleNode: false, detail: 'DataDirectoryValid' },
      { type: 'BootstrapDecided', action: 'start', reason: 'valid data of a current member' },
      { type: 'InitializationSucceeded', outcome: 'valid' },
      etcd('Follower'),
    );
    expect(m.status.transitions.at(-1)).toMatchObject({
      state: 'Started',
      subState: 'Follower',
      reason: 'DBValidationSucceeded',
      message: 'valid data of a current member',
    });
  });

  it('a fresh multi-node bootstrap: Started with BootstrappedNewCluster', () => {
    const m = run(
      start(3),
      { type: 'InitializationStarted', mode: 'full' },
      { type: 'DataDirValidated', valid: false, singleNode: false, detail: 'DataDirectoryNotExist' },
      { type: 'BootstrapDecided', action: 'bootstrap', reason: 'new cluster' },
      { type: 'InitializationSucceeded', outcome: 'bootstrap' },
      etcd('Leader'),
    );
    expect(states(m).slice(1)).toEqual([
      'Initializing/DBValidationFull:DetectedPreviousUncleanExit',
      'Started/Leader:BootstrappedNewCluster',
    ]);
  });

  it('decisions that do not change the state (restore, fail) leave it alone', () => {
    const base = run(start(3), { type: 'InitializationStarted', mode: 'full' });
    for (const action of ['restore', 'fail'] as const) {
      expect(run(base, { type: 'BootstrapDecided', action, reason: 'x' }).status).toEqual(base.status);
    }
  });

  it('a learner that becomes leader before we look again passes through Follower', () => {
    const m = run(start(3), etcd('Learner'), etcd('Leader'));
    expect(states(m).slice(1)).toEqual([
      'Starting/Learner:JoinedAsLearner',
      'Started/Follower:PromotedAsVotingMember',
      'Started/Leader:GainedClusterLeadership',
    ]);
  });

  it('PendingLearner seen directly as a voting member is promoted', () => {
    const m = run(start(3), { type: 'BootstrapDecided', action: 'join-as-learner', reason: 'r' }, etcd('Follower'));
    expect(states(m).at(-1)).toBe('Started/Follower:PromotedAsVotingMember');
  });

  it('a voting member seen as a learner again (re-added) goes back to Starting(Learner)', () => {
    const m = run(start(3), etcd('Follower'), etcd('Learner'));
    expect(states(m).at(-1)).toBe('Starting/Learner:JoinedAsLearner');
  });
});

describe('etcd already running when the sidecar starts (no initialization through it)', () => {
  it('New → Started(Leader) / Started(Follower) with DetectedRunningMember; repeated answers add nothing', () => {
    expect(states(run(start(), etcd('Leader'), etcd('Leader')))).toEqual([
      'New/New:NewSingleNodeClusterCreated',
      'Started/Leader:DetectedRunningMember',
    ]);
    expect(states(run(start(3), etcd('Follower'))).at(-1)).toBe('Started/Follower:DetectedRunningMember');
  });

  it('Initializing without a recorded outcome ends with DBValidationSucceeded when etcd answers', () => {
    // e.g. the outcome event was lost; the state must still move on once etcd runs.
    const m = run(start(), { type: 'InitializationStarted', mode: 'sanity' });
    const done = reduceMemberStatus({ ...m, initializing: false }, { ...etcd('Follower'), at: at(5) } as MemberEvent);
    expect(states(done).at(-1)).toBe('Started/Follower:DBValidationSucceeded');
  });
});

describe('snapshots', () => {
  const full = (rev: number, size?: number) => ({
    kind: 'Full' as const,
    name: `Full-00000000-${String(rev).padStart(8, '0')}-1778050800.gz`,
    startRevision: 0,
    endRevision: rev,
    createdOn: new Date('2026-05-06T07:00:00.500Z'),
    ...(size !== undefined ? { sizeBytes: size } : {}),
  });
  const delta = (from: number, to: number, size: number) => ({
    kind: 'Incr' as const,
    name: `Incr-${String(from).padStart(8, '0')}-${String(to).padStart(8, '0')}-1778050810.gz`,
    startRevision: from,
    endRevision: to,
    createdOn: new Date('2026-05-06T07:00:10Z'),
    sizeBytes: size,
  });

  it('a full snapshot sets lastFull (uncompressed size as a quantity) and resets accumulatedDeltaSize', () => {
    const m = run(start(), { type: 'SnapshotStored', snapshot: full(10, 20480) });
    expect(m.status.snapshots).toEqual({
      lastFull: {
        timestamp: '2026-05-06T07:00:00Z',
        name: 'Full-00000000-00000010-1778050800.gz',
        size: '20Ki',
        startRevision: 0,
        endRevision: 10,
      },
      accumulatedDeltaSize: '0',
    });
  });

  it('deltas set lastDelta and add up; the next full resets the sum and keeps lastDelta', () => {
    const f = full(10, 20480);
    let m = run(
      start(),
      { type: 'SnapshotStored', snapshot: f },
      { type: 'SnapshotStored', snapshot: delta(11, 20, 1000), baseFull: f },
      { type: 'SnapshotStored', snapshot: delta(21, 25, 48), baseFull: f },
    );
    expect(m.status.snapshots).toEqual({
      lastFull: expect.objectContaining({ name: f.name, size: '20Ki' }),
      lastDelta: {
        timestamp: '2026-05-06T07:00:10Z',
        name: 'Incr-00000021-00000025-1778050810.gz',
        size: '48',
        startRevision: 21,
        endRevision: 25,
      },
      accumulatedDeltaSize: '1048',
    });
    m = run(m, { type: 'SnapshotStored', snapshot: full(25, 4096) });
    expect(m.status.snapshots?.accumulatedDeltaSize).toBe('0');
    expect(m.status.snapshots?.lastFull?.endRevision).toBe(25);
    expect(m.status.snapshots?.lastDelta?.endRevision).toBe(25);
  });

  it('a delta on a chain whose full this sidecar did not store: lastFull from the chain (no size), the sum starts anew', () => {
    const listed = full(100);
    const m = run(
      start(),
      { type: 'SnapshotStored', snapshot: full(10, 2048) },
      { type: 'SnapshotStored', snapshot: delta(101, 120, 3072), baseFull: listed },
    );
    expect(m.status.snapshots?.lastFull).toEqual({
      timestamp: '2026-05-06T07:00:00Z',
      name: listed.name,
      startRevision: 0,
      endRevision: 100,
    });
    expect(m.status.snapshots?.accumulatedDeltaSize).toBe('3Ki');
  });

  it('after a restart, deltas on the same full go on from the accumulatedDeltaSize the EtcdMember holds', () => {
    const f = full(10, 20480);
    const before = run(
      start(),
      { type: 'SnapshotStored', snapshot: f },
      { type: 'SnapshotStored', snapshot: delta(11, 20, 2048), baseFull: f },
    ).status.snapshots;
    const restarted = run(start(), { type: 'HistoryLoaded', transitions: [], snapshots: JSON.parse(JSON.stringify(before)) as unknown });
    expect(restarted.status.snapshots).toEqual(before);
    const listed = full(10); // the full as the snapshotter lists it after the restart: no uncompressed size
    const m = run(restarted, { type: 'SnapshotStored', snapshot: delta(21, 30, 1024), baseFull: listed });
    expect(m.status.snapshots?.accumulatedDeltaSize).toBe('3Ki');
    expect(m.status.snapshots?.lastFull).toEqual(before?.lastFull);
    // A delta on a newer full than the one published starts the sum anew.
    const newer = full(40);
    const other = run(restarted, { type: 'SnapshotStored', snapshot: delta(41, 50, 100), baseFull: newer });
    expect(other.status.snapshots?.accumulatedDeltaSize).toBe('100');
    expect(other.status.snapshots?.lastFull?.name).toBe(newer.name);
  });

  it('a published snapshots block is taken over only when well-formed, and never over what this sidecar stored', () => {
    const f = full(10, 4096);
    const published = {
      lastFull: { timestamp: '2026-05-06T07:00:00Z', name: f.name, startRevision: 0, endRevision: 10 },
      accumulatedDeltaSize: '2Mi',
    };
    for (const bad of [
      undefined,
      'x',
      { ...published, accumulatedDeltaSize: '1.5Gi' },
      { ...published, accumulatedDeltaSize: '2M' },
      { ...published, lastFull: { name: 7 } },
    ]) {
      expect(run(start(), { type: 'HistoryLoaded', transitions: [], snapshots: bad }).status.snapshots).toBeUndefined();
    }
    expect(run(start(), { type: 'HistoryLoaded', transitions: [], snapshots: published }).accumulatedDeltaBytes).toBe(2 * 1024 * 1024);
    const own = run(
      start(),
      { type: 'SnapshotStored', snapshot: full(12, 1024) },
      { type: 'HistoryLoaded', transitions: [], snapshots: published },
    );
    expect(own.status.snapshots?.lastFull?.endRevision).toBe(12);
    expect(own.accumulatedDeltaBytes).toBe(0);
  });

  it('deltas stored before the EtcdMember was read add to its sum when they build on its full, once', () => {
    const published = {
      lastFull: { timestamp: '2026-05-06T07:00:00Z', name: full(10).name, size: '4Ki', startRevision: 0, endRevision: 10 },
      lastDelta: { timestamp: '2026-05-06T07:00:00Z', name: delta(11, 15, 1).name, startRevision: 11, endRevision: 15 },
      accumulatedDeltaSize: '1Ki',
    };
    const early = run(start(), { type: 'SnapshotStored', snapshot: delta(16, 20, 1024), baseFull: full(10) });
    const loaded = run(early, { type: 'HistoryLoaded', transitions: [], snapshots: published });
    expect(loaded.status.snapshots).toEqual({
      lastFull: published.lastFull,
      lastDelta: expect.objectContaining({ startRevision: 16, endRevision: 20 }),
      accumulatedDeltaSize: '2Ki',
    });
    const again = run(loaded, { type: 'HistoryLoaded', transitions: [], snapshots: loaded.status.snapshots });
    expect(again.status.snapshots?.accumulatedDeltaSize).toBe('2Ki');
    // On another full the sidecar's own count stands.
    const elsewhere = run(
      start(),
      { type: 'SnapshotStored', snapshot: delta(31, 40, 10), baseFull: full(30) },
      { type: 'HistoryLoaded', transitions: [], snapshots: published },
    );
    expect(elsewhere.status.snapshots?.accumulatedDeltaSize).toBe('10');
    expect(elsewhere.status.snapshots?.lastFull?.endRevision).toBe(30);
  });

  it('a delta with no full anywhere (empty store) still counts', () => {
    const m = run(start(), { type: 'SnapshotStored', snapshot: delta(1, 5, 10) });
    expect(m.status.snapshots).toEqual({ lastDelta: expect.objectContaining({ endRevision: 5 }), accumulatedDeltaSize: '10' });
  });
});

describe('defragmentation', () => {
  const defrag = (memberId: string, succeeded: boolean): MemberEventInput => ({
    type: 'MemberDefragmented',
    memberId,
    startTime: at(100),
    endTime: at(103),
    succeeded,
    message: succeeded ? 'Defragmentation succeeded' : 'Defragmentation failed: deadline exceeded',
    initialDBSize: 8 * 2 ** 20,
    ...(succeeded ? { finalDBSize: 2 * 2 ** 20 } : {}),
  });

  it('records only this member’s own, once its id is known', () => {
    expect(run(start(), defrag(ME, true)).status.lastDefragmentation).toBeUndefined();
    const known = run(start(), etcd('Leader'));
    expect(run(known, defrag(OTHER, true)).status.lastDefragmentation).toBeUndefined();
    expect(run(known, defrag(ME, true)).status.lastDefragmentation).toEqual({
      startTime: time(100),
      endTime: time(103),
      status: 'Succeeded',
      message: 'Defragmentation succeeded',
      initialDBSize: '8Mi',
      finalDBSize: '2Mi',
    });
    expect(run(known, defrag(ME, false)).status.lastDefragmentation).toEqual({
      startTime: time(100),
      endTime: time(103),
      status: 'Failed',
      message: 'Defragmentation failed: deadline exceeded',
      initialDBSize: '8Mi',
    });
  });
});

describe('history already in the EtcdMember', () => {
  const previous: StateTransition[] = [
    { state: 'New', subState: 'New', reason: 'NewSingleNodeClusterCreated', transitionTime: '2026-05-01T00:00:00Z', message: '' },
    {
      state: 'Initializing',
      subState: 'DBValidationFull',
      reason: 'DetectedPreviousUncleanExit',
      transitionTime: '2026-05-01T00:00:01Z',
      message: '',
    },
    { state: 'Started', subState: 'Leader', reason: 'DBValidationSucceeded', transitionTime: '2026-05-01T00:00:05Z', message: '' },
  ];

  it('none: our own history (with New) stays', () => {
    const m = run(start(), { type: 'HistoryLoaded', transitions: undefined }, { type: 'HistoryLoaded', transitions: [] });
    expect(states(m)).toEqual(['New/New:NewSingleNodeClusterCreated']);
  });

  it('a restart: the history goes first, our New is dropped, the restart continues from Started(Leader)', () => {
    const m = run(start(), { type: 'HistoryLoaded', transitions: previous }, { type: 'InitializationStarted', mode: 'sanity' });
    expect(states(m)).toEqual([
      'New/New:NewSingleNodeClusterCreated',
      'Initializing/DBValidationFull:DetectedPreviousUncleanExit',
      'Started/Leader:DBValidationSucceeded',
      'Initializing/DBValidationSanity:DetectedPreviousCleanExit',
    ]);
    expect(m.status.transitions[0]?.transitionTime).toBe('2026-05-01T00:00:00Z');
  });

  it('read after our first entries: loading the same history again changes nothing', () => {
    const once = run(start(), { type: 'InitializationStarted', mode: 'full' }, { type: 'HistoryLoaded', transitions: previous });
    expect(states(once).slice(-1)).toEqual(['Initializing/DBValidationFull:DetectedPreviousUncleanExit']);
    expect(once.status.transitions).toHaveLength(4);
    const twice = run(once, { type: 'HistoryLoaded', transitions: [...previous, ...once.status.transitions.slice(3)] });
    expect(twice.status.transitions).toEqual(once.status.transitions);
  });

  it('a sidecar-only restart: etcd still leads, so nothing is added; a changed role gets the leadership reason', () => {
    const same = run(start(), etcd('Leader'), { type: 'HistoryLoaded', transitions: previous });
    expect(same.status.transitions).toEqual(previous);
    const followerBefore = [...previous.slice(0, 2), { ...previous[2]!, subState: 'Follower' as const }];
    const changed = run(start(), etcd('Leader'), { type: 'HistoryLoaded', transitions: followerBefore });
    expect(states(changed).at(-1)).toBe('Started/Leader:GainedClusterLeadership');
    const lost = run(start(), etcd('Follower'), { type: 'HistoryLoaded', transitions: previous });
    expect(states(lost).at(-1)).toBe('Started/Follower:LostClusterLeadership');
  });

  it('skips malformed entries and keeps only the newest MAX_TRANSITIONS', () => {
    expect(parseTransitions('x')).toEqual([]);
    expect(
      parseTransitions([
        null,
        { state: 'Bogus', subState: 'New', reason: 'r', transitionTime: 't' },
        { state: 'New', subState: 'Nope', reason: 'r', transitionTime: 't' },
        { state: 'New', subState: 'New', reason: 1, transitionTime: 't' },
        { state: 'New', subState: 'New', reason: 'r', transitionTime: 't' },
      ]),
    ).toEqual([{ state: 'New', subState: 'New', reason: 'r', transitionTime: 't', message: '' }]);
    const long = Array.from({ length: 30 }, (_, i): StateTransition => ({
      state: 'Started',
      subState: i % 2 === 0 ? 'Leader' : 'Follower',
      reason: 'GainedClusterLeadership',
      transitionTime: `2026-05-01T00:00:${String(i).padStart(2, '0')}Z`,
      message: '',
    }));
    const m = run(start(), { type: 'HistoryLoaded', transitions: long }, { type: 'InitializationStarted', mode: 'sanity' });
    expect(m.status.transitions).toHaveLength(MAX_TRANSITIONS);
    expect(states(m).at(-1)).toBe('Initializing/DBValidationSanity:DetectedPreviousCleanExit');
    expect(m.status.transitions[0]?.transitionTime).toBe('2026-05-01T00:00:11Z');
  });
});

describe('pure', () => {
  it('never changes the model it is given', () => {
    const m = run(start(), { type: 'InitializationStarted', mode: 'full' });
    const copy = structuredClone(m);
    run(m, etcd('Leader', 10, 5), { type: 'InitializationFailed', message: 'x' }, { type: 'HistoryLoaded', transitions: [] });
    expect(m).toEqual(copy);
  });
});

describe('initializer progress as events', () => {
  it('maps validated, restoring and decided', () => {
    expect(
      eventFromInitializationProgress({ step: 'validated', valid: false, status: 'BoltDBCorrupt', reason: 'page 3', clusterSize: 1 }),
    ).toEqual({
      type: 'DataDirValidated',
      valid: false,
      singleNode: true,
      detail: 'BoltDBCorrupt: page 3',
    });
    expect(eventFromInitializationProgress({ step: 'validated', valid: true, status: 'DataDirectoryValid', clusterSize: 3 })).toEqual({
      type: 'DataDirValidated',
      valid: true,
      singleNode: false,
      detail: 'DataDirectoryValid',
    });
    expect(eventFromInitializationProgress({ step: 'restoring', base: 'Full-1', deltas: 1 })).toEqual({
      type: 'RestorationStarted',
      message: 'Restoring from full snapshot Full-1 and 1 delta snapshot',
    });
    expect(eventFromInitializationProgress({ step: 'decided', decision: { action: 'join-as-learner', reason: 'r' } })).toEqual({
      type: 'BootstrapDecided',
      action: 'join-as-learner',
      reason: 'r',
    });
  });
});

describe('formats', () => {
  it.each([
    [0, '0'],
    [1023, '1023'],
    [1024, '1Ki'],
    [1536, '1536'],
    [3072, '3Ki'],
    [6 * 2 ** 30, '6Gi'],
    [3.5 * 2 ** 30, '3584Mi'],
    [2 ** 50, '1Pi'],
  ])('quantity of %d bytes is %s, and reads back', (bytes, q) => {
    expect(formatQuantity(bytes)).toBe(q);
    expect(parseBinaryQuantity(q)).toBe(bytes);
  });

  it('reads back only the forms it writes', () => {
    for (const q of ['', '1.5Gi', '2M', '1e3', '-1', '1Ki ', '1ki', '99999999999999999Ei'])
      expect(parseBinaryQuantity(q), q).toBeUndefined();
  });

  it('refuses a negative or fractional byte count', () => {
    expect(() => formatQuantity(-1)).toThrow(/not a non-negative integer/);
    expect(() => formatQuantity(1.5)).toThrow(/not a non-negative integer/);
  });

  it('times are metav1.Time: whole seconds, UTC', () => {
    expect(formatKubeTime(new Date('2026-05-06T07:08:09.999Z'))).toBe('2026-05-06T07:08:09Z');
  });
});
