/**
 * Rolling defragmentation by the leading sidecar (issue 5): a three-member etcd cluster on loopback, one
 * `etcdbrctl server` process next to the leader and one next to a follower.
 */
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, type TestCluster } from '../test/support/cluster.js';
import { makeLeader } from '../test/cluster/maintenance-support.js';
import { startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';

interface LogLine {
  msg: string;
  [k: string]: unknown;
}

function lines(sidecar: SidecarProcess): LogLine[] {
  return sidecar
    .logs()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => {
      try {
        return JSON.parse(l) as LogLine;
      } catch {
        return { msg: '' };
      }
    });
}

describe('defragmentation across a three-member cluster (processes)', () => {
  let cluster: TestCluster;
  const sidecars: SidecarProcess[] = [];

  beforeAll(async () => {
    cluster = await startTestCluster(3);
    const c = new Etcd3({ hosts: cluster.clientUrls() });
    try {
      for (let i = 0; i < 50; i++) await c.put(`k${i % 5}`).value('x'.repeat(1000));
    } finally {
      c.close();
    }
    // A leader in the middle of the member list, so "leader last" cannot be list order by accident.
    await makeLeader(cluster, 'etcd-main-1');
  });
  afterAll(async () => {
    await Promise.all(sidecars.map((s) => s.stop('SIGKILL')));
    await cluster?.cleanup();
  });

  const start = (i: number) =>
    startSidecar(
      [
        `--endpoints=${cluster.members[i]!.clientUrl}`,
        '--defragmentation-schedule=@every 1s',
        '--reelection-period=1500ms',
        '--etcd-connection-timeout=5s',
      ],
      // No POD_NAME: no peer URL check and no member cleanup, only defragmentation is under test.
      { POD_NAME: '', ETCDBRCTL_DEFRAG_RETRY_PERIOD: '300ms' },
    );

  it('waits while a member is down, then defragments the followers one by one and the leader last', async () => {
    await cluster.stop('etcd-main-2');
    const leader = await start(1);
    sidecars.push(leader);
    const follower = await start(0);
    sidecars.push(follower);

    // The leader's sidecar postpones, naming the member that is down.
    await waitFor(
      async () => (lines(leader).filter((l) => l.msg.startsWith('postponing defragmentation')).length >= 3 ? true : undefined),
      'postponed defragmentation attempts',
    );
    const postponed = lines(leader).filter((l) => l.msg.startsWith('postponing defragmentation'));
    expect(postponed.every((l) => l.msg.includes('etcd-main-2'))).toBe(true);
    expect(lines(leader).some((l) => l.msg === 'defragmenting etcd member')).toBe(false);

    await cluster.start('etcd-main-2', { state: 'existing' });
    await waitFor(
      async () => (lines(leader).some((l) => l.msg === 'defragmentation of every etcd member finished') ? true : undefined),
      'a completed defragmentation run',
      60_000,
    );
    const firstRun = lines(leader)
      .filter((l) => l.msg === 'defragmenting etcd member')
      .slice(0, 3);
    expect(
      firstRun
        .map((l) => l.member)
        .slice(0, 2)
        .sort(),
    ).toEqual(['etcd-main-0', 'etcd-main-2']);
    expect(firstRun[2]).toMatchObject({ member: 'etcd-main-1', leader: true });

    // Only the leading sidecar defragments.
    expect(lines(follower).some((l) => l.msg === 'defragmenting etcd member' || l.msg.startsWith('postponing'))).toBe(false);

    const metrics = await (await fetch(`${leader.url}/metrics`)).text();
    for (const m of cluster.members) {
      expect(metrics).toMatch(
        new RegExp(
          `etcdbr_defragmentation_duration_seconds_count\\{succeeded="true",endpoint="${m.clientUrl.replace(/[.:/]/g, '\\$&')}"\\} [1-9]`,
        ),
      );
    }
  });
});
