import { describe, expect, it } from 'vitest';
import { decideBootstrap, type BootstrapInput, type ClusterObservation, type ObservedMember } from '../../src/initializer/bootstrap.js';
import { DataDirStatus } from '../../src/initializer/validation-status.js';

/**
 * The bootstrap decision as a table. Each row names the multi-node proposal's case (etcd-druid
 * docs/proposals/01-multi-node-etcd-clusters.md) or the upstream behaviour it mirrors; where the proposal, upstream and we differ,
 * the row's comment says which one we follow and why.
 */

const CLUSTER = 'c1a55e7';
const peer = (i: number) => `https://etcd-main-${i}.etcd-main-peer.ns.svc:2380`;
const client = (i: number) => `https://etcd-main-${i}.etcd-main-peer.ns.svc:2379`;
const member = (i: number, over: Partial<ObservedMember> = {}): ObservedMember => ({
  id: `a${i}`,
  name: `etcd-main-${i}`,
  peerUrls: [peer(i)],
  clientUrls: [client(i)],
  isLearner: false,
  ...over,
});
const quorate = (...members: ObservedMember[]): ClusterObservation => ({ kind: 'quorate', clusterId: CLUSTER, members });
const unreachable: ClusterObservation = { kind: 'unreachable', reason: 'no etcd endpoint answered' };
const VALID = { status: DataDirStatus.DataDirectoryValid };
const NOT_EXIST = { status: DataDirStatus.DataDirectoryNotExist, reason: 'directory does not exist' };
const CORRUPT = { status: DataDirStatus.DataDirectoryCorrupt, reason: 'invalid wal files' };
const INVALID_MULTI = { status: DataDirStatus.DataDirStatusInvalidInMultiNode, reason: 'data dir invalid with backups' };
const OWN_WAL = { memberId: 'a2', clusterId: CLUSTER };

/** Member etcd-main-2 of a 3-member cluster; each row overrides what it observes. */
function input(over: Partial<BootstrapInput>): BootstrapInput {
  return {
    clusterSize: 3,
    memberName: 'etcd-main-2',
    inInitialCluster: true,
    peerUrls: [peer(2)],
    cluster: unreachable,
    dataDir: NOT_EXIST,
    backupsExist: false,
    ...over,
  };
}

interface Row {
  name: string;
  in: BootstrapInput;
  action: string;
  code?: string;
  removeMemberId?: string;
}

