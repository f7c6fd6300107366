/**
 * `--enable-member-cleanup` in the server's cluster maintenance: with the flag off the leader never removes
 * a superfluous member; the same maintenance with the flag on (the control), running beside it on the same
 * clock through the same cleanup periods, removes it, which shows the off run had everything it needed to
 * remove it.
 */
import { podEnvironment } from '../../src/config/pod-environment.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/clock.js';
import { ClusterMaintenance } from '../../src/cluster/maintenance.js';
import { buildCommandConfig } from '../../src/config/build.js';
import type { ServerConfig } from '../../src/config/types.js';
import { Metrics } from '../../src/metrics.js';
import { startTestCluster, type TestCluster } from '../support/cluster.js';
import { waitFor } from '../support/wait.js';
import { makeLeader, recordingLogger } from './maintenance-support.js';
import { writeTemplate } from './multinode-support.js';

const PERIOD_MS = 100;

describe('ClusterMaintenance with --enable-member-cleanup', () => {
  let cluster: TestCluster;
  let client: Etcd3;
  let dir: string;
  let template: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-cleanup-flag-'));
    cluster = await startTestCluster(3);
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

  const maintenance = (config: ServerConfig, logger: ReturnType<typeof recordingLogger>, clock: FakeClock) =>
    new ClusterMaintenance({
      config,
      pod: podEnvironment({ POD_NAME: 'etcd-main-0', ETCD_CONF: template }),
      clock,
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

    // Midday: far from any defragmentation tick of the default schedule. Cleanup periods pass only when
    // the test advances this clock, for both runs at once.
    const clock = new FakeClock('2030-01-01T12:00:00Z');
    const offLog = recordingLogger();
    const offAbort = new AbortController();
    const offRun = maintenance(off, offLog, clock).lead(offAbort.signal);
    const onLog = recordingLogger();
    const onAbort = new AbortController();
    const onRun = maintenance(serverConfig({}), onLog, clock).lead(onAbort.signal);
    try {
      // etcd refuses a removal until every member has been connected for 5 s (its HealthInterval), saying
      // "unhealthy cluster"; the control's rounds retry every period until it is accepted.
      await waitFor(
        async () => {
          await clock.advanceAsync(PERIOD_MS);
          return (await memberNames()).length === 2;
        },
        'the control run to remove etcd-main-2',
        30_000,
      );
    } finally {
      offAbort.abort();
      onAbort.abort();
      await Promise.all([offRun, onRun]);
    }
    expect(offLog.entries.map((e) => e.msg)).toContain('superfluous member cleanup is off (--enable-member-cleanup=false)');
    expect(offLog.entries.filter((e) => /superfluous etcd member/.test(e.msg))).toEqual([]);
    expect(onLog.entries.map((e) => e.msg)).not.toContain('superfluous member cleanup is off (--enable-member-cleanup=false)');
    expect(await memberNames()).toEqual(['etcd-main-0', 'etcd-main-1']);
    expect(onLog.entries.some((e) => e.msg === 'removed superfluous etcd member' && e.fields.member === 'etcd-main-2')).toBe(true);
  });
});
