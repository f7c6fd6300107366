/** Removal of superfluous members on the leader (etcd-druid proposal 01-multi-node-etcd-clusters.md). */
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/clock.js';
import { MemberCleanup, memberOrdinal, planMemberCleanup, type CleanupCandidate, type CleanupPolicy } from '../../src/cluster/cleanup.js';
import { Metrics } from '../../src/metrics.js';
import { startTestCluster, type TestCluster } from '../support/cluster.js';
import { etcdClient } from '../support/etcd-client.js';
import { waitFor } from '../support/wait.js';
import { makeLeader, plainEndpointClient, recordingLogger } from './maintenance-support.js';

const STS = 'etcd-main';

/** `m(2)`: member etcd-main-2, healthy voter; flags change that. */
function m(n: number, flags: { down?: boolean; learner?: boolean; name?: string; peer?: string } = {}): CleanupCandidate {
  return {
    id: `id${n}`,
    name: flags.name ?? `${STS}-${n}`,
    peerURLs: [flags.peer ?? `https://${STS}-${n}.${STS}-peer.ns.svc:2380`],
    isLearner: flags.learner ?? false,
    healthy: !flags.down,
  };
}

describe('memberOrdinal', () => {
  const policy: CleanupPolicy = { clusterSize: 3, statefulSetName: STS };
  it.each([
    ['etcd-main-0', [], undefined, 0],
    ['etcd-main-12', [], undefined, 12],
    ['pfx-etcd-main-4', [], 'pfx', 4],
    ['etcd-main-4', [], 'pfx', undefined], // prefix configured but missing: not ours
    ['other-4', [], undefined, undefined],
    ['etcd-main-04', [], undefined, undefined],
    ['etcd-main', [], undefined, undefined],
    ['', ['https://etcd-main-5.etcd-main-peer.shoot.svc:2380'], undefined, 5], // added, never started
    ['', ['http://127.0.0.1:2380'], undefined, undefined],
    ['', [], undefined, undefined],
  ] as Array<[string, string[], string | undefined, number | undefined]>)('%s %j prefix=%s → %s', (name, peerURLs, prefix, want) => {
    expect(memberOrdinal({ name, peerURLs }, { ...policy, ...(prefix ? { memberNamePrefix: prefix } : {}) })).toBe(want);
  });
});

describe('planMemberCleanup', () => {
  const names = (xs: CleanupCandidate[]) => xs.map((x) => x.name);
  const cases: Array<{
    title: string;
    members: CleanupCandidate[];
    size: number;
    remove: string[];
    kept?: Array<[string, RegExp]>;
    protectedIds?: string[];
    eligible?: string[];
    prefix?: string;
  }> = [
    { title: 'nothing superfluous', members: [m(0), m(1), m(2)], size: 3, remove: [] },
    { title: 'scale 3 → 2: member 2 goes', members: [m(0), m(1), m(2)], size: 2, remove: ['etcd-main-2'] },
    {
      title: 'member 1 down: removing healthy member 2 would lose quorum',
      members: [m(0), m(1, { down: true }), m(2)],
      size: 2,
      remove: [],
      kept: [['etcd-main-2', /1 healthy of 2 voting members, below the quorum of 2/]],
    },
    {
      title: 'failed scale-up 3 → 5 rolled back: both dead members go, highest first',
      members: [m(0), m(1), m(2), m(3, { down: true }), m(4, { down: true })],
      size: 3,
      remove: ['etcd-main-4', 'etcd-main-3'],
    },
    {
      title: 'unhealthy superfluous members go before healthy ones',
      members: [m(0), m(1), m(2), m(3), m(4, { down: true })],
      size: 2,
      remove: ['etcd-main-4', 'etcd-main-3', 'etcd-main-2'],
    },
    {
      title: 'scale 3 → 1: both others go, one after the other',
      members: [m(0), m(1), m(2)],
      size: 1,
      remove: ['etcd-main-2', 'etcd-main-1'],
    },
    {
      title: 'a superfluous learner goes even when quorum is tight (it does not vote)',
      members: [m(0), m(1, { down: true }), m(2, { learner: true, down: true })],
      size: 2,
      remove: ['etcd-main-2'],
    },
    {
      title: 'a learner added but never started (no name) is found by its peer host',
      members: [m(0), m(1), m(2), m(3, { name: '', learner: true, down: true })],
      size: 3,
      remove: [''],
    },
    {
      title: 'with a member-name prefix',
      members: [m(0, { name: 'pfx-etcd-main-0' }), m(1, { name: 'pfx-etcd-main-1' }), m(2, { name: 'pfx-etcd-main-2' })],
      size: 2,
      prefix: 'pfx',
      remove: ['pfx-etcd-main-2'],
    },
    {
      title: 'members of other names are never touched',
      members: [m(0), m(1), m(7, { name: 'something-7' })],
      size: 2,
      remove: [],
    },
    {
      title: 'the leader / own member is protected',
      members: [m(0), m(1), m(2)],
      size: 2,
      protectedIds: ['id2'],
      remove: [],
      kept: [['etcd-main-2', /leader/]],
    },
    {
      title: 'grace period: a recently superfluous member stays and does not count as removed',
      members: [m(0), m(1), m(2)],
      size: 1,
      eligible: ['id1'],
      remove: ['etcd-main-1'],
      kept: [['etcd-main-2', /grace period/]],
    },
    {
      title: 'never the last voting member',
      members: [m(3)],
      size: 3,
      remove: [],
      kept: [['etcd-main-3', /last voting member/]],
    },
    {
      title: 'two of three down: nothing healthy can go',
      members: [m(0), m(1, { down: true }), m(2, { down: true })],
      size: 2,
      remove: [],
      kept: [['etcd-main-2', /below the quorum/]],
    },
    { title: 'a cluster size of 0 (no initial-cluster) removes nothing', members: [m(0), m(1)], size: 0, remove: [] },
  ];
  it.each(cases)('$title', (c) => {
    const plan = planMemberCleanup(
      c.members,
      { clusterSize: c.size, statefulSetName: STS, ...(c.prefix ? { memberNamePrefix: c.prefix } : {}) },
      {
        ...(c.protectedIds ? { protectedIds: new Set(c.protectedIds) } : {}),
        ...(c.eligible ? { eligible: new Set(c.eligible) } : {}),
      },
    );
    expect(names(plan.remove)).toEqual(c.remove);
    for (const [name, reason] of c.kept ?? []) {
      expect(plan.kept.find((k) => k.member.name === name)?.reason).toMatch(reason);
    }
  });
});

