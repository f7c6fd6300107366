/**
 * EtcdMember requests under etcd-druid v0.37.1's RBAC (no rule for EtcdMembers, no EtcdMember CRD): the fake API
 * answers as kube-apiserver does (403 Forbidden before routing; 404 for a resource that is not served), and the
 * sidecar reports that once, naming the resource and the rule to grant, then sends no further EtcdMember
 * request: no retry loop, and the leases on the same client go on.
 */
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/clock.js';
import { EtcdMemberStatusPublisher } from '../../src/cluster/member-status-publisher.js';
import { EtcdMemberAccess, ETCD_MEMBER_RBAC_RULES } from '../../src/k8s/etcd-member-access.js';
import { clearCreateAsLearner, readCreateAsLearner } from '../../src/k8s/etcd-member.js';
import { renewMemberLease } from '../../src/k8s/member-lease.js';
import { DRUID_V037_ETCD_ROLE_RULES } from '../support/etcd-druid-rbac.js';
import { ETCD_MEMBERS, type FakeRbac } from '../support/fake-kube.js';
import { useFakeKube } from '../support/fake-kube-fixture.js';
import { recordingLogger, seedLease } from './support.js';

const NS = 'shoot--dev--access';
const POD = 'etcd-main-0';
const SA = `system:serviceaccount:${NS}:etcd-main`;
const MEMBERS_PATH = new RegExp(`^/apis/druid\\.gardener\\.cloud/v1alpha1/namespaces/${NS}/etcdmembers/`);
const REF = { namespace: NS, name: POD };

const DRUID_V037_RULES = DRUID_V037_ETCD_ROLE_RULES;
const withEtcdMemberRules = (): FakeRbac => ({
  user: SA,
  roles: [{ namespace: NS, rules: [...DRUID_V037_RULES, ...ETCD_MEMBER_RBAC_RULES.map((r) => ({ ...r }))] }],
});

// What etcd-druid v0.37.1 deploys: its Role, and no EtcdMember CRD.
const k8s = useFakeKube({
  rbac: { user: SA, roles: [{ namespace: NS, rules: DRUID_V037_RULES }] },
  omit: [ETCD_MEMBERS],
  seed: (fake) => seedLease(fake, NS, POD),
});

/** A publisher and the create-as-learner calls on one access check, as the server wires them. */
function sidecarParts() {
  const clock = new FakeClock('2026-05-06T07:00:00.000Z');
  const logger = recordingLogger();
  const access = new EtcdMemberAccess(k8s.kube, logger);
  const publisher = new EtcdMemberStatusPublisher({
    etcdMembers: access,
    namespace: NS,
    name: POD,
    clusterSize: 3,
    peerTLSEnabled: false,
    clock,
    logger,
    retryMinMs: 1_000,
    retryMaxMs: 60_000,
    missingRetryMs: 30_000,
    sizeRefreshMs: 0,
  });
  return { clock, logger, access, publisher };
}

const memberRequests = () => k8s.fake.requestsMatching({ path: MEMBERS_PATH });
const infoLines = (logger: ReturnType<typeof recordingLogger>, text: string) =>
  logger.lines.filter((l) => l.msg.includes(text)).map((l) => ({ level: l.level, msg: l.msg, obj: l.obj }));

