/** Member lease heartbeat (upstream `pkg/health/heartbeat/heartbeat.go`) through our Kubernetes client (src/k8s/http.ts) against the fake API. */
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/clock.js';
import { isKubeError } from '../../src/k8s/errors.js';
import {
  MemberLeaseHeartbeat,
  PEER_URL_TLS_ENABLED_ANNOTATION,
  formatMemberIdentity,
  memberLeaseHasHolder,
  renewMemberLease,
  type MemberIdentity,
  type MemberLeaseOptions,
} from '../../src/k8s/member-lease.js';
import { LEASES } from '../support/fake-kube.js';
import { micro, recordingLogger, seedLease } from './support.js';
import { waitFor } from '../support/wait.js';
import { useFakeKube } from '../support/fake-kube-fixture.js';

const NS = 'shoot--dev--one';
const MEMBER = 'etcd-main-0';
const leasePath = `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/${MEMBER}`;

const k8s = useFakeKube();

// As EtcdClient's status reports them (hex).
const MEMBER_ID = '8e9e05c52164694d';
const CLUSTER_ID = 'cdf818194e3a8c32';

function options(overrides: Partial<MemberLeaseOptions> = {}): MemberLeaseOptions & { calls: number } {
  const opts = {
    calls: 0,
    kube: k8s.kube,
    namespace: NS,
    memberName: MEMBER,
    memberIdentity: async (): Promise<MemberIdentity> => {
      opts.calls++;
      return { memberId: MEMBER_ID, clusterId: CLUSTER_ID, isLeader: true };
    },
    peerTLSEnabled: true,
    clock: new FakeClock('2026-05-06T07:08:09.123Z'),
    logger: recordingLogger(),
    heartbeatMs: 30_000,
    timeoutMs: 5_000,
    ...overrides,
  };
  return opts;
}

describe('member lease identity', () => {
  it('formats <memberID hex>:<clusterID hex>:Leader|Member like upstream %x', () => {
    expect(formatMemberIdentity({ memberId: '8e9e05c52164694d', clusterId: 'cdf818194e3a8c32', isLeader: true })).toBe(
      '8e9e05c52164694d:cdf818194e3a8c32:Leader',
    );
    expect(formatMemberIdentity({ memberId: '00AB', clusterId: '0x1', isLeader: false })).toBe('ab:1:Member');
    expect(() => formatMemberIdentity({ memberId: 'xyz', clusterId: '1', isLeader: false })).toThrow(/not hexadecimal/);
  });
});

describe('renewMemberLease', () => {
  it('writes holder, renewTime = now and the TLS annotation by merge patch, keeping other fields', async () => {
    seedLease(k8s.fake, NS, MEMBER, { leaseDurationSeconds: 40 });
    k8s.fake.write(LEASES, NS, MEMBER, (o) => {
      o.metadata.annotations = { 'other/annotation': 'kept' };
    });
    const opts = options();
    const holder = await renewMemberLease(opts);
    expect(holder).toBe('8e9e05c52164694d:cdf818194e3a8c32:Leader');
    const lease = k8s.fake.read(LEASES, NS, MEMBER)!;
    expect(lease.spec).toEqual({ leaseDurationSeconds: 40, holderIdentity: holder, renewTime: '2026-05-06T07:08:09.123000Z' });
    expect(lease.metadata.annotations).toEqual({ 'other/annotation': 'kept', [PEER_URL_TLS_ENABLED_ANNOTATION]: 'true' });
    const [patch] = k8s.fake.requestsMatching({ method: 'PATCH', path: leasePath });
    expect(patch?.contentType).toBe('application/merge-patch+json');
    expect((patch?.body as { metadata: object }).metadata).not.toHaveProperty('resourceVersion');
  });

  it('a follower writes Member and "false" without peer TLS; the flag function is re-read each time', async () => {
    seedLease(k8s.fake, NS, MEMBER);
    let tls = false;
    const opts = options({
      memberIdentity: async () => ({ memberId: '1a', clusterId: '2b', isLeader: false }),
      peerTLSEnabled: () => tls,
    });
    await renewMemberLease(opts);
    expect(k8s.fake.read(LEASES, NS, MEMBER)!.spec).toMatchObject({ holderIdentity: '1a:2b:Member' });
    expect(k8s.fake.read(LEASES, NS, MEMBER)!.metadata.annotations).toEqual({ [PEER_URL_TLS_ENABLED_ANNOTATION]: 'false' });
    tls = true;
    await renewMemberLease(opts);
    expect(k8s.fake.read(LEASES, NS, MEMBER)!.metadata.annotations).toEqual({ [PEER_URL_TLS_ENABLED_ANNOTATION]: 'true' });
  });

  it('a missing lease is E_KUBE_NOT_FOUND naming it, and etcd is not asked', async () => {
    const opts = options();
    const err = await renewMemberLease(opts).catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_NOT_FOUND')).toBe(true);
    expect((err as Error).message).toContain(`lease ${NS}/${MEMBER} (member lease) does not exist`);
    expect(opts.calls).toBe(0);
  });

  it('an etcd status failure fails the renewal without touching the lease', async () => {
    seedLease(k8s.fake, NS, MEMBER);
    const before = k8s.fake.read(LEASES, NS, MEMBER);
    const err = await renewMemberLease(options({ memberIdentity: () => Promise.reject(new Error('context deadline exceeded')) })).catch(
      (e: unknown) => e,
    );
    expect((err as Error).message).toContain('cannot get the etcd member status: context deadline exceeded');
    expect(k8s.fake.read(LEASES, NS, MEMBER)).toEqual(before);
  });
});