describe('MemberCleanup against a cluster started with 3 members and a configured size of 2', () => {
  let cluster: TestCluster;
  let client: Etcd3;

  beforeAll(async () => {
    cluster = await startTestCluster(3);
    // The cleanup runs on the leader's sidecar: its client talks to the leader's etcd.
    await makeLeader(cluster, 'etcd-main-0');
    client = new Etcd3({ hosts: cluster.members[0]!.clientUrl });
  });
  afterAll(async () => {
    client?.close();
    await cluster?.cleanup();
  });

  it('waits for the grace period, keeps member 2 while removing it would lose quorum, then removes it', async () => {
    const clock = new FakeClock('2024-03-01T00:00:00Z');
    const metrics = new Metrics({ defaultMetrics: false });
    const logger = recordingLogger();
    const cleanup = new MemberCleanup({
      clusterClient: async () => etcdClient(cluster.members[0]!.clientUrl),
      endpointClient: plainEndpointClient,
      policy: async () => ({ clusterSize: 2, statefulSetName: STS }),
      statusTimeoutMs: 2_000,
      graceMs: 60_000,
      clock,
      logger,
      metrics,
    });

    const first = await cleanup.runOnce();
    expect(first.removed).toEqual([]);
    expect(first.kept.map((k) => [k.member.name, k.reason])).toEqual([['etcd-main-2', expect.stringMatching(/grace/)]]);

    clock.advance(60_000);
    await cluster.stop('etcd-main-1');
    const second = await cleanup.runOnce();
    expect(second.removed).toEqual([]);
    expect(second.kept.map((k) => [k.member.name, k.reason])).toEqual([['etcd-main-2', expect.stringMatching(/below the quorum/)]]);
    expect((await client.cluster.memberList({})).members).toHaveLength(3);

    await cluster.start('etcd-main-1', { state: 'existing' });
    // etcd itself refuses a removal until the restarted member has been connected for a few seconds
    // ("unhealthy cluster"); the cleanup then tries again next round.
    const refused: Array<string | undefined> = [];
    const third = await waitFor(
      async () => {
        const round = await cleanup.runOnce();
        if (round.removed.length > 0) return round;
        refused.push(round.failed?.error);
        return undefined;
      },
      'a round that removes etcd-main-2',
      20_000,
      500,
    );
    for (const error of refused) expect(error).toMatch(/unhealthy/i);
    expect(third.removed.map((r) => r.name)).toEqual(['etcd-main-2']);
    expect(logger.entries.some((e) => e.msg === 'removed superfluous etcd member' && e.fields.member === 'etcd-main-2')).toBe(true);

    const members = (await client.cluster.memberList({})).members.map((x) => x.name).sort();
    expect(members).toEqual(['etcd-main-0', 'etcd-main-1']);
    // Quorum kept: the two remaining members still accept writes.
    await client.put('after-cleanup').value('ok');
    expect(await client.get('after-cleanup').string()).toBe('ok');
    const removeCount = (await metrics.memberRemoveDurationSeconds.get()).values.find(
      (v) => v.metricName?.endsWith('_count') && v.labels.succeeded === 'true',
    );
    expect(removeCount?.value).toBe(1);

    // Nothing more to do.
    expect((await cleanup.runOnce()).removed).toEqual([]);
  });
});
