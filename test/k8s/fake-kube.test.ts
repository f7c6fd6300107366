/**
 * The fake API server against the documented REST semantics, with plain fetch, so the lease tests rest on a
 * fake that behaves like kube-apiserver rather than like our client code expects.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DRUID_V037_ETCD_ROLE_RULES } from '../support/etcd-druid-rbac.js';
import { ETCD_MEMBERS, FakeKubeApiServer, LEASES } from '../support/fake-kube.js';
import { seedLease } from './support.js';

const NS = 'shoot--dev--one';
const leasePath = (name: string, ns = NS): string => `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases/${name}`;
const memberPath = (name: string): string => `/apis/druid.gardener.cloud/v1alpha1/namespaces/${NS}/etcdmembers/${name}`;

let fake: FakeKubeApiServer;

beforeAll(async () => {
  fake = await FakeKubeApiServer.start();
});
afterAll(async () => {
  await fake?.stop();
});

async function call(
  method: string,
  path: string,
  body?: unknown,
  contentType = 'application/json',
): Promise<{ status: number; body: any }> {
  const res = await fetch(`${fake.url}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': contentType },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}
const merge = (path: string, body: unknown) => call('PATCH', path, body, 'application/merge-patch+json');

describe('fake kube-apiserver: Lease', () => {
  beforeEach(() => {
    fake.remove(LEASES, NS, 'l1');
    seedLease(fake, NS, 'l1', { leaseDurationSeconds: 40 });
  });

  it('GET returns the object with server metadata; a missing one is a 404 Status', async () => {
    const got = await call('GET', leasePath('l1'));
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'l1', namespace: NS, labels: { 'app.kubernetes.io/managed-by': 'etcd-druid' } },
      spec: { leaseDurationSeconds: 40 },
    });
    expect(got.body.metadata.uid).toMatch(/^[0-9a-f-]{36}$/);
    expect(got.body.metadata.resourceVersion).toMatch(/^\d+$/);

    const missing = await call('GET', leasePath('nope'));
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: 'leases.coordination.k8s.io "nope" not found',
      reason: 'NotFound',
      details: { name: 'nope', group: 'coordination.k8s.io', kind: 'leases' },
      code: 404,
    });
    expect((await call('GET', '/apis/coordination.k8s.io/v1/namespaces/x/widgets/a')).status).toBe(404);
  });

  it('merge patch changes only the given fields, deletes nulls, bumps resourceVersion and keeps metadata', async () => {
    const before = fake.read(LEASES, NS, 'l1')!;
    const res = await merge(leasePath('l1'), {
      metadata: { annotations: { a: 'b' } },
      spec: { holderIdentity: '42', renewTime: '2026-01-02T03:04:05.123000Z', leaseDurationSeconds: null },
    });
    expect(res.status).toBe(200);
    expect(res.body.spec).toEqual({ holderIdentity: '42', renewTime: '2026-01-02T03:04:05.123000Z' });
    expect(res.body.metadata.annotations).toEqual({ a: 'b' });
    expect(res.body.metadata.labels).toEqual(before.metadata.labels);
    expect(res.body.metadata.uid).toBe(before.metadata.uid);
    expect(res.body.metadata.creationTimestamp).toBe(before.metadata.creationTimestamp);
    expect(Number(res.body.metadata.resourceVersion)).toBeGreaterThan(Number(before.metadata.resourceVersion));
    expect(fake.read(LEASES, NS, 'l1')).toEqual(res.body);
  });

  it('strategic merge patch behaves like a merge patch for Lease fields', async () => {
    const res = await call('PATCH', leasePath('l1'), { spec: { holderIdentity: 'x' } }, 'application/strategic-merge-patch+json');
    expect(res.status).toBe(200);
    expect(res.body.spec).toEqual({ leaseDurationSeconds: 40, holderIdentity: 'x' });
  });

  it('json patch applies operations; a failing test op is 422', async () => {
    const ok = await call(
      'PATCH',
      leasePath('l1'),
      [{ op: 'add', path: '/spec/holderIdentity', value: '7' }],
      'application/json-patch+json',
    );
    expect(ok.status).toBe(200);
    expect(ok.body.spec.holderIdentity).toBe('7');
    const bad = await call(
      'PATCH',
      leasePath('l1'),
      [{ op: 'test', path: '/spec/holderIdentity', value: '8' }],
      'application/json-patch+json',
    );
    expect(bad.status).toBe(422);
    expect(bad.body.reason).toBe('Invalid');
    const notArray = await call('PATCH', leasePath('l1'), { spec: {} }, 'application/json-patch+json');
    expect(notArray.status).toBe(400);
  });

  it('a patch carrying a stale resourceVersion is a 409 Conflict; the current one succeeds', async () => {
    const rv = fake.read(LEASES, NS, 'l1')!.metadata.resourceVersion;
    fake.write(LEASES, NS, 'l1', (o) => {
      (o.spec as Record<string, unknown>).holderIdentity = 'other';
    });
    const stale = await merge(leasePath('l1'), { metadata: { resourceVersion: rv }, spec: { holderIdentity: 'me' } });
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({
      kind: 'Status',
      reason: 'Conflict',
      code: 409,
      message:
        'Operation cannot be fulfilled on leases.coordination.k8s.io "l1": the object has been modified; please apply your changes to the latest version and try again',
      details: { name: 'l1', group: 'coordination.k8s.io', kind: 'leases' },
    });
    expect(fake.read(LEASES, NS, 'l1')!.spec).toMatchObject({ holderIdentity: 'other' });
    const current = fake.read(LEASES, NS, 'l1')!.metadata.resourceVersion;
    const ok = await merge(leasePath('l1'), { metadata: { resourceVersion: current }, spec: { holderIdentity: 'me' } });
    expect(ok.status).toBe(200);
    expect(ok.body.spec.holderIdentity).toBe('me');
  });

  it('PUT checks resourceVersion (409 on mismatch), allows unconditional updates and keeps server metadata', async () => {
    const cur = fake.read(LEASES, NS, 'l1')!;
    const body = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'l1', resourceVersion: '1' },
      spec: { holderIdentity: 'p' },
    };
    const conflict = await call('PUT', leasePath('l1'), body);
    expect(conflict.status).toBe(409);
    const ok = await call('PUT', leasePath('l1'), { ...body, metadata: { name: 'l1', resourceVersion: cur.metadata.resourceVersion } });
    expect(ok.status).toBe(200);
    expect(ok.body.spec).toEqual({ holderIdentity: 'p' });
    expect(ok.body.metadata.uid).toBe(cur.metadata.uid);
    expect(ok.body.metadata.labels).toBeUndefined();
    const unconditional = await call('PUT', leasePath('l1'), { ...body, metadata: { name: 'l1' } });
    expect(unconditional.status).toBe(200);
    const wrongName = await call('PUT', leasePath('l1'), { ...body, metadata: { name: 'l2' } });
    expect(wrongName.status).toBe(400);
    expect(wrongName.body.message).toContain('does not match the name on the URL');
    expect((await call('PUT', leasePath('missing'), { ...body, metadata: { name: 'missing' } })).status).toBe(404);
  });

  it('a write that changes nothing keeps the resourceVersion', async () => {
    const rv = fake.read(LEASES, NS, 'l1')!.metadata.resourceVersion;
    const res = await merge(leasePath('l1'), { spec: { leaseDurationSeconds: 40 } });
    expect(res.status).toBe(200);
    expect(res.body.metadata.resourceVersion).toBe(rv);
  });

  it('rejects MicroTime without six fractional digits and non-string annotations, like the apiserver decoder', async () => {
    const millis = await merge(leasePath('l1'), { spec: { renewTime: '2026-01-02T03:04:05.123Z' } });
    expect(millis.status).toBe(400);
    expect(millis.body.message).toContain('2006-01-02T15:04:05.000000Z07:00');
    expect((await merge(leasePath('l1'), { metadata: { annotations: { a: true } } })).status).toBe(400);
    expect((await merge(leasePath('l1'), { spec: { leaseDurationSeconds: 1.5 } })).status).toBe(400);
    expect((await merge(leasePath('l1'), { spec: { renewTime: '2026-01-02T03:04:05.123456+01:00' } })).status).toBe(200);
  });

  it('rejects unsupported patch types with 415 and other methods with 405', async () => {
    expect((await call('PATCH', leasePath('l1'), { spec: {} }, 'application/json')).status).toBe(415);
    expect((await call('PATCH', leasePath('l1'), { spec: {} }, 'application/apply-patch+yaml')).status).toBe(415);
    expect((await call('POST', leasePath('l1'), {})).status).toBe(405);
  });

  it('POST creates (201) and answers 409 AlreadyExists for an existing name; LIST and DELETE work', async () => {
    const body = { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'new' }, spec: {} };
    const created = await call('POST', `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases`, body);
    expect(created.status).toBe(201);
    expect(created.body.metadata.namespace).toBe(NS);
    const again = await call('POST', `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases`, body);
    expect(again.status).toBe(409);
    expect(again.body.reason).toBe('AlreadyExists');
    const list = await call('GET', `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases`);
    expect(list.body.kind).toBe('LeaseList');
    expect(list.body.items.map((i: any) => i.metadata.name)).toEqual(['l1', 'new']);
    const deleted = await call('DELETE', leasePath('new'));
    expect(deleted.status).toBe(200);
    expect(deleted.body).toMatchObject({ kind: 'Status', status: 'Success' });
    expect((await call('GET', leasePath('new'))).status).toBe(404);
  });

  it('serves API discovery for the group version', async () => {
    const res = await call('GET', '/apis/druid.gardener.cloud/v1alpha1');
    expect(res.status).toBe(200);
    expect(res.body.resources.map((r: any) => r.name)).toEqual(['etcdmembers', 'etcdmembers/status', 'etcds', 'etcds/status']);
  });
});

describe('fake kube-apiserver: EtcdMember (custom resource with status subresource)', () => {
  beforeEach(() => {
    fake.remove(ETCD_MEMBERS, NS, 'etcd-main-0');
    fake.seed(ETCD_MEMBERS, {
      apiVersion: 'druid.gardener.cloud/v1alpha1',
      kind: 'EtcdMember',
      metadata: { name: 'etcd-main-0', namespace: NS, labels: { 'gardener.cloud/owned-by': 'etcd-main' } },
      spec: {},
      status: { role: 'Member' },
    });
  });

  it('PATCH on /status changes only the status', async () => {
    const before = fake.read(ETCD_MEMBERS, NS, 'etcd-main-0')!;
    const res = await merge(`${memberPath('etcd-main-0')}/status`, {
      metadata: { labels: { hacked: 'yes' } },
      spec: { x: 1 },
      status: { role: 'Leader', id: 'abc' },
    });
    expect(res.status).toBe(200);
    expect(res.body.status).toEqual({ role: 'Leader', id: 'abc' });
    expect(res.body.spec).toEqual({});
    expect(res.body.metadata.labels).toEqual({ 'gardener.cloud/owned-by': 'etcd-main' });
    expect(res.body.metadata.generation).toBe(before.metadata.generation);
    expect(res.body.metadata.resourceVersion).not.toBe(before.metadata.resourceVersion);
  });

  it('PATCH on the main resource ignores status and bumps generation on spec changes', async () => {
    const before = fake.read(ETCD_MEMBERS, NS, 'etcd-main-0')!;
    const res = await merge(memberPath('etcd-main-0'), {
      metadata: { annotations: { 'druid.gardener.cloud/create-as-learner': 'true' } },
      spec: { x: 1 },
      status: { role: 'Leader' },
    });
    expect(res.status).toBe(200);
    expect(res.body.status).toEqual({ role: 'Member' });
    expect(res.body.metadata.annotations).toEqual({ 'druid.gardener.cloud/create-as-learner': 'true' });
    expect(res.body.metadata.generation).toBe(Number(before.metadata.generation) + 1);
  });

  it('status subresource honours resourceVersion and 404s for missing members; strategic merge is 415', async () => {
    const stale = await merge(`${memberPath('etcd-main-0')}/status`, { metadata: { resourceVersion: '1' }, status: { role: 'Leader' } });
    expect(stale.status).toBe(409);
    expect(stale.body.message).toContain('etcdmembers.druid.gardener.cloud "etcd-main-0"');
    const missing = await merge(`${memberPath('etcd-main-9')}/status`, { status: {} });
    expect(missing.status).toBe(404);
    expect(missing.body.message).toBe('etcdmembers.druid.gardener.cloud "etcd-main-9" not found');
    const smp = await call('PATCH', memberPath('etcd-main-0'), { spec: {} }, 'application/strategic-merge-patch+json');
    expect(smp.status).toBe(415);
    expect((await call('GET', `${memberPath('etcd-main-0')}/scale`)).status).toBe(404);
  });
});

describe('fake kube-apiserver: test controls', () => {
  beforeEach(() => {
    fake.remove(LEASES, NS, 'c1');
    seedLease(fake, NS, 'c1');
  });

  it('failNext answers the next N matching requests with an error Status, then serves again', async () => {
    fake.failNext(2, { status: 500 }, { method: 'GET', path: leasePath('c1') });
    expect((await call('PATCH', leasePath('c1'), { spec: {} }, 'application/merge-patch+json')).status).toBe(200);
    const first = await call('GET', leasePath('c1'));
    expect(first.status).toBe(500);
    expect(first.body).toMatchObject({ kind: 'Status', reason: 'InternalError', code: 500 });
    expect((await call('GET', leasePath('c1'))).status).toBe(500);
    expect((await call('GET', leasePath('c1'))).status).toBe(200);
  });

  it('beforeNext runs a concurrent write just before the matching request', async () => {
    const rv = fake.read(LEASES, NS, 'c1')!.metadata.resourceVersion;
    fake.beforeNext({ method: 'PATCH' }, () => fake.write(LEASES, NS, 'c1'));
    const res = await merge(leasePath('c1'), { metadata: { resourceVersion: rv }, spec: { holderIdentity: '1' } });
    expect(res.status).toBe(409);
  });

  it('stallNext leaves a request unanswered until the client gives up', async () => {
    fake.stallNext(1, { path: leasePath('c1') });
    await expect(fetch(`${fake.url}${leasePath('c1')}`, { signal: AbortSignal.timeout(200) })).rejects.toThrow();
    expect((await call('GET', leasePath('c1'))).status).toBe(200);
  });

  it('requires the bearer token when configured', async () => {
    const secured = await FakeKubeApiServer.start({ token: 's3cret' });
    try {
      const anon = await fetch(`${secured.url}${leasePath('x')}`);
      expect(anon.status).toBe(401);
      const authed = await fetch(`${secured.url}${leasePath('x')}`, { headers: { authorization: 'Bearer s3cret' } });
      expect(authed.status).toBe(404);
    } finally {
      await secured.stop();
    }
  });

  it('records requests with their content type and parsed body', async () => {
    const n = fake.requests.length;
    await merge(leasePath('c1'), { spec: { holderIdentity: '9' } });
    const [rec] = fake.requests.slice(n);
    expect(rec).toMatchObject({
      method: 'PATCH',
      path: leasePath('c1'),
      contentType: 'application/merge-patch+json',
      body: { spec: { holderIdentity: '9' } },
      status: 200,
    });
  });
});

describe('fake kube-apiserver: RBAC and resources that are not served', () => {
  const SA = `system:serviceaccount:${NS}:etcd-main`;
  const druidRules = DRUID_V037_ETCD_ROLE_RULES;
  let rbac: FakeKubeApiServer;

  beforeAll(async () => {
    rbac = await FakeKubeApiServer.start({ rbac: { user: SA, roles: [{ namespace: NS, rules: druidRules }] }, omit: [ETCD_MEMBERS] });
  });
  afterAll(async () => {
    await rbac?.stop();
  });
  beforeEach(() => {
    rbac.reset();
    seedLease(rbac, NS, 'r1');
  });

  const at = async (method: string, path: string, body?: unknown, contentType = 'application/merge-patch+json') => {
    const res = await fetch(`${rbac.url}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': contentType },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };

  it('allows what the Role grants in its namespace and answers anything else 403 with the authorizer’s Status', async () => {
    expect((await at('GET', leasePath('r1'))).status).toBe(200);
    expect((await at('PATCH', leasePath('r1'), { spec: { holderIdentity: '1' } })).status).toBe(200);
    // No create in druid's Role: a lease cannot be created by the pods.
    const create = await at(
      'POST',
      `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases`,
      { metadata: { name: 'new' } },
      'application/json',
    );
    expect(create).toEqual({
      status: 403,
      body: {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Failure',
        message: `leases.coordination.k8s.io is forbidden: User "${SA}" cannot create resource "leases" in API group "coordination.k8s.io" in the namespace "${NS}"`,
        reason: 'Forbidden',
        details: { group: 'coordination.k8s.io', kind: 'leases' },
        code: 403,
      },
    });
    // Another namespace: the Role does not reach it.
    const other = await at('GET', leasePath('r1', 'kube-system'));
    expect(other.status).toBe(403);
    expect(other.body.message).toBe(
      `leases.coordination.k8s.io "r1" is forbidden: User "${SA}" cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system"`,
    );
    expect(other.body.details).toEqual({ name: 'r1', group: 'coordination.k8s.io', kind: 'leases' });
  });

  it('authorizes before routing: a resource that is not served is 403 when not allowed, 404 with empty details when allowed', async () => {
    const status = await at('PATCH', `${memberPath('etcd-main-0')}/status`, { status: {} });
    expect(status.status).toBe(403);
    expect(status.body).toMatchObject({
      reason: 'Forbidden',
      message: `etcdmembers.druid.gardener.cloud "etcd-main-0" is forbidden: User "${SA}" cannot patch resource "etcdmembers/status" in API group "druid.gardener.cloud" in the namespace "${NS}"`,
      details: { name: 'etcd-main-0', group: 'druid.gardener.cloud', kind: 'etcdmembers' },
    });
    rbac.setRbac({
      user: SA,
      roles: [
        {
          namespace: NS,
          rules: [
            ...druidRules,
            { apiGroups: ['druid.gardener.cloud'], resources: ['etcdmembers', 'etcdmembers/status'], verbs: ['get', 'patch'] },
          ],
        },
      ],
    });
    const missing = await at('GET', memberPath('etcd-main-0'));
    expect(missing).toEqual({
      status: 404,
      body: {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Failure',
        message: 'the server could not find the requested resource',
        reason: 'NotFound',
        details: {},
        code: 404,
      },
    });
    // Installed (the CRD): an EtcdMember that does not exist is the object's NotFound, naming it.
    rbac.setServed(ETCD_MEMBERS, true);
    const absent = await at('GET', memberPath('etcd-main-0'));
    expect(absent.status).toBe(404);
    expect(absent.body).toMatchObject({
      message: 'etcdmembers.druid.gardener.cloud "etcd-main-0" not found',
      details: { name: 'etcd-main-0', group: 'druid.gardener.cloud', kind: 'etcdmembers' },
    });
  });

  it('leaves discovery open to every authenticated user, and reset restores the options’ Roles and resources', async () => {
    const discovery = await at('GET', '/apis/druid.gardener.cloud/v1alpha1');
    expect(discovery.status).toBe(200);
    expect((discovery.body.resources as Array<{ name: string }>).map((r) => r.name)).not.toContain('etcdmembers');
    rbac.setRbac(undefined);
    rbac.setServed(ETCD_MEMBERS, true);
    rbac.reset();
    expect((await at('GET', memberPath('x'))).status).toBe(403);
  });
});
