/**
 * The server's multi-node wiring without etcd: what `/config` renders for n members (initial-cluster
 * filtered to existing members plus self, state new or existing), and the EtcdMember create-as-learner
 * annotation read from and cleared in a fake Kubernetes API.
 */
import { podEnvironment } from '../../src/config/pod-environment.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { FakeClock, systemClock } from '../../src/clock.js';
import { CREATE_AS_LEARNER_ANNOTATION, clearCreateAsLearner, readCreateAsLearner } from '../../src/k8s/etcd-member.js';
import { EtcdMemberAccess } from '../../src/k8s/etcd-member-access.js';
import type { ClusterClientFactory } from '../../src/cluster/members.js';
import type { EtcdMember } from '../../src/etcd/index.js';
import { MultiNode } from '../../src/cluster/multinode.js';
import type { EtcdConnectionConfig } from '../../src/config/types.js';
import { readEtcdConfigTemplate, renderMemberConfig } from '../../src/config/etcd-config.js';
import { Metrics } from '../../src/metrics.js';
import { fakeEtcdClient } from '../support/etcd-client.js';
import { ETCD_MEMBERS } from '../support/fake-kube.js';
import { collectingLogger } from './multinode-support.js';
import { useFakeKube } from '../support/fake-kube-fixture.js';

const CONNECTION = { serviceEndpoints: [], connectionTimeout: 5_000, insecureTransport: true } as unknown as EtcdConnectionConfig;
const peer = (i: number) => `https://etcd-main-${i}.etcd-main-peer.ns.svc:2380`;
const clientUrl = (i: number) => `https://etcd-main-${i}.etcd-main-peer.ns.svc:2379`;

function listing(members: EtcdMember[] | Error): ClusterClientFactory {
  return async () =>
    fakeEtcdClient({
      memberList: async () => {
        if (members instanceof Error) throw members;
        return { memberId: members[0]?.id ?? '0', clusterId: 'c1', members };
      },
    });
}

const voter = (i: number): EtcdMember => ({
  id: (100 + i).toString(16),
  name: `etcd-main-${i}`,
  peerUrls: [peer(i)],
  clientUrls: [clientUrl(i)],
  isLearner: false,
});

describe('/config for n members', () => {
  let dir: string;
  let template: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-config-n-'));
    template = join(dir, 'etcd.conf.yaml');
    await writeFile(
      template,
      stringify({
        'data-dir': '/var/etcd/data/new.etcd',
        'advertise-client-urls': Object.fromEntries([0, 1, 2].map((i) => [`etcd-main-${i}`, [clientUrl(i)]])),
        'initial-advertise-peer-urls': Object.fromEntries([0, 1, 2].map((i) => [`etcd-main-${i}`, [peer(i)]])),
        'initial-cluster': [0, 1, 2].map((i) => `etcd-main-${i}=${peer(i)}`).join(','),
        'initial-cluster-state': 'new',
        'initial-cluster-token': 'etcd-cluster',
      }),
    );
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const render = async (pod: number, members: EtcdMember[] | Error, decide?: (mn: MultiNode) => Promise<void>) => {
    const mn = new MultiNode({
      pod: podEnvironment({ ETCD_CONF: template, POD_NAME: `etcd-main-${pod}` }),
      connection: CONNECTION,
      namespace: '',
      clock: systemClock,
      logger: collectingLogger().logger,
      metrics: new Metrics({ defaultMetrics: false }),
      newClient: listing(members),
    });
    await decide?.(mn);
    const view = await mn.clusterView().catch(() => ({ existingMembers: [], learnerPresent: false }));
    return renderMemberConfig(await readEtcdConfigTemplate(template), `etcd-main-${pod}`, view);
  };

  it('fresh bootstrap (etcd not reachable): every peer, state new', async () => {
    const cfg = await render(1, new Error('ECONNREFUSED'));
    expect(cfg['initial-cluster']).toBe([0, 1, 2].map((i) => `etcd-main-${i}=${peer(i)}`).join(','));
    expect(cfg['initial-cluster-state']).toBe('new');
    expect(cfg.name).toBe('etcd-main-1');
    expect(cfg['initial-advertise-peer-urls']).toBe(peer(1));
    expect(cfg['advertise-client-urls']).toBe(clientUrl(1));
  });

  it('scale-up 1→3: the new learner (no name yet) counts, the third member is left out, state existing', async () => {
    const learner: EtcdMember = { id: '7', name: '', peerUrls: [peer(1)], clientUrls: [], isLearner: true };
    const cfg = await render(1, [voter(0), learner]);
    expect(cfg['initial-cluster']).toBe(`etcd-main-0=${peer(0)},etcd-main-1=${peer(1)}`);
    expect(cfg['initial-cluster-state']).toBe('existing');
  });

  it('restart of a member of a healthy cluster: all members, state new (etcd ignores it with a WAL)', async () => {
    const cfg = await render(2, [voter(0), voter(1), voter(2)]);
    expect(String(cfg['initial-cluster']).split(',')).toHaveLength(3);
    expect(cfg['initial-cluster-state']).toBe('new');
  });

  it("this member's own decision to join as a learner makes the state existing even when the list cannot be read", async () => {
    const cfg = await render(2, new Error('ECONNREFUSED'), async (mn) => {
      const o = await mn.initOptions();
      o!.multiNode.onDecision!({ action: 'join-as-learner', reason: 'test' });
    });
    expect(cfg['initial-cluster-state']).toBe('existing');
  });
});

describe('EtcdMember create-as-learner annotation', () => {
  const k8s = useFakeKube();

  it('reads it, clears it after promotion, and treats a missing EtcdMember as "no annotation"', async () => {
    const clock = new FakeClock(0);
    const ref = { namespace: 'shoot--a', name: 'etcd-main-2' };
    const access = new EtcdMemberAccess(k8s.kube, collectingLogger().logger);
    expect(await readCreateAsLearner(access, ref, clock, 5_000)).toBe(false);
    k8s.fake.seed(ETCD_MEMBERS, {
      apiVersion: 'druid.gardener.cloud/v1alpha1',
      kind: 'EtcdMember',
      metadata: { name: ref.name, namespace: ref.namespace, annotations: { [CREATE_AS_LEARNER_ANNOTATION]: 'true', other: 'kept' } },
    });
    expect(await readCreateAsLearner(access, ref, clock, 5_000)).toBe(true);
    await clearCreateAsLearner(access, ref, clock, 5_000);
    const obj = k8s.fake.read(ETCD_MEMBERS, ref.namespace, ref.name)!;
    expect((obj.metadata as { annotations?: Record<string, string> }).annotations).toEqual({ other: 'kept' });
    expect(await readCreateAsLearner(access, ref, clock, 5_000)).toBe(false);
    await clearCreateAsLearner(access, { namespace: 'shoot--a', name: 'missing' }, clock, 5_000);
  });
});
