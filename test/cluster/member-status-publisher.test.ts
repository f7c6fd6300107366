/**
 * EtcdMember status publishing through our Kubernetes client (src/k8s/http.ts) against the fake API: the status
 * lands in `/status`, updates coalesce, a missing EtcdMember is waited for, failures are retried with backoff.
 */
import { describe, expect, it } from 'vitest';
import { newSnapshot } from '@etcdbrctl/snapstore';
import { FakeClock } from '../../src/clock.js';
import {
  EtcdMemberStatusPublisher,
  recordInitialization,
  type EtcdMemberStatusPublisherOptions,
} from '../../src/cluster/member-status-publisher.js';
import { EtcdMemberAccess } from '../../src/k8s/etcd-member-access.js';
import { ETCD_MEMBERS } from '../support/fake-kube.js';
import { recordingLogger } from '../k8s/support.js';
import { waitFor } from '../support/wait.js';
import { useFakeKube } from '../support/fake-kube-fixture.js';

const NS = 'shoot--dev--status';
const NAME = 'etcd-main-0';
const STATUS_PATH = `/apis/druid.gardener.cloud/v1alpha1/namespaces/${NS}/etcdmembers/${NAME}/status`;
const ITEM_PATH = `/apis/druid.gardener.cloud/v1alpha1/namespaces/${NS}/etcdmembers/${NAME}`;
const ME = '8e9e05c52164694d';

const k8s = useFakeKube();

/** An EtcdMember as etcd-druid creates it (DEP-04 "API"), optionally with a status left by an earlier run. */
function seedMember(status?: Record<string, unknown>): void {
  k8s.fake.seed(ETCD_MEMBERS, {
    apiVersion: 'druid.gardener.cloud/v1alpha1',
    kind: 'EtcdMember',
    metadata: {
      name: NAME,
      namespace: NS,
      labels: { 'gardener.cloud/owned-by': 'etcd-main' },
      annotations: { 'druid.gardener.cloud/create-as-learner': 'true' },
    },
    ...(status ? { status } : {}),
  });
}

function publisher(overrides: Partial<EtcdMemberStatusPublisherOptions> = {}) {
  const clock = new FakeClock('2026-05-06T07:00:00.000Z');
  const logger = recordingLogger();
  const pub = new EtcdMemberStatusPublisher({
    etcdMembers: new EtcdMemberAccess(k8s.kube, logger),
    namespace: NS,
    name: NAME,
    clusterSize: 1,
    peerTLSEnabled: false,
    clock,
    logger,
    retryMinMs: 1_000,
    retryMaxMs: 8_000,
    missingRetryMs: 30_000,
    ...overrides,
  });
  return { pub, clock, logger };
}

type Transition = { state: string; subState: string; reason: string };
const statusOf = () => k8s.fake.read(ETCD_MEMBERS, NS, NAME)?.status as Record<string, unknown> | undefined;
const statesOf = () => ((statusOf()?.transitions ?? []) as Transition[]).map((t) => `${t.state}/${t.subState}`);
const patches = () => k8s.fake.requestsMatching({ method: 'PATCH', path: STATUS_PATH });

const leaderStatus = {
  memberId: ME,
  clusterId: 'cdf818194e3a8c32',
  leaderId: ME,
  isLearner: false,
  dbSize: 6 * 2 ** 30,
  dbSizeInUse: 2 ** 30,
};

