/**
 * Maintenance on demand (POST /maintenance/defrag and /maintenance/compact) on a real three-member etcd
 * cluster, through the sidecar's HTTP API: only behind API authentication, only on the leader, one at a
 * time, with the outcome kept for GET and in the metrics.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../src/clock.js';
import { DefragRunner } from '../../src/cluster/defrag.js';
import { OnDemandMaintenance, type MaintenanceOutcome } from '../../src/cluster/on-demand.js';
import { Metrics } from '../../src/metrics.js';
import { startTestCluster, type TestCluster } from '../support/cluster.js';
import { etcdClient } from '../support/etcd-client.js';
import { HealthState } from '../../src/server/health.js';
import { createTestPki, type TestPki } from '../support/certs.js';
import { httpsRequest, type ClientCert } from '../support/https.js';
import { Resources, httpConfig, request, startServer } from '../server/support.js';
import { leaderName, plainEndpointClient, recordingLogger } from './maintenance-support.js';

const res = new Resources();
afterEach(() => res.cleanup());

describe('maintenance on demand against a three-member cluster', () => {
  let cluster: TestCluster;
  let client: Etcd3;

  beforeAll(async () => {
    cluster = await startTestCluster(3);
    client = new Etcd3({ hosts: cluster.clientUrls() });
    for (let i = 0; i < 60; i++) await client.put(`/k/${i % 6}`).value('x'.repeat(2000));
  });
  afterAll(async () => {
    client?.close();
    await cluster?.cleanup();
  });

  function control(metrics: Metrics) {
    const logger = recordingLogger();
    const runner = new DefragRunner({
      clusterClient: async () => etcdClient(cluster.clientUrls()),
      endpointClient: plainEndpointClient,
      schedule: '@daily',
      defragTimeoutMs: 30_000,
      statusTimeoutMs: 2_000,
      clock: systemClock,
      logger,
      metrics,
    });
    return new OnDemandMaintenance({
      defragNow: (signal) => runner.defragNow(signal),
      clusterClient: async () => etcdClient(cluster.clientUrls()),
      statusTimeoutMs: 2_000,
      clock: systemClock,
      logger,
      metrics,
    });
  }

  async function setup(opts: { leading?: boolean; auth?: boolean } = {}) {
    const metrics = new Metrics({ defaultMetrics: false });
    const onDemand = control(metrics);
    const tokenFile = join(await res.tmpDir(), 'token');
    writeFileSync(tokenFile, 'maintenance-token');
    const term = new AbortController();
    const { url } = await startServer(res, {
      metrics,
      maintenance: () => (opts.leading === false ? undefined : { control: onDemand, signal: term.signal }),
      ...(opts.auth === false ? {} : { auth: { tokenFile, openProbes: true } }),
    });
    const call = (path: string, method = 'POST') =>
      request(`${url}${path}`, { method, headers: { authorization: 'Bearer maintenance-token' } });
    return { call, metrics, url };
  }

  it('a rolling defragmentation: every member, the leader last; GET shows the outcome; metrics count it', async () => {
    const { call, metrics } = await setup();
    const a = await call('/maintenance/defrag');
    expect(a.status).toBe(200);
    const outcome = JSON.parse(a.body) as MaintenanceOutcome;
    expect(outcome.state).toBe('succeeded');
    const order = /defragmented (.*) \(in this order\)/.exec(outcome.detail)![1]!.split(', ');
    expect(order).toHaveLength(3);
    expect(order.at(-1)).toBe(await leaderName(cluster));
    const status = await call('/maintenance/defrag', 'GET');
    expect(JSON.parse(status.body)).toEqual(outcome);
    expect(await metrics.registry.getSingleMetricAsString('etcdbr_maintenance_duration_seconds')).toMatch(
      /etcdbr_maintenance_duration_seconds_count\{operation="defrag",succeeded="true"\} 1/,
    );
  });

  it('two defragmentations at once: the second is refused with 409', async () => {
    const { call } = await setup();
    const [a, b] = await Promise.all([call('/maintenance/defrag'), call('/maintenance/defrag')]);
    expect([a.status, b.status].sort()).toEqual([200, 409]);
  });

  it('compaction keeping the newest 10 revisions: older revisions are gone, newer ones readable', async () => {
    const { call } = await setup();
    const now = Number((await client.get('/k/0').exec()).header.revision);
    const a = await call('/maintenance/compact?keep=10');
    expect(a.status).toBe(200);
    expect(JSON.parse(a.body)).toMatchObject({ state: 'succeeded', revision: now - 10 });
    await expect(
      client
        .get('/k/0')
        .revision(String(now - 11))
        .exec(),
    ).rejects.toThrow(/compacted/);
    expect(
      (
        await client
          .get('/k/0')
          .revision(String(now - 5))
          .exec()
      ).kvs.length,
    ).toBe(1);
    expect((await call('/maintenance/compact?revision=abc')).status).toBe(400);
    expect((await call('/maintenance/compact')).status).toBe(400);
    expect((await call(`/maintenance/compact?revision=${now + 1000}`)).status).toBe(400);
  });

  it('mutual TLS: a follower forwards with its own certificate, the leader lets it in; no certificate, no forwarding', async () => {
    const pki: TestPki = await createTestPki();
    res.add(() => pki.cleanup());
    const ca = readFileSync(pki.caFile);
    const tls = httpConfig({ serverCert: pki.server.certFile, serverKey: pki.server.keyFile });
    const auth = { clientCa: ca, openProbes: true };
    const health = new HealthState();
    health.setHealthy(true);
    const leaderMetrics = new Metrics({ defaultMetrics: false });
    const leaderControl = control(leaderMetrics);
    const leader = await startServer(res, {
      config: tls,
      auth,
      health,
      metrics: leaderMetrics,
      maintenance: () => ({ control: leaderControl, signal: new AbortController().signal }),
    });
    const follower = await startServer(res, {
      config: tls,
      auth,
      proxyCa: ca,
      maintenance: () => undefined,
      leaderProxy: { findLeaderUrl: async () => leader.url },
    });
    const post = (url: string, client?: ClientCert) => httpsRequest(url, { method: 'POST', ca, client });
    const forwarded = await post(`${follower.url}/maintenance/compact?keep=5`, pki.client);
    expect(forwarded.status, forwarded.body).toBe(200);
    expect(JSON.parse(forwarded.body)).toMatchObject({ operation: 'compact', state: 'succeeded' });
    // It ran on the leader (its metrics), not on the follower.
    expect(await leader.metrics.registry.getSingleMetricAsString('etcdbr_maintenance_duration_seconds')).toMatch(
      /etcdbr_maintenance_duration_seconds_count\{operation="compact",succeeded="true"\} 1/,
    );
    expect(await follower.metrics.registry.getSingleMetricAsString('etcdbr_maintenance_duration_seconds')).not.toMatch(/_count/);
    const without = await post(`${follower.url}/maintenance/compact?keep=5`);
    expect(without.status).toBe(401);
    const untrusted = await post(`${follower.url}/maintenance/compact?keep=5`, pki.untrustedClient);
    expect(untrusted.status).toBe(401);
  });

  it('refused without API authentication (403), on a follower (503), and for other methods (405)', async () => {
    const open = await setup({ auth: false });
    expect((await open.call('/maintenance/defrag')).status).toBe(403);
    const follower = await setup({ leading: false });
    const f = await follower.call('/maintenance/compact?keep=1');
    expect(f.status).toBe(503);
    expect(f.body).toMatch(/does not lead/);
    const leader = await setup();
    expect((await leader.call('/maintenance/defrag', 'PUT')).status).toBe(405);
    const unauth = await request(`${leader.url}/maintenance/defrag`, { method: 'POST' });
    expect(unauth.status).toBe(401);
  });
});
