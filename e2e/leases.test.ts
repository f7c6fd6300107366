import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DRUID_V037_ETCD_ROLE_RULES } from '../test/support/etcd-druid-rbac.js';
import { ETCD_MEMBERS, LEASES } from '../test/support/fake-kube.js';
import { useFakeKube } from '../test/support/fake-kube-fixture.js';
import { startTestEtcd, type TestEtcd } from '../test/support/etcd.js';
import { LEASE_RENEWAL_FLAGS, localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';

type LeaseSpec = { holderIdentity?: string; renewTime?: string };
const specOf = (l: object | undefined): LeaseSpec => ((l as { spec?: unknown } | undefined)?.spec ?? {}) as LeaseSpec;

describe('etcdbrctl server renews snapshot and member leases in Kubernetes, with exactly etcd-druid v0.37.1’s permissions', () => {
  let etcd: TestEtcd;
  let dir: string;
  let sidecar: SidecarProcess | undefined;
  const ns = 'shoot--dev--e2e';
  const k8s = useFakeKube({
    // What etcd-druid v0.37.1 deploys: its Role for the etcd pods, and no EtcdMember CRD.
    rbac: { user: `system:serviceaccount:${ns}:etcd-main`, roles: [{ namespace: ns, rules: DRUID_V037_ETCD_ROLE_RULES }] },
    omit: [ETCD_MEMBERS],
    seed: (fake) => {
      for (const name of ['etcd-main-full-snap', 'etcd-main-delta-snap', 'etcd-main-0']) {
        fake.seed(LEASES, { metadata: { name, namespace: ns }, spec: {} });
      }
    },
  });

  beforeAll(async () => {
    etcd = await startTestEtcd();
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-leases-'));
    await writeFile(join(dir, 'kubeconfig'), k8s.fake.kubeconfig());
  });

  afterAll(async () => {
    await sidecar?.stop('SIGKILL');
    await etcd?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('sets the full lease to the full snapshot revision, the delta lease to the last delta, and the member lease holder', async () => {
    sidecar = await startSidecar(
      [
        `--endpoints=${etcd.clientUrl}`,
        ...localStoreFlags(join(dir, 'store'), join(dir, 'tmp')),
        '--schedule=0 0 1 1 *',
        '--delta-snapshot-period=1s',
        '--reelection-period=2s',
        ...LEASE_RENEWAL_FLAGS,
      ],
      { KUBECONFIG: join(dir, 'kubeconfig'), POD_NAMESPACE: ns, POD_NAME: 'etcd-main-0' },
    );
    const s = sidecar;
    const full = await waitFor(async () => {
      const r = await fetch(`${s.url}/snapshot/latest`);
      const j = (await r.json()) as { fullSnapshot: { lastRevision: number; createdOn: string } | null };
      return j.fullSnapshot ?? undefined;
    }, 'a full snapshot');
    const fullLease = await waitFor(async () => {
      const l = k8s.fake.read(LEASES, ns, 'etcd-main-full-snap');
      return specOf(l).holderIdentity !== undefined ? specOf(l) : undefined;
    }, 'full lease update');
    expect(fullLease.holderIdentity).toBe(String(full.lastRevision));
    // renewTime is the snapshot's creation time (full precision; the name keeps whole seconds).
    expect(Math.floor(new Date(String(fullLease.renewTime)).getTime() / 1000)).toBe(new Date(full.createdOn).getTime() / 1000);

    const client = new Etcd3({ hosts: etcd.clientUrl });
    for (let i = 0; i < 5; i++) await client.put(`k${i}`).value('v');
    const rev = Number((await client.get('foo').exec()).header.revision);
    client.close();
    const afterDelta = await waitFor(async () => {
      const l = specOf(k8s.fake.read(LEASES, ns, 'etcd-main-delta-snap'));
      return l.holderIdentity === String(rev) ? l : undefined;
    }, `delta lease holder ${rev}`);
    // No more writes: every idle delta period still renews the delta lease (druid's BackupReady wants its
    // renewTime within two delta periods), and the holder stays the last delta's revision.
    let renewTime = String(afterDelta.renewTime);
    for (let i = 0; i < 2; i++) {
      const renewed = await waitFor(
        async () => {
          const l = specOf(k8s.fake.read(LEASES, ns, 'etcd-main-delta-snap'));
          return l.renewTime !== undefined && Date.parse(l.renewTime) > Date.parse(renewTime) ? l : undefined;
        },
        `idle renewal ${i + 1} of the delta lease`,
      );
      expect(renewed.holderIdentity).toBe(String(rev));
      renewTime = String(renewed.renewTime);
    }

    const member = await waitFor(async () => {
      const l = k8s.fake.read(LEASES, ns, 'etcd-main-0');
      return typeof specOf(l).holderIdentity === 'string' ? l : undefined;
    }, 'member lease');
    expect(specOf(member).holderIdentity).toMatch(/^[0-9a-f]+:[0-9a-f]+:Leader$/);
    expect((member.metadata.annotations as Record<string, string> | undefined)?.['member.etcd.gardener.cloud/tls-enabled']).toBe('false');

    // Every lease request was allowed and none created a lease; the EtcdMember status was asked for once,
    // refused, reported in one info line, and not asked for again.
    const leaseRequests = k8s.fake.requestsMatching({ path: /\/leases\// });
    expect(leaseRequests.filter((r) => r.status !== 200)).toEqual([]);
    expect(k8s.fake.requestsMatching({ method: 'POST' })).toEqual([]);
    const members = k8s.fake.requestsMatching({ path: /\/etcdmembers\// });
    expect(members.map((r) => `${r.method} ${r.status}`)).toEqual(['GET 403']);
    const etcdMemberLines = s
      .logs()
      .split('\n')
      .filter((l) => l.includes('EtcdMember'))
      .map((l) => JSON.parse(l) as { level: string | number; msg: string });
    expect(etcdMemberLines).toHaveLength(1);
    expect(etcdMemberLines[0]).toMatchObject({ level: 'info' });
    expect(etcdMemberLines[0]!.msg).toContain('EtcdMember status publishing and the create-as-learner annotation are off');
  });
});
