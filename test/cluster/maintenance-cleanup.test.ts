/**
 * `--enable-member-cleanup` in the server's cluster maintenance: with the flag off the leader never removes
 * a superfluous member; the same maintenance with the flag on (the control) removes it, which shows the
 * off run had everything it needed to remove it.
 */
import { podEnvironment } from '../../src/config/pod-environment.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../src/clock.js';
import { ClusterMaintenance } from '../../src/cluster/maintenance.js';
import { buildCommandConfig } from '../../src/config/build.js';
import type { ServerConfig } from '../../src/config/types.js';
import { Metrics } from '../../src/metrics.js';
import { startTestCluster, type TestCluster } from '../support/cluster.js';
import { makeLeader, recordingLogger, until } from './maintenance-support.js';
import { writeTemplate } from './multinode-support.js';

const PERIOD_MS = 100;

describe('ClusterMaintenance with --enable-member-cleanup', () => {
  let cluster: TestCluster;
  let client: Etcd3;
  let dir: string;
  let template: string;
  let startedAt = 0;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-cleanup-flag-'));
    cluster = await startTestCluster(3);
    startedAt = Date.now();
    await makeLeader(cluster, 'etcd-main-0');
    client = new Etcd3({ hosts: cluster.members[0]!.clientUrl });
    // The configured size is 2: etcd-main-2 is superfluous.
    template = await writeTemplate(cluster, 0, dir, { members: [0, 1] });
  });
  afterAll(async () => {
    client?.close();
    await cluster?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  function serverConfig(flags: Record<string, unknown>): ServerConfig {
    const config = buildCommandConfig('server', { flags: new Map(Object.entries(flags)) }).config;
    config.etcdConnectionConfig.endpoints = [cluster.members[0]!.clientUrl];
    config.etcdConnectionConfig.connectionTimeout = 2_000;
    return config;
  }

  const maintenance = (config: ServerConfig, logger: ReturnType<typeof recordingLogger>) =>
    new ClusterMaintenance({
      config,
      pod: podEnvironment({ POD_NAME: 'etcd-main-0', ETCD_CONF: template }),
      clock: systemClock,
      logger,
      metrics: new Metrics({ defaultMetrics: false }),
      cleanupPeriodMs: PERIOD_MS,
      cleanupGraceMs: 0,
    });

  const memberNames = async () => (await client.cluster.memberList({})).members.map((m) => m.name).sort();

  it('is on by default; off keeps the superfluous member, on (the control) removes it', async () => {
    expect(serverConfig({}).enableMemberCleanup).toBe(true);
    const off = serverConfig({ 'enable-member-cleanup': false });
    expect(off.enableMemberCleanup).toBe(false);

    // etcd refuses to remove a member until every member has been connected for 5 s (its HealthInterval);
    // past that, an enabled cleanup removes the member in its first round (grace 0).
    await new Promise((r) => setTimeout(r, Math.max(0, startedAt + 6_000 - Date.now())));
    const offLog = recordingLogger();
    const offAbort = new AbortController();
    const offRun = maintenance(off, offLog).lead(offAbort.signal);
    // Thirty cleanup periods.
    await new Promise((r) => setTimeout(r, 30 * PERIOD_MS));
    offAbort.abort();
    await offRun;
    expect(await memberNames()).toEqual(['etcd-main-0', 'etcd-main-1', 'etcd-main-2']);
    expect(offLog.entries.map((e) => e.msg)).toContain('superfluous member cleanup is off (--enable-member-cleanup=false)');
    expect(offLog.entries.filter((e) => /superfluous etcd member/.test(e.msg))).toEqual([]);

    const onLog = recordingLogger();
    const onAbort = new AbortController();
    const onRun = maintenance(serverConfig({}), onLog).lead(onAbort.signal);
    try {
      // etcd may refuse the removal for a few seconds after start-up ("unhealthy cluster"); rounds retry.
      await until(async () => ((await memberNames()).length === 2 ? true : undefined), 'the control run to remove etcd-main-2', 30_000);
    } finally {
      onAbort.abort();
      await onRun;
    }
    expect(await memberNames()).toEqual(['etcd-main-0', 'etcd-main-1']);
    expect(onLog.entries.some((e) => e.msg === 'removed superfluous etcd member' && e.fields.member === 'etcd-main-2')).toBe(true);
  });
});
