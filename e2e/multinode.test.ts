/**
 * Three sidecar processes (bin/etcdbrctl server) and a stand-in for etcd-wrapper per member: a fresh
 * 3-member cluster bootstraps through /initialization and /config; then one member loses its data dir, and
 * its sidecar removes it, re-adds it as a learner, serves a config that lets etcd join, and promotes it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { startTestCluster, type TestCluster } from '../test/support/cluster.js';
import { etcdBinaries } from '../test/support/etcd.js';
import { writeTemplate } from '../test/cluster/multinode-support.js';
import { startMemberSidecar } from './support/multinode.js';
import { waitFor, type SidecarProcess } from './support/sidecar.js';
import { runWrapper, type ConfiguredEtcd } from './support/wrapper.js';

describe('multi-node cluster through sidecars and the etcd-wrapper protocol', () => {
  let cluster: TestCluster | undefined;
  let dir = '';
  const sidecars: SidecarProcess[] = [];
  const etcds = new Map<number, ConfiguredEtcd>();

  afterAll(async () => {
    await Promise.all([...etcds.values()].map((e) => e.stop(5_000)));
    await Promise.all(sidecars.map((s) => s.stop()));
    await cluster?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('bootstraps three members, then re-adds a wiped member as a learner and promotes it', async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-multinode-'));
    cluster = await startTestCluster(3, { start: false });
    const c = cluster;
    const binaries = await etcdBinaries();
    for (const i of c.members.keys()) {
      sidecars.push(await startMemberSidecar(c, i, await writeTemplate(c, i, dir), ['--reelection-period=2s']));
    }

    // Fresh bootstrap (multi-node proposal cases 1/2): no member is reachable, so every sidecar answers "bootstrap".
    const first = await Promise.all(
      sidecars.map(async (s, i) => {
        const r = await runWrapper(s.url, { binaries, workDir: join(dir, `wrapper-${i}`) });
        expect(r.handshake.ok, s.logs()).toBe(true);
        expect(r.etcd!.config['initial-cluster-state']).toBe('new');
        expect(String(r.etcd!.config['initial-cluster']).split(',')).toHaveLength(3);
        etcds.set(i, r.etcd!);
        return r.etcd!;
      }),
    );
    await Promise.all(first.map((e) => e.ready()));
    for (const s of sidecars) expect(s.logs()).toMatch(/"action":"bootstrap"/);

    const client = new Etcd3({ hosts: [c.members[0]!.clientUrl, c.members[1]!.clientUrl] });
    try {
      for (let i = 0; i < 50; i++) await client.put(`k/${i}`).value(String(i));
      const before = await client.cluster.memberList({});
      expect(before.members.map((m) => m.name).sort()).toEqual(['etcd-main-0', 'etcd-main-1', 'etcd-main-2']);

      // Member 2 loses its volume; its wrapper restarts and asks its sidecar again.
      await etcds.get(2)!.stop();
      etcds.delete(2);
      await rm(c.members[2]!.dataDir, { recursive: true, force: true });
      await client.put('after-loss').value('yes');
      const again = await runWrapper(sidecars[2]!.url, { binaries, workDir: join(dir, 'wrapper-2b') });
      expect(again.handshake.ok, sidecars[2]!.logs()).toBe(true);
      expect(sidecars[2]!.logs()).toMatch(/"action":"rejoin-as-learner"/);
      expect(again.etcd!.config['initial-cluster-state']).toBe('existing');
      etcds.set(2, again.etcd!);
      await again.etcd!.ready();

      // The sidecar's leadership loop sees a learner and promotes it once it is in sync. etcd applies the
      // promotion before the MemberPromote answer reaches the sidecar, so the member list can show a voter a
      // moment before the sidecar logs it: wait for both.
      await waitFor(
        async () => {
          if (!/promoted learner to a voting member/.test(sidecars[2]!.logs())) return undefined;
          const list = await client.cluster.memberList({});
          const own = list.members.find((m) => m.name === 'etcd-main-2');
          return own && !own.isLearner && list.members.length === 3 ? own : undefined;
        },
        'etcd-main-2 promoted by its sidecar',
        60_000,
      );
      const own = new Etcd3({ hosts: c.members[2]!.clientUrl });
      try {
        expect(await own.get('after-loss').string()).toBe('yes');
        expect(await own.getAll().prefix('k/').count()).toBe(50);
      } finally {
        own.close();
      }
      const metrics = await (await fetch(`${sidecars[2]!.url}/metrics`)).text();
      expect(metrics).toMatch(/etcdbr_cluster_size 3/);
      expect(metrics).toMatch(/etcdbr_is_learner 0/);
      expect(metrics).toMatch(/etcdbr_is_learner_count_total\{succeeded="true"\} 1/);
      expect(metrics).toMatch(/etcdbr_member_promote_duration_seconds_count\{succeeded="true"\} 1/);
    } finally {
      client.close();
    }
  }, 240_000);
});