const rows: Row[] = [
  // --- the eight cases of the proposal ---------------------------------------------------------------
  {
    // Case 1. Proposal, upstream and we agree: n peers, state new (upstream: restoreWithEmptySnapstore).
    name: 'case 1: first member during bootstrap of a fresh cluster',
    in: input({ cluster: unreachable, dataDir: NOT_EXIST, backupsExist: false, memberLeaseHeld: false, createAsLearner: false }),
    action: 'bootstrap',
  },
  {
    // Case 2 while fewer than a quorum have started: nobody can serve a linearizable read yet.
    name: 'case 2: following member during bootstrap, quorum not formed yet',
    in: input({ cluster: unreachable, dataDir: NOT_EXIST }),
    action: 'bootstrap',
  },
  {
    // Case 2 once a quorum formed without this member. etcd lists every initial-cluster member by name from
    // the start, so upstream (member found by name ⇒ restoreInMultiNode) removes it and re-adds it as a
    // learner. We follow the proposal: a member that never started (no client URLs) and has no WAL joins the
    // bootstrap with state new; its id comes from initial-cluster and token, so no membership change is needed.
    name: 'case 2: following member during bootstrap, quorum formed without it',
    in: input({ cluster: quorate(member(0), member(1), member(2, { clientUrls: [] })), dataDir: NOT_EXIST }),
    action: 'bootstrap',
  },
  {
    // Case 3: proposal, upstream and we agree.
    name: 'case 3: restart of a member of a quorate cluster with valid metadata and data',
    in: input({ cluster: quorate(member(0), member(1), member(2)), dataDir: VALID, wal: OWN_WAL }),
    action: 'start',
  },
  {
    // Case 4. Proposal: remove, MemberAdd as a voting member, restore the latest full snapshot when backups
    // exist, state existing. Superseded in the proposal itself (single member restoration): re-add as a learner and
    // never restore from backups (the snapshot's metadata gives a member id mismatch). Upstream and we do that.
    name: 'case 4: restart of a member of a quorate cluster with valid metadata but without valid data',
    in: input({ cluster: quorate(member(0), member(1), member(2)), dataDir: CORRUPT, wal: OWN_WAL, backupsExist: true }),
    action: 'rejoin-as-learner',
    removeMemberId: 'a2',
  },
  {
    // Case 4 as the validator reports it when backups exist (upstream checkStatus).
    name: 'case 4: invalid in multi-node (backups exist)',
    in: input({ cluster: quorate(member(0), member(1), member(2)), dataDir: INVALID_MULTI, wal: OWN_WAL, backupsExist: true }),
    action: 'rejoin-as-learner',
    removeMemberId: 'a2',
  },
  {
    // Case 5: same as 4 (wiped volume, or a data dir without member/wal).
    name: 'case 5: restart of a member of a quorate cluster without valid metadata',
    in: input({ cluster: quorate(member(0), member(1), member(2)), dataDir: NOT_EXIST }),
    action: 'rejoin-as-learner',
    removeMemberId: 'a2',
  },
  {
    // Case 6: proposal, upstream and we agree. Also covers a whole cluster restarting: every member starts on
    // its valid data and quorum re-forms.
    name: 'case 6: restart of a member of a non-quorate cluster with valid metadata and data',
    in: input({ cluster: unreachable, dataDir: VALID, wal: OWN_WAL, backupsExist: true, memberLeaseHeld: true }),
    action: 'start',
  },
  {
    // Case 7. Proposal: restore a single-member cluster from the full snapshot and deltas, take a full
    // snapshot, start with state new. Upstream: invalid-in-multi-node ⇒ RemoveMember cannot succeed ⇒ Failed
    // (`pkg/initializer/initializer.go`). We fail too, with a clear reason: an automatic multi-node restore from backups would be a guess
    // (another member may still hold newer data); recovery is the operator's single-member procedure.
    name: 'case 7: first member of a non-quorate cluster without valid data (backups exist)',
    in: input({ cluster: unreachable, dataDir: INVALID_MULTI, backupsExist: true, memberLeaseHeld: false }),
    action: 'fail',
    code: 'quorum-lost',
  },
  {
    // Case 7 without backups but with a member lease that had a holder: the member was in a cluster.
    // Upstream: heartbeat present ⇒ restoreInMultiNode ⇒ fails for lack of quorum. We agree.
    name: 'case 7: first member of a non-quorate cluster without valid data (member lease held)',
    in: input({ cluster: unreachable, dataDir: NOT_EXIST, backupsExist: false, memberLeaseHeld: true }),
    action: 'fail',
    code: 'quorum-lost',
  },
  {
    // Case 8. Proposal: restore only the latest full snapshot and join with state existing. Upstream: the
    // corrupt data dir ⇒ restoreInMultiNode ⇒ fails without quorum. We agree with upstream: the member's own
    // WAL says a cluster existed, so bootstrapping anew would split it.
    name: 'case 8: following member of a non-quorate cluster without valid data',
    in: input({ cluster: unreachable, dataDir: CORRUPT, wal: OWN_WAL, backupsExist: false }),
    action: 'fail',
    code: 'quorum-lost',
  },

  // --- scale-up and learners ---------------------------------------------------------------------------
  {
    name: 'scale-up: not in the member list, EtcdMember says create-as-learner',
    in: input({ cluster: quorate(member(0)), dataDir: NOT_EXIST, createAsLearner: true, backupsExist: true }),
    action: 'join-as-learner',
  },
  {
    // Without Kubernetes the member list alone decides (upstream IsClusterScaledUp).
    name: 'scale-up: not in the member list, no Kubernetes',
    in: input({ cluster: quorate(member(0), member(1)), dataDir: NOT_EXIST }),
    action: 'join-as-learner',
  },
  {
    // Upstream cannot tell a scale-up without reaching the cluster and goes on to validation (no backups ⇒ it
    // would start with state new and n peers: a second cluster). The annotation makes it deterministic: wait.
    name: 'scale-up: create-as-learner but the cluster is unreachable',
    in: input({ cluster: unreachable, dataDir: NOT_EXIST, createAsLearner: true }),
    action: 'fail',
    code: 'cluster-unreachable',
  },
  {
    // The previous initialization added the learner, then the container restarted before etcd ran: the
    // learner has no name yet; its peer URL identifies it. Adding again answers "exists" = success.
    name: 'learner added but never started (restart in PendingLearner)',
    in: input({ cluster: quorate(member(0), member(1), member(2, { name: '', clientUrls: [], isLearner: true })), dataDir: NOT_EXIST }),
    action: 'join-as-learner',
  },
  {
    name: 'learner restarts while syncing, data valid',
    in: input({ cluster: quorate(member(0), member(1), member(2, { isLearner: true })), dataDir: VALID, wal: OWN_WAL }),
    action: 'start',
  },
  {
    name: 'learner restarts while syncing, data invalid: removed and re-added',
    in: input({ cluster: quorate(member(0), member(1), member(2, { isLearner: true })), dataDir: CORRUPT, wal: OWN_WAL }),
    action: 'rejoin-as-learner',
    removeMemberId: 'a2',
  },
  {
    // Scale 3→1 then back to 3 with the old volume kept: the data is of a member the cluster removed.
    name: 'valid data of a removed member, not in the member list',
    in: input({ cluster: quorate(member(0)), dataDir: VALID, wal: OWN_WAL }),
    action: 'join-as-learner',
  },
  {
    name: 'valid data of a removed member id, name re-registered under a new id',
    in: input({ cluster: quorate(member(0), member(1), member(2, { id: 'b2' })), dataDir: VALID, wal: OWN_WAL }),
    action: 'rejoin-as-learner',
    removeMemberId: 'b2',
  },

  // --- bad input -----------------------------------------------------------------------------------
  {
    name: 'member name missing from initial-cluster',
    in: input({ inInitialCluster: false, cluster: quorate(member(0), member(1)), dataDir: VALID, wal: OWN_WAL }),
    action: 'fail',
    code: 'not-in-initial-cluster',
  },
  {
    name: 'service endpoints answer for two clusters',
    in: input({ cluster: { kind: 'split', clusterIds: ['c1', 'c2'] }, dataDir: VALID, wal: OWN_WAL }),
    action: 'fail',
    code: 'cluster-id-mismatch',
  },
  {
    // A healthy-looking data dir of another cluster is never wiped; the operator decides.
    name: 'valid data dir of another cluster',
    in: input({ cluster: quorate(member(0), member(1), member(2)), dataDir: VALID, wal: { memberId: 'a2', clusterId: 'other' } }),
    action: 'fail',
    code: 'cluster-id-mismatch',
  },
  {
    name: 'invalid data dir of another cluster',
    in: input({ cluster: quorate(member(0), member(1)), dataDir: CORRUPT, wal: { memberId: 'f2', clusterId: 'other' } }),
    action: 'fail',
    code: 'cluster-id-mismatch',
  },
  {
    name: "own peer URL registered for another member's name",
    in: input({ cluster: quorate(member(0), member(1, { peerUrls: [peer(2)] })), dataDir: NOT_EXIST }),
    action: 'fail',
    code: 'peer-url-conflict',
  },
  {
    // Volumes swapped between pods: the data is another live member's.
    name: "data dir holds another member's id",
    in: input({ cluster: quorate(member(0), member(1), member(2)), dataDir: VALID, wal: { memberId: 'a1', clusterId: CLUSTER } }),
    action: 'fail',
    code: 'foreign-member-data',
  },
  {
    name: 'wrong volume mounted',
    in: input({ cluster: quorate(member(0), member(1), member(2)), dataDir: { status: DataDirStatus.WrongVolumeMounted } }),
    action: 'fail',
    code: 'wrong-volume',
  },
  {
    name: 'db file locked by another process',
    in: input({ dataDir: { status: DataDirStatus.FailToOpenBoltDBError } }),
    action: 'fail',
    code: 'db-locked',
  },
  {
    name: 'validation status unknown',
    in: input({ dataDir: { status: DataDirStatus.DataDirectoryStatusUnknown, reason: 'EACCES' } }),
    action: 'fail',
    code: 'status-unknown',
  },
  {
    name: 'unreachable, invalid data and the snapstore cannot be listed',
    in: input({ cluster: unreachable, dataDir: NOT_EXIST, backupsExist: 'unknown' }),
    action: 'fail',
    code: 'backups-unknown',
  },

  // --- single node (upstream `Initialize`, unchanged) ------------------------------------------------------
  {
    name: 'single node, valid data',
    in: input({ clusterSize: 1, dataDir: VALID }),
    action: 'start',
  },
  {
    name: 'single node, invalid data: restore from the snapstore',
    in: input({ clusterSize: 1, dataDir: CORRUPT, backupsExist: true }),
    action: 'restore',
  },
];