describe('EtcdMember access under etcd-druid v0.37.1 RBAC', () => {
  it('a 403 is reported once, naming the resource and the rule; then no EtcdMember request, no warning, leases unaffected', async () => {
    const { clock, logger, access, publisher } = sidecarParts();
    publisher.start();
    // The initializer asks for the create-as-learner annotation at the same time.
    expect(await readCreateAsLearner(access, REF, clock, 5_000)).toBe(false);
    await publisher.whenIdle();
    // Both reached the API server before either had the answer, or the second never went: one or two GETs.
    const first = memberRequests();
    expect(first.length).toBeGreaterThanOrEqual(1);
    expect(first.every((r) => r.method === 'GET' && r.status === 403)).toBe(true);
    expect(access.usable).toBe(false);

    const lines = infoLines(logger, 'EtcdMember status publishing and the create-as-learner annotation are off');
    expect(lines).toHaveLength(1);
    const [line] = lines;
    expect(line!.level).toBe('info');
    expect(line!.msg).toContain(`forbids get etcdmembers on druid.gardener.cloud/v1alpha1 etcdmembers in namespace ${NS} (HTTP 403`);
    expect(line!.msg).toContain('{apiGroups: [druid.gardener.cloud], resources: [etcdmembers], verbs: [get, patch]}');
    expect(line!.msg).toContain('{apiGroups: [druid.gardener.cloud], resources: [etcdmembers/status], verbs: [patch]}');
    expect(line!.msg).toContain('deploy/example/optional/etcdmember-rbac.yaml');
    expect(line!.obj).toMatchObject({ resource: 'druid.gardener.cloud/v1alpha1 etcdmembers', namespace: NS, status: 403 });

    // Hours of events and retry periods later: nothing more is sent or logged about it.
    for (let i = 0; i < 10; i++) {
      publisher.onEtcdStatus({ memberId: '8e9e05c52164694d', leaderId: '8e9e05c52164694d', isLearner: false, dbSize: i, dbSizeInUse: i });
      await clock.advanceAsync(60 * 60_000);
      await publisher.whenIdle();
    }
    expect(await readCreateAsLearner(access, REF, clock, 5_000)).toBe(false);
    await clearCreateAsLearner(access, REF, clock, 5_000);
    expect(memberRequests()).toHaveLength(first.length);
    expect(publisher.retryPending).toBe(false);
    expect(logger.warnings()).toEqual([]);
    expect(logger.lines.filter((l) => /EtcdMember/.test(l.msg))).toHaveLength(1);
    // The model still follows events (the state is there if the sidecar is asked), it is just not sent.
    expect(publisher.state).toMatchObject({ state: 'Started' });

    // The member lease on the same client and the same Role: renewed as before, without create.
    await renewMemberLease({
      kube: k8s.kube,
      namespace: NS,
      memberName: POD,
      memberIdentity: async () => ({ memberId: '8e9e05c52164694d', clusterId: 'cdf818194e3a8c32', isLeader: true }),
      peerTLSEnabled: false,
      clock,
      logger,
      heartbeatMs: 10_000,
      timeoutMs: 5_000,
    });
    expect(k8s.fake.requestsMatching({ path: /\/leases\// }).map((r) => `${r.method} ${r.status}`)).toEqual(['GET 200', 'PATCH 200']);
    await publisher.stop();
    expect(memberRequests()).toHaveLength(first.length);
  });

  it('with the rule granted but no EtcdMember CRD, the 404 for the resource itself is reported once the same way', async () => {
    k8s.fake.setRbac(withEtcdMemberRules());
    const { clock, logger, access, publisher } = sidecarParts();
    publisher.start();
    await publisher.whenIdle();
    expect(memberRequests().map((r) => `${r.method} ${r.status}`)).toEqual(['GET 404']);
    const lines = infoLines(logger, 'are off until the sidecar restarts');
    expect(lines).toHaveLength(1);
    expect(lines[0]!.msg).toContain('does not serve druid.gardener.cloud/v1alpha1 etcdmembers (HTTP 404 for the resource itself');
    await clock.advanceAsync(10 * 60_000);
    await clearCreateAsLearner(access, REF, clock, 5_000);
    await publisher.stop();
    expect(memberRequests()).toHaveLength(1);
    expect(logger.warnings()).toEqual([]);
  });

  it('with the rule and the CRD, an EtcdMember not created yet is no verdict: looked for again until it exists', async () => {
    k8s.fake.setRbac(withEtcdMemberRules());
    k8s.fake.setServed(ETCD_MEMBERS, true);
    const { clock, logger, access, publisher } = sidecarParts();
    publisher.start();
    await publisher.whenIdle();
    expect(access.usable).toBe(true);
    expect(await readCreateAsLearner(access, REF, clock, 5_000)).toBe(false);
    expect(publisher.retryPending).toBe(true);
    k8s.fake.seed(ETCD_MEMBERS, {
      apiVersion: 'druid.gardener.cloud/v1alpha1',
      kind: 'EtcdMember',
      metadata: { name: POD, namespace: NS },
    });
    await clock.advanceAsync(30_000);
    await publisher.whenIdle();
    expect(k8s.fake.read(ETCD_MEMBERS, NS, POD)?.status).toMatchObject({ transitions: [{ state: 'New' }] });
    expect(logger.warnings().filter((w) => w.includes('does not exist yet'))).toHaveLength(1);
    expect(infoLines(logger, 'are off until the sidecar restarts')).toEqual([]);
    await publisher.stop();
  });

  it('a 403 only on writing the status (get granted) also ends publishing after one line', async () => {
    k8s.fake.setRbac({
      user: SA,
      roles: [
        {
          namespace: NS,
          rules: [...DRUID_V037_RULES, { apiGroups: ['druid.gardener.cloud'], resources: ['etcdmembers'], verbs: ['get'] }],
        },
      ],
    });
    k8s.fake.setServed(ETCD_MEMBERS, true);
    k8s.fake.seed(ETCD_MEMBERS, {
      apiVersion: 'druid.gardener.cloud/v1alpha1',
      kind: 'EtcdMember',
      metadata: { name: POD, namespace: NS },
    });
    const { clock, logger, publisher } = sidecarParts();
    publisher.start();
    await publisher.whenIdle();
    expect(memberRequests().map((r) => `${r.method} ${r.status}`)).toEqual(['GET 200', 'PATCH 403']);
    const lines = infoLines(logger, 'are off until the sidecar restarts');
    expect(lines).toHaveLength(1);
    expect(lines[0]!.msg).toContain('forbids patch etcdmembers/status');
    await clock.advanceAsync(10 * 60_000);
    await publisher.stop();
    expect(memberRequests()).toHaveLength(2);
  });

  it('a 401 (credentials) or a 5xx is no verdict: retried as before', async () => {
    k8s.fake.setRbac(withEtcdMemberRules());
    k8s.fake.setServed(ETCD_MEMBERS, true);
    k8s.fake.seed(ETCD_MEMBERS, {
      apiVersion: 'druid.gardener.cloud/v1alpha1',
      kind: 'EtcdMember',
      metadata: { name: POD, namespace: NS },
    });
    k8s.fake.failNext(1, { status: 401 }, { path: MEMBERS_PATH });
    k8s.fake.failNext(1, { status: 503 }, { path: MEMBERS_PATH });
    const { clock, access, publisher } = sidecarParts();
    publisher.start();
    await publisher.whenIdle();
    await clock.advanceAsync(1_000);
    await publisher.whenIdle();
    await clock.advanceAsync(2_000);
    await publisher.whenIdle();
    expect(access.usable).toBe(true);
    expect(memberRequests().map((r) => `${r.method} ${r.status}`)).toEqual(['GET 401', 'GET 503', 'GET 200', 'PATCH 200']);
    await publisher.stop();
  });
});
