/**
 * Scale-up 1 → 3 the way etcd-druid does it, through sidecar processes and the etcd-wrapper protocol: one
 * member runs alone; then the etcd config of every member lists three members and the two new pods start
 * at once. Each new sidecar decides in /initialization to join as a learner, serves a /config that lets its
 * etcd join the running cluster, and promotes its member once etcd has it in sync. Learners join one at a
 * time and all three end as voting members with the data.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { startTestCluster, type TestCluster } from '../test/support/cluster.js';
import { etcdBinaries } from '../test/support/etcd.js';
import { writeTemplate } from '../test/cluster/multinode-support.js';
import { openLocalStore } from '../test/support/local-store.js';
import { readChain, startMemberSidecar } from './support/multinode.js';
import { localStoreFlags, waitFor, type SidecarProcess } from './support/sidecar.js';
import { runWrapper, type ConfiguredEtcd } from './support/wrapper.js';

interface MemberView {
  name: string;
  peer: string;
  isLearner: boolean;
}

describe('scale-up 1 → 3 through sidecars and the etcd-wrapper protocol', () => {
  let cluster: TestCluster | undefined;
  let dir = '';
  const sidecars: SidecarProcess[] = [];
  const etcds: ConfiguredEtcd[] = [];
  let failed = true;

  afterAll(async () => {
    if (failed)
      for (const [i, s] of sidecars.entries()) process.stderr.write(`--- sidecar ${i} log (tail) ---\n${s.logs().slice(-8_000)}\n`);
    // Sidecars first: one whose etcd is gone lingers in the etcd client's watch reconnect backoff (up to 30 s).
    await Promise.all(sidecars.map((s) => s.stop()));
    await Promise.all(etcds.map((e) => e.stop(5_000)));
    await cluster?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('adds the two new members as learners one at a time and ends with three voting members', async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-scaleup-'));
    const storeDir = join(dir, 'store');
    cluster = await startTestCluster(3, { start: false });
    const c = cluster;
    const binaries = await etcdBinaries();
    const sidecarFor = (i: number, template: string) =>
      startMemberSidecar(c, i, template, [
        '--reelection-period=1500ms',
        ...localStoreFlags(storeDir, join(dir, `tmp-${i}`)),
        '--delta-snapshot-period=1s',
        '--garbage-collection-period=1h',
      ]);

    // One replica: the etcd config names only member 0.
    sidecars.push(await sidecarFor(0, await writeTemplate(c, 0, dir, { members: [0] })));
    const first = await runWrapper(sidecars[0]!.url, { binaries, workDir: join(dir, 'wrapper-0') });
    expect(first.handshake.ok, sidecars[0]!.logs()).toBe(true);
    expect(String(first.etcd!.config['initial-cluster']).split(',')).toHaveLength(1);
    etcds.push(first.etcd!);
    await first.etcd!.ready();
    const client = new Etcd3({ hosts: c.members[0]!.clientUrl });
    try {
      for (let i = 0; i < 50; i++) await client.put(`k/${i}`).value(String(i));

      // etcd-druid scales up: the ConfigMap of every member now lists three members, and two pods start.
      const templates = await Promise.all([0, 1, 2].map((i) => writeTemplate(c, i, dir)));
      sidecars.push(await sidecarFor(1, templates[1]!), await sidecarFor(2, templates[2]!));

      // Watch the member list the whole time: etcd 3.4 admits one learner at a time, and our sidecars must
      // cope with "too many learners" by waiting, not by failing initialization. Sampled every 100 ms (etcd
      // has no membership watch); a sampler, not a wait: the test waits on the wrappers below.
      const views: MemberView[][] = [];
      let watching = true;
      const watcher = (async () => {
        while (watching) {
          try {
            const list = await client.cluster.memberList({});
            views.push(list.members.map((m) => ({ name: m.name, peer: m.peerURLs[0] ?? '', isLearner: Boolean(m.isLearner) })));
          } catch {
            /* a member change in progress */
          }
          await new Promise((r) => setTimeout(r, 100));
        }
      })();

      let joined: ConfiguredEtcd[];
      try {
        joined = await Promise.all(
          [1, 2].map(async (i) => {
            const r = await runWrapper(sidecars[i]!.url, { binaries, workDir: join(dir, `wrapper-${i}`) });
            expect(r.handshake.ok, sidecars[i]!.logs()).toBe(true);
            expect(r.etcd!.config['initial-cluster-state']).toBe('existing');
            etcds.push(r.etcd!);
            await r.etcd!.ready();
            return r.etcd!;
          }),
        );
        await waitFor(
          async () => {
            // etcd applies a promotion before the sidecar gets the answer: also wait for both sidecars to log it.
            if (![1, 2].every((i) => /promoted learner to a voting member/.test(sidecars[i]!.logs()))) return undefined;
            const list = await client.cluster.memberList({});
            return list.members.length === 3 && list.members.every((m) => !m.isLearner && m.name !== '') ? true : undefined;
          },
          'three voting members, each promotion logged by its sidecar',
          180_000,
        );
      } finally {
        watching = false;
        await watcher;
      }

      const maxLearners = Math.max(...views.map((v) => v.filter((m) => m.isLearner).length));
      expect(maxLearners, 'never two learners at once').toBe(1);
      const peerOf = (i: number) => c.members[i]!.peerUrl;
      for (const i of [1, 2]) {
        expect(
          views.some((v) => v.some((m) => m.peer === peerOf(i) && m.isLearner)),
          `member ${i} was a learner first`,
        ).toBe(true);
        expect(sidecars[i]!.logs()).toMatch(/"action":"join-as-learner"/);
        expect(sidecars[i]!.logs()).toMatch(/promoted learner to a voting member/);
      }
      // Learners one at a time: the second learner appeared only after the first was promoted.
      const learnerOrder = views.map((v) => v.find((m) => m.isLearner)?.peer).filter((p): p is string => p !== undefined);
      const firstPeer = learnerOrder[0]!;
      const secondPeer = learnerOrder.find((p) => p !== firstPeer)!;
      const firstPromoted = views.findIndex((v) => v.some((m) => m.peer === firstPeer && !m.isLearner));
      const secondAdded = views.findIndex((v) => v.some((m) => m.peer === secondPeer));
      expect(firstPromoted).toBeGreaterThanOrEqual(0);
      // The same sample may show both (the membership is sampled every ~100 ms); etcd 3.5 refuses a second
      // learner, so in that sample the promotion came first.
      expect(secondAdded, 'second member added after the first was promoted').toBeGreaterThanOrEqual(firstPromoted);

      await client.put('after-scale-up').value('yes');
      for (const e of joined!) {
        const own = new Etcd3({ hosts: e.clientUrl });
        try {
          expect(await own.getAll().prefix('k/').count()).toBe(50);
          expect(await own.get('after-scale-up').string()).toBe('yes');
        } finally {
          own.close();
        }
      }
      // Joining as a learner is routine: nothing on the way may be reported as an error (a learner refuses
      // most RPCs, e.g. the member list of the start-up peer URL check).
      for (const [i, s] of sidecars.entries()) {
        const errors = s
          .logs()
          .split('\n')
          .filter((l) => l.includes('"level":"error"'));
        expect(errors, `errors logged by sidecar ${i}`).toEqual([]);
      }
      for (const i of [1, 2]) {
        const metrics = await (await fetch(`${sidecars[i]!.url}/metrics`)).text();
        expect(metrics).toMatch(/etcdbr_is_learner 0/);
        expect(metrics).toMatch(/etcdbr_member_promote_duration_seconds_count\{succeeded="true"\} 1/);
      }
      const store = await openLocalStore(storeDir, dir);
      try {
        expect((await readChain(store)).problems).toEqual([]);
      } finally {
        await store.close();
      }
    } finally {
      client.close();
    }
    failed = false;
  }, 300_000);
});