describe('decideBootstrap', () => {
  it.each(rows)('$name ⇒ $action', (row) => {
    const d = decideBootstrap(row.in);
    expect(d.action, d.reason).toBe(row.action);
    expect(d.reason.length).toBeGreaterThan(10);
    if (row.code) expect(d).toMatchObject({ code: row.code });
    if (row.removeMemberId) expect(d).toMatchObject({ removeMemberId: row.removeMemberId });
  });

  it('names the member and the way out in failure reasons', () => {
    const d = decideBootstrap(input({ inInitialCluster: false }));
    expect(d.reason).toMatch(/etcd-main-2.*initial-cluster/);
    const q = decideBootstrap(input({ cluster: unreachable, dataDir: CORRUPT, wal: OWN_WAL }));
    expect(q.reason).toMatch(/quorum/);
    expect(q.reason).toMatch(/not restored from backups/);
  });

  /** Every combination of the inputs that matter, against the two invariants of the decision. */
  it('never wipes a healthy member and never restores a multi-node member from backups', () => {
    const clusters: ClusterObservation[] = [
      unreachable,
      { kind: 'split', clusterIds: ['x', 'y'] },
      quorate(member(0), member(1)),
      quorate(member(0), member(1), member(2)),
      quorate(member(0), member(1), member(2, { isLearner: true })),
      quorate(member(0), member(1), member(2, { name: '', clientUrls: [], isLearner: true })),
      quorate(member(0), member(1), member(2, { clientUrls: [] })),
    ];
    const dataDirs = [VALID, NOT_EXIST, CORRUPT, INVALID_MULTI, { status: DataDirStatus.WrongVolumeMounted }];
    const wals = [undefined, OWN_WAL, { memberId: 'a1', clusterId: CLUSTER }, { memberId: 'a2', clusterId: 'other' }];
    const wiping = new Set(['bootstrap', 'join-as-learner', 'rejoin-as-learner', 'restore']);
    let n = 0;
    for (const cluster of clusters)
      for (const dataDir of dataDirs)
        for (const wal of wals)
          for (const backupsExist of [true, false, 'unknown'] as const)
            for (const createAsLearner of [undefined, true, false])
              for (const memberLeaseHeld of [undefined, true, false]) {
                const i = input({
                  cluster,
                  dataDir,
                  backupsExist,
                  ...(wal ? { wal } : {}),
                  ...(createAsLearner === undefined ? {} : { createAsLearner }),
                  ...(memberLeaseHeld === undefined ? {} : { memberLeaseHeld }),
                });
                const d = decideBootstrap(i);
                n++;
                expect(d.action).not.toBe('restore');
                const healthy =
                  cluster.kind === 'quorate' &&
                  dataDir === VALID &&
                  wal?.memberId === 'a2' &&
                  wal.clusterId === CLUSTER &&
                  cluster.members.some((m) => m.id === 'a2' && m.name === 'etcd-main-2');
                if (healthy) expect(d.action, JSON.stringify(i)).toBe('start');
                // Without quorum, valid data always starts; nothing is wiped when the cluster cannot be asked.
                if (cluster.kind === 'unreachable' && dataDir === VALID) expect(d.action).toBe('start');
                // Data of another cluster, or of another member, is never wiped.
                if (wal && (wal.clusterId !== CLUSTER || wal.memberId === 'a1') && cluster.kind === 'quorate') {
                  expect(wiping.has(d.action), JSON.stringify(i)).toBe(false);
                }
              }
    expect(n).toBeGreaterThan(2000);
  });
});