describe('MemberLeaseHeartbeat (upstream RenewMemberLeasePeriodically)', () => {
  it('renews every heartbeat, warns on failures and keeps going, stops cleanly', async () => {
    seedLease(k8s.fake, NS, MEMBER);
    const clock = new FakeClock('2026-05-06T00:00:00Z');
    const logger = recordingLogger();
    const hb = new MemberLeaseHeartbeat(options({ clock, logger }));
    try {
      hb.start();
      clock.advance(29_999);
      await hb.whenIdle();
      expect(k8s.fake.requests).toHaveLength(0);

      clock.advance(1);
      await hb.whenIdle();
      expect(k8s.fake.read(LEASES, NS, MEMBER)!.spec).toMatchObject({ renewTime: micro(new Date('2026-05-06T00:00:30Z')) });

      k8s.fake.failNext(1, { status: 503 }, { method: 'PATCH' });
      clock.advance(30_000);
      await hb.whenIdle();
      expect(logger.warnings()).toHaveLength(1);
      expect(logger.warnings()[0]).toContain('Member lease renewal failed');
      expect(logger.warnings()[0]).toContain('HTTP 503');

      clock.advance(30_000);
      await hb.whenIdle();
      expect(k8s.fake.read(LEASES, NS, MEMBER)!.spec).toMatchObject({ renewTime: micro(new Date('2026-05-06T00:01:30Z')) });
      expect(clock.pending).toBeGreaterThan(0);
    } finally {
      await hb.stop();
    }
    expect(clock.pending).toBe(0);
    expect(hb.isRunning).toBe(false);
  });

  it('stop aborts a renewal in flight without a warning', async () => {
    seedLease(k8s.fake, NS, MEMBER);
    const clock = new FakeClock(0);
    const logger = recordingLogger();
    const hb = new MemberLeaseHeartbeat(options({ clock, logger }));
    k8s.fake.stallNext(1, { method: 'GET', path: leasePath });
    hb.start();
    clock.advance(30_000);
    await waitFor(() => k8s.fake.requests.length > 0, 'the renewal to reach the API server', 5_000, 5);
    await hb.stop();
    expect(logger.warnings()).toEqual([]);
    expect(clock.pending).toBe(0);
  });

  it('refuses a zero heartbeat or an empty namespace / member name', () => {
    expect(() => new MemberLeaseHeartbeat(options({ heartbeatMs: 0 }))).toThrow(/greater than 0/);
    expect(() => new MemberLeaseHeartbeat(options({ namespace: '' }))).toThrow(/POD_NAMESPACE/);
    expect(() => new MemberLeaseHeartbeat(options({ memberName: '' }))).toThrow(/POD_NAME/);
  });
});

describe('memberLeaseHasHolder (initializer fallback)', () => {
  it('is true only when the lease has a holderIdentity', async () => {
    const clock = new FakeClock(0);
    seedLease(k8s.fake, NS, MEMBER);
    expect(await memberLeaseHasHolder(k8s.kube, { namespace: NS, name: MEMBER }, clock, 5_000)).toBe(false);
    k8s.fake.write(LEASES, NS, MEMBER, (o) => {
      (o.spec as Record<string, unknown>).holderIdentity = '1:2:Member';
    });
    expect(await memberLeaseHasHolder(k8s.kube, { namespace: NS, name: MEMBER }, clock, 5_000)).toBe(true);
    const err = await memberLeaseHasHolder(k8s.kube, { namespace: NS, name: 'etcd-main-7' }, clock, 5_000).catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_NOT_FOUND')).toBe(true);
  });
});