describe('EtcdMemberStatusPublisher', () => {
  it('merge-patches /status only: the state lands in status, metadata and fields it does not own stay', async () => {
    seedMember({ volumeMismatches: [{ volumeID: 'vol-1', numRestarts: 2 }] });
    const before = k8s.fake.read(ETCD_MEMBERS, NS, NAME)!;
    const { pub } = publisher();
    pub.start();
    await pub.whenIdle();
    expect(patches()).toHaveLength(1);
    expect(patches()[0]?.contentType).toBe('application/merge-patch+json');
    expect(k8s.fake.requestsMatching({ method: 'GET', path: ITEM_PATH })).toHaveLength(1);
    const obj = k8s.fake.read(ETCD_MEMBERS, NS, NAME)!;
    expect(obj.metadata.annotations).toEqual(before.metadata.annotations);
    expect(obj.metadata.generation).toBe(before.metadata.generation);
    expect(obj.status).toEqual({
      volumeMismatches: [{ volumeID: 'vol-1', numRestarts: 2 }],
      peerTLSEnabled: false,
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

    pub.onEtcdStatus(leaderStatus);
    await pub.whenIdle();
    expect(statusOf()).toMatchObject({ id: ME, clusterID: 'cdf818194e3a8c32', dbSize: '6Gi', dbSizeInUse: '1Gi' });
    expect(statesOf()).toEqual(['New/New', 'Started/Leader']);
    // Nothing new: no request.
    pub.onEtcdStatus(leaderStatus);
    await pub.whenIdle();
    expect(patches()).toHaveLength(2);
    await pub.stop();
    expect(patches()).toHaveLength(2);
  });

  it('coalesces: events during a request go out together in the next one, the latest state wins', async () => {
    seedMember();
    const { pub } = publisher();
    pub.start();
    await pub.whenIdle();
    k8s.fake.beforeNext({ method: 'PATCH', path: STATUS_PATH }, () => {
      // Runs while the PATCH is in flight: three more changes.
      pub.onEtcdStatus({ ...leaderStatus, dbSize: 1024 });
      pub.onEtcdStatus({ ...leaderStatus, dbSize: 2048 });
      pub.onEtcdStatus({ ...leaderStatus, dbSize: 4096 });
    });
    const run = recordInitialization(pub, async () => 'valid');
    await run('sanity');
    await pub.whenIdle();
    const sent = patches().map((r) => (r.body as { status: { dbSize?: string; transitions: Transition[] } }).status);
    expect(sent).toHaveLength(3);
    // The second PATCH (in flight during the three events) still held the initialization state only.
    expect(sent[1]?.dbSize).toBeUndefined();
    expect(sent[1]?.transitions.at(-1)?.subState).toBe('DBValidationSanity');
    expect(sent[2]?.dbSize).toBe('4Ki');
    expect(statesOf()).toEqual(['New/New', 'Initializing/DBValidationSanity', 'Started/Leader']);
    expect((statusOf()?.transitions as Transition[]).at(-1)?.reason).toBe('DBValidationSucceeded');
    await pub.stop();
  });

  it('a missing EtcdMember is reported once and looked for again; once created its status is written', async () => {
    const { pub, clock, logger } = publisher({ sizeRefreshMs: 0 });
    pub.start();
    await pub.whenIdle();
    expect(pub.retryPending).toBe(true);
    expect(patches()).toHaveLength(0);
    pub.onEtcdStatus(leaderStatus);
    await pub.whenIdle();
    expect(k8s.fake.requestsMatching({ method: 'GET', path: ITEM_PATH })).toHaveLength(1);

    await clock.advanceAsync(30_000);
    await pub.whenIdle();
    expect(k8s.fake.requestsMatching({ method: 'GET', path: ITEM_PATH })).toHaveLength(2);
    const missing = logger.warnings().filter((w) => w.includes('does not exist'));
    expect(missing).toHaveLength(1);
    expect(missing[0]).toContain(`EtcdMember ${NS}/${NAME} does not exist`);

    seedMember();
    await clock.advanceAsync(30_000);
    await pub.whenIdle();
    expect(statesOf()).toEqual(['New/New', 'Started/Leader']);
    expect(statusOf()?.dbSize).toBe('6Gi');
    expect(pub.retryPending).toBe(false);
    expect(logger.lines.some((l) => l.msg === 'EtcdMember found: publishing its status')).toBe(true);

    // Deleted (e.g. hibernation) and created again: written again from scratch, after the next retry.
    k8s.fake.remove(ETCD_MEMBERS, NS, NAME);
    pub.onEtcdStatus({ ...leaderStatus, dbSize: 1024 });
    await pub.whenIdle();
    expect(pub.retryPending).toBe(true);
    seedMember();
    await clock.advanceAsync(30_000);
    await pub.whenIdle();
    expect(statusOf()?.dbSize).toBe('1Ki');
    expect(statesOf()).toEqual(['New/New', 'Started/Leader']);
    await pub.stop();
  });

  it('retries 500 and 409 answers with doubling backoff and succeeds when the server does', async () => {
    seedMember();
    const { pub, clock, logger } = publisher();
    k8s.fake.failNext(1, { status: 500 }, { method: 'PATCH', path: STATUS_PATH });
    k8s.fake.failNext(2, { status: 409 }, { method: 'PATCH', path: STATUS_PATH });
    pub.start();
    await pub.whenIdle();
    expect(patches().map((r) => r.status)).toEqual([500]);
    expect(clock.nextDue()?.toISOString()).toBe('2026-05-06T07:00:01.000Z');

    await clock.advanceAsync(1_000);
    await pub.whenIdle();
    expect(patches().map((r) => r.status)).toEqual([500, 409]);
    expect(clock.nextDue()?.toISOString()).toBe('2026-05-06T07:00:03.000Z');

    await clock.advanceAsync(1_999);
    await pub.whenIdle();
    expect(patches()).toHaveLength(2);
    await clock.advanceAsync(1);
    await pub.whenIdle();
    expect(patches().map((r) => r.status)).toEqual([500, 409, 409]);
    expect(clock.nextDue()?.toISOString()).toBe('2026-05-06T07:00:07.000Z');

    await clock.advanceAsync(4_000);
    await pub.whenIdle();
    expect(patches().map((r) => r.status)).toEqual([500, 409, 409, 200]);
    expect(statesOf()).toEqual(['New/New']);
    expect(pub.retryPending).toBe(false);
    expect(logger.warnings().filter((w) => w.startsWith('EtcdMember status update failed'))).toHaveLength(3);
    expect(logger.lines.some((l) => l.msg === 'EtcdMember status update succeeded again')).toBe(true);
    await pub.stop();
  });

  it('a request that never answers times out and is retried', async () => {
    seedMember();
    const { pub, clock } = publisher({ requestTimeoutMs: 5_000 });
    k8s.fake.stallNext(1, { method: 'PATCH', path: STATUS_PATH });
    pub.start();
    // The stalled PATCH waits for its deadline on the fake clock.
    await waitFor(() => patches().length > 0, 'the PATCH to reach the API server', 5_000, 10);
    expect(patches()).toHaveLength(1);
    await clock.advanceAsync(5_000);
    await pub.whenIdle();
    expect(pub.retryPending).toBe(true);
    await clock.advanceAsync(1_000);
    await pub.whenIdle();
    expect(statesOf()).toEqual(['New/New']);
    await pub.stop();
  });

  it('keeps the history an earlier run left and continues it', async () => {
    seedMember({
      transitions: [
        { state: 'New', subState: 'New', reason: 'NewSingleNodeClusterCreated', transitionTime: '2026-05-01T00:00:00Z', message: '' },
        { state: 'Started', subState: 'Leader', reason: 'RestorationSucceeded', transitionTime: '2026-05-01T00:00:09Z', message: '' },
      ],
      lastRestoration: { type: 'FromSnapshot', status: 'Success', startTime: '2026-05-01T00:00:02Z', endTime: '2026-05-01T00:00:08Z' },
    });
    const { pub } = publisher();
    pub.start();
    const init = recordInitialization(pub, async () => {
      throw new Error('wrong volume mounted');
    });
    await expect(init('full')).rejects.toThrow('wrong volume mounted');
    await pub.whenIdle();
    expect(statesOf()).toEqual(['New/New', 'Started/Leader', 'Initializing/DBValidationFull', 'New/New']);
    expect((statusOf()?.transitions as Array<{ message: string }>).at(-1)?.message).toBe('wrong volume mounted');
    // Not ours to drop: written by the earlier run, kept by the merge patch.
    expect(statusOf()?.lastRestoration).toMatchObject({ status: 'Success' });
    await pub.stop();
  });

  it('stop tries a pending write once more, then gives up without retrying', async () => {
    seedMember();
    const { pub, clock } = publisher();
    k8s.fake.failNext(1, { status: 503 }, { method: 'PATCH', path: STATUS_PATH });
    pub.start();
    await pub.whenIdle();
    expect(pub.retryPending).toBe(true);
    pub.onEtcdStatus(leaderStatus);
    await pub.stop();
    expect(patches().map((r) => r.status)).toEqual([503, 200]);
    expect(statesOf()).toEqual(['New/New', 'Started/Leader']);

    // After stop: a failure arms nothing.
    const second = publisher();
    k8s.fake.failNext(5, { status: 500 }, { method: 'PATCH', path: STATUS_PATH });
    second.pub.onEtcdStatus(leaderStatus);
    await second.pub.stop();
    expect(second.pub.retryPending).toBe(false);
    expect(second.clock.pending).toBe(0);
    expect(clock.pending).toBe(0);
  });

  it('publishes snapshots (uncompressed sizes) and this member’s defragmentation as DEP-04 names them', async () => {
    seedMember();
    const { pub } = publisher();
    pub.start();
    pub.onEtcdStatus(leaderStatus);
    const full = newSnapshot({
      kind: 'Full',
      startRevision: 0,
      lastRevision: 10,
      createdOn: new Date('2026-05-06T07:00:05Z'),
      compressionSuffix: '.gz',
    });
    const delta = newSnapshot({
      kind: 'Incr',
      startRevision: 11,
      lastRevision: 12,
      createdOn: new Date('2026-05-06T07:00:10Z'),
      compressionSuffix: '.gz',
    });
    pub.onSnapshot(full, { uncompressedBytes: 3 * 2 ** 20, baseFull: full });
    pub.onSnapshot(delta, { uncompressedBytes: 700, baseFull: full });
    pub.onMemberDefragmented({
      memberId: ME,
      name: NAME,
      endpoint: 'http://127.0.0.1:2379',
      startTime: new Date('2026-05-06T07:01:00Z'),
      endTime: new Date('2026-05-06T07:01:02Z'),
      succeeded: true,
      message: 'Defragmentation succeeded',
      initialDBSize: 8 * 2 ** 20,
      finalDBSize: 2 ** 20,
    });
    await pub.whenIdle();
    expect(statusOf()?.snapshots).toEqual({
      lastFull: { timestamp: '2026-05-06T07:00:05Z', name: full.snapName, size: '3Mi', startRevision: 0, endRevision: 10 },
      lastDelta: { timestamp: '2026-05-06T07:00:10Z', name: delta.snapName, size: '700', startRevision: 11, endRevision: 12 },
      accumulatedDeltaSize: '700',
    });
    expect(full.snapName).toMatch(/^Full-00000000-00000010-\d+\.gz$/);
    expect(statusOf()?.lastDefragmentation).toEqual({
      startTime: '2026-05-06T07:01:00Z',
      endTime: '2026-05-06T07:01:02Z',
      status: 'Succeeded',
      message: 'Defragmentation succeeded',
      initialDBSize: '8Mi',
      finalDBSize: '1Mi',
    });
    await pub.stop();

    // A restarted sidecar reads the EtcdMember first: its next delta on the same full adds to the published sum.
    const restarted = publisher();
    restarted.pub.start();
    restarted.pub.onEtcdStatus(leaderStatus);
    const next = newSnapshot({
      kind: 'Incr',
      startRevision: 13,
      lastRevision: 20,
      createdOn: new Date('2026-05-06T07:05:00Z'),
      compressionSuffix: '.gz',
    });
    const listedFull = newSnapshot({
      kind: 'Full',
      startRevision: 0,
      lastRevision: 10,
      createdOn: new Date('2026-05-06T07:00:05Z'),
      compressionSuffix: '.gz',
    });
    restarted.pub.onSnapshot(next, { uncompressedBytes: 324, baseFull: listedFull });
    await restarted.pub.whenIdle();
    expect(statusOf()?.snapshots).toMatchObject({
      lastFull: { name: full.snapName, size: '3Mi' },
      lastDelta: { name: next.snapName, size: '324' },
      accumulatedDeltaSize: '1Ki',
    });
    await restarted.pub.stop();
  });

  it('holds back a change of the DB sizes alone until sizeRefreshMs after the last write; other changes go at once', async () => {
    seedMember();
    const { pub, clock } = publisher({ sizeRefreshMs: 10_000 });
    pub.start();
    pub.onEtcdStatus(leaderStatus);
    await pub.whenIdle();
    // New and Started(Leader) went out together.
    expect(patches()).toHaveLength(1);
    await clock.advanceAsync(4_000);
    pub.onEtcdStatus({ ...leaderStatus, dbSize: 7 * 2 ** 30 });
    await pub.whenIdle();
    expect(patches()).toHaveLength(1);
    expect(statusOf()?.dbSize).toBe('6Gi');
    expect(clock.nextDue()?.toISOString()).toBe('2026-05-06T07:00:10.000Z');
    // A state change does not wait, and carries the newest sizes along.
    pub.onEtcdStatus({ ...leaderStatus, leaderId: 'ffff', dbSize: 8 * 2 ** 30 });
    await pub.whenIdle();
    expect(patches()).toHaveLength(2);
    expect(statusOf()).toMatchObject({ dbSize: '8Gi' });
    expect(statesOf().at(-1)).toBe('Started/Follower');
    expect(clock.pending).toBe(0);
    // Sizes only again: written once the period since that write has passed.
    pub.onEtcdStatus({ ...leaderStatus, leaderId: 'ffff', dbSize: 9 * 2 ** 30 });
    pub.onEtcdStatus({ ...leaderStatus, leaderId: 'ffff', dbSize: 10 * 2 ** 30 });
    await pub.whenIdle();
    expect(patches()).toHaveLength(2);
    await clock.advanceAsync(9_999);
    await pub.whenIdle();
    expect(patches()).toHaveLength(2);
    await clock.advanceAsync(1);
    await pub.whenIdle();
    expect(patches()).toHaveLength(3);
    expect(statusOf()?.dbSize).toBe('10Gi');
    // At stop a held-back size change is written at once.
    pub.onEtcdStatus({ ...leaderStatus, leaderId: 'ffff', dbSize: 11 * 2 ** 30 });
    await pub.whenIdle();
    expect(patches()).toHaveLength(3);
    await pub.stop();
    expect(patches()).toHaveLength(4);
    expect(statusOf()?.dbSize).toBe('11Gi');
    expect(clock.pending).toBe(0);
  });

  it('refuses an empty namespace or member name with a clear error', () => {
    expect(() => publisher({ namespace: '' })).toThrow(/POD_NAMESPACE is empty/);
    expect(() => publisher({ name: '' })).toThrow(/POD_NAME is empty/);
  });
});
