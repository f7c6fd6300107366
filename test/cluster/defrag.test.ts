/** Rolling defragmentation on the leader (upstream `pkg/defragmentor/defrag.go`). */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock, systemClock, type Clock } from '../../src/clock.js';
import { DefragRunner, type DefragAttemptResult, type DefragJobState, type MemberDefragmentation } from '../../src/cluster/defrag.js';
import { main } from '../../src/cli/main.js';
import { Metrics } from '../../src/metrics.js';
import { startTestCluster, type TestCluster } from '../support/cluster.js';
import { startTestEtcd } from '../support/etcd.js';
import { etcdClient } from '../support/etcd-client.js';
import { leaderName, makeLeader, plainEndpointClient, recordingLogger } from './maintenance-support.js';
import { waitFor } from '../support/wait.js';

/** Sum of observations per endpoint and outcome of etcdbr_defragmentation_duration_seconds. */
async function defragCounts(metrics: Metrics): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const m = await metrics.defragmentationDurationSeconds.get();
  for (const v of m.values) {
    if (!v.metricName?.endsWith('_count') || v.value === 0) continue;
    out[`${String(v.labels.endpoint)}|${String(v.labels.succeeded)}`] = v.value;
  }
  return out;
}

describe('DefragRunner scheduling (fake clock)', () => {
  /** Attempts scripted in advance instead of talking to etcd. */
  class ScriptedRunner extends DefragRunner {
    readonly attemptsAt: number[] = [];
    constructor(
      clock: FakeClock,
      private readonly outcomes: DefragAttemptResult['outcome'][],
      onDefragmented: () => Promise<unknown>,
      logger = recordingLogger(),
    ) {
      super({
        clusterClient: () => Promise.reject(new Error('unused')),
        endpointClient: () => Promise.reject(new Error('unused')),
        schedule: '*/5 * * * *',
        defragTimeoutMs: 1_000,
        statusTimeoutMs: 1_000,
        clock,
        logger,
        metrics: new Metrics({ defaultMetrics: false }),
        onDefragmented,
      });
    }
    override attempt(_state: DefragJobState, _signal: AbortSignal): Promise<DefragAttemptResult> {
      this.attemptsAt.push(this.clockNow());
      const outcome = this.outcomes.shift() ?? 'done';
      if (outcome === 'done') return Promise.resolve({ outcome, order: [] });
      if (outcome === 'failed') return Promise.resolve({ outcome, reason: 'scripted' });
      return Promise.resolve({ outcome, reason: 'scripted', unhealthy: [] });
    }
    clockNow = () => 0;
  }

  it('waits one retry period after the tick, retries every period until success, skips ticks while running', async () => {
    const start = Date.parse('2024-03-01T00:00:30Z');
    const clock = new FakeClock(start);
    let callbacks = 0;
    const logger = recordingLogger();
    // Seven unsuccessful attempts: the run spans the next tick (5 min later), which must be skipped.
    const runner = new ScriptedRunner(
      clock,
      ['postponed', 'postponed', 'failed', 'postponed', 'postponed', 'postponed', 'postponed'],
      async () => {
        callbacks++;
      },
      logger,
    );
    runner.clockNow = () => clock.now().getTime();
    const stop = new AbortController();
    const done = runner.run(stop.signal);
    await clock.advanceAsync(12 * 60_000);
    const minutes = runner.attemptsAt.map((t) => (t - start + 30_000) / 60_000);
    // Tick at 00:05, attempts from 00:06 every minute; the 8th (00:13) succeeds, after this window.
    expect(minutes).toEqual([6, 7, 8, 9, 10, 11, 12]);
    expect(callbacks).toBe(0);
    expect(logger.entries.filter((e) => e.msg.includes('still running'))).toHaveLength(1); // the 00:10 tick
    await clock.advanceAsync(60_000);
    expect(runner.attemptsAt).toHaveLength(8);
    expect(callbacks).toBe(1);
    expect(runner.running).toBe(false);
    // Next tick 00:15, first attempt 00:16.
    await clock.advanceAsync(3 * 60_000);
    expect(runner.attemptsAt).toHaveLength(9);
    expect(callbacks).toBe(2);
    stop.abort();
    await done;
  });

  it('stops waiting when the signal aborts during a run', async () => {
    const clock = new FakeClock('2024-03-01T00:04:00Z');
    const runner = new ScriptedRunner(clock, ['postponed', 'postponed', 'postponed'], async () => undefined);
    const stop = new AbortController();
    const done = runner.run(stop.signal);
    await clock.advanceAsync(2 * 60_000 + 1);
    expect(runner.running).toBe(true);
    stop.abort();
    await done;
    expect(runner.running).toBe(false);
    expect(clock.pending).toBe(0);
  });
});

describe('DefragRunner against a three-member cluster', () => {
  const RETRY_MS = 200;
  let cluster: TestCluster;
  let client: Etcd3;

  beforeAll(async () => {
    cluster = await startTestCluster(3);
    client = new Etcd3({ hosts: cluster.clientUrls() });
    // Some garbage so defragmentation has something to do.
    for (let i = 0; i < 50; i++) await client.put(`k${i % 5}`).value('x'.repeat(1000));
  });
  afterAll(async () => {
    client?.close();
    await cluster?.cleanup();
  });

  function runner(metrics: Metrics, logger = recordingLogger(), onDefragmented?: () => Promise<unknown>, clock: Clock = systemClock) {
    return new DefragRunner({
      clusterClient: async () => etcdClient(cluster.clientUrls()),
      endpointClient: plainEndpointClient,
      schedule: '0 0 */3 * *',
      defragTimeoutMs: 30_000,
      statusTimeoutMs: 2_000,
      retryPeriodMs: RETRY_MS,
      clock,
      logger,
      metrics,
      ...(onDefragmented ? { onDefragmented } : {}),
    });
  }

  it('defragments the followers one at a time and the leader last, with metrics per endpoint', async () => {
    // Make a member in the middle of the list lead, so "leader last" is not list order by accident.
    await makeLeader(cluster, 'etcd-main-1');
    const metrics = new Metrics({ defaultMetrics: false });
    const logger = recordingLogger();
    const result = await runner(metrics, logger).attempt({ done: new Set() }, new AbortController().signal);
    expect(result.outcome).toBe('done');
    const started = logger.entries.filter((e) => e.msg === 'defragmenting etcd member').map((e) => e.fields);
    const finished = logger.entries.filter((e) => e.msg === 'finished defragmenting etcd member').map((e) => e.fields.member);
    expect(started.map((f) => f.member)).toHaveLength(3);
    expect(new Set(started.map((f) => f.member))).toEqual(new Set(['etcd-main-0', 'etcd-main-1', 'etcd-main-2']));
    expect(started[2]).toMatchObject({ member: 'etcd-main-1', leader: true });
    expect(started.slice(0, 2).every((f) => f.leader === false)).toBe(true);
    // One at a time: each member finished before the next one started.
    const sequence = logger.entries
      .filter((e) => e.msg === 'defragmenting etcd member' || e.msg === 'finished defragmenting etcd member')
      .map((e) => `${e.msg.startsWith('finished') ? 'end' : 'start'}:${String(e.fields.member)}`);
    expect(sequence).toEqual(started.flatMap((f) => [`start:${String(f.member)}`, `end:${String(f.member)}`]));
    expect(finished).toEqual(started.map((f) => f.member));
    const counts = await defragCounts(metrics);
    expect(counts).toEqual(Object.fromEntries(cluster.members.map((m) => [`${m.clientUrl}|true`, 1])));
  });

  it('postpones while a member is down, says which, and proceeds once it is back', async () => {
    const leader = await leaderName(cluster);
    const down = cluster.members.find((m) => m.name !== leader && m.name !== 'etcd-main-0') ?? cluster.members[2];
    await cluster.stop(down!.name);
    const metrics = new Metrics({ defaultMetrics: false });
    const logger = recordingLogger();
    let callbacks = 0;
    const stop = new AbortController();
    // Retry periods pass when the test advances this clock, one per poll.
    const clock = new FakeClock(Date.now());
    const job = runner(
      metrics,
      logger,
      async () => {
        callbacks++;
      },
      clock,
    ).runJob(stop.signal);
    const postponements = () => logger.entries.filter((e) => e.msg.startsWith('postponing defragmentation'));
    try {
      await waitFor(async () => {
        await clock.advanceAsync(RETRY_MS);
        return postponements().length >= 3;
      }, 'three postponed attempts');
      const postponed = logger.entries.filter((e) => e.msg.startsWith('postponing defragmentation'));
      expect(postponed.every((e) => e.level === 'warn' && e.msg.includes(down!.name))).toBe(true);
      expect(postponed[0]?.fields.unhealthy).toEqual([expect.objectContaining({ name: down!.name, endpoint: down!.clientUrl })]);
      expect(logger.entries.some((e) => e.msg === 'defragmenting etcd member')).toBe(false);
      expect(callbacks).toBe(0);

      await cluster.start(down!.name, { state: 'existing' });
      await waitFor(
        async () => {
          await clock.advanceAsync(RETRY_MS);
          return callbacks > 0;
        },
        'the run to finish',
        30_000,
      );
      await job;
    } finally {
      stop.abort();
      await job;
    }
    const started = logger.entries.filter((e) => e.msg === 'defragmenting etcd member').map((e) => e.fields);
    expect(started).toHaveLength(3);
    expect(started[2]?.leader).toBe(true);
    expect(callbacks).toBe(1);
    expect(Object.keys(await defragCounts(metrics)).sort()).toEqual(cluster.members.map((m) => `${m.clientUrl}|true`).sort());
  });

  it('a single-member cluster: defragments that member', async () => {
    const etcd = await startTestEtcd();
    try {
      const metrics = new Metrics({ defaultMetrics: false });
      const r = new DefragRunner({
        clusterClient: async () => etcdClient(etcd.clientUrl),
        endpointClient: plainEndpointClient,
        schedule: '@daily',
        defragTimeoutMs: 30_000,
        statusTimeoutMs: 2_000,
        clock: systemClock,
        logger: recordingLogger(),
        metrics,
      });
      const result = await r.attempt({ done: new Set() }, new AbortController().signal);
      expect(result).toMatchObject({ outcome: 'done', order: [expect.objectContaining({ endpoint: etcd.clientUrl })] });
      expect(await defragCounts(metrics)).toEqual({ [`${etcd.clientUrl}|true`]: 1 });
    } finally {
      await etcd.cleanup();
    }
  });

  it('tells each member’s result with its id, times and DB sizes (EtcdMember lastDefragmentation)', async () => {
    const etcd = await startTestEtcd();
    try {
      const seen: MemberDefragmentation[] = [];
      const make = (defragTimeoutMs: number) =>
        new DefragRunner({
          clusterClient: async () => etcdClient(etcd.clientUrl),
          endpointClient: plainEndpointClient,
          schedule: '@daily',
          defragTimeoutMs,
          statusTimeoutMs: 2_000,
          clock: systemClock,
          logger: recordingLogger(),
          metrics: new Metrics({ defaultMetrics: false }),
          onMemberDefragmented: (r) => seen.push(r),
        });
      const client = new Etcd3({ hosts: etcd.clientUrl });
      const id = BigInt((await client.cluster.memberList({})).members[0]!.ID).toString(16);
      client.close();
      await make(30_000).attempt({ done: new Set() }, new AbortController().signal);
      expect(seen).toHaveLength(1);
      expect(seen[0]).toMatchObject({ memberId: id, endpoint: etcd.clientUrl, succeeded: true, message: 'Defragmentation succeeded' });
      expect(seen[0]!.initialDBSize).toBeGreaterThan(0);
      expect(seen[0]!.finalDBSize).toBeGreaterThan(0);
      expect(seen[0]!.endTime.getTime()).toBeGreaterThanOrEqual(seen[0]!.startTime.getTime());
      // A deadline that has passed before the call: the failure is told too.
      const failed = await make(0).attempt({ done: new Set() }, new AbortController().signal);
      expect(failed.outcome).toBe('failed');
      expect(seen).toHaveLength(2);
      expect(seen[1]).toMatchObject({ memberId: id, succeeded: false, message: expect.stringMatching(/^Defragmentation failed: /) });
      expect(seen[1]!.finalDBSize).toBeUndefined();
    } finally {
      await etcd.cleanup();
    }
  });
});

describe('etcdbrctl snapshot', () => {
  it('takes a full snapshot after each defragmentation (upstream’s callback always fails, a quirk)', async () => {
    const etcd = await startTestEtcd();
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-defrag-snapshot-'));
    const stop = new AbortController();
    let stderr = '';
    const io = { stdout: { write: () => true }, stderr: { write: (s: string) => (stderr += s) } };
    let code: Promise<number> | undefined;
    try {
      code = main(
        [
          'snapshot',
          `--endpoints=${etcd.clientUrl}`,
          '--storage-provider=Local',
          `--store-container=${join(dir, 'store')}`,
          '--defragmentation-schedule=@every 1s',
        ],
        { ETCDBRCTL_DEFRAG_RETRY_PERIOD: '100ms' },
        io,
        { homeDir: dir, signal: stop.signal },
      );
      const fulls = async (): Promise<string[]> =>
        (await readdir(join(dir, 'store'), { recursive: true }).catch(() => [] as string[]))
          .filter((f) => /(^|\/)Full-/.test(f))
          .map((f) => f.slice(f.lastIndexOf('/') + 1));
      const initial = await waitFor(async () => ((await fulls()).length > 0 ? fulls() : undefined), 'the initial full snapshot', 30_000);
      // A write after it, so a later full has a higher revision and cannot share the initial one's name
      // (same revision in the same second is the same object).
      const client = new Etcd3({ hosts: etcd.clientUrl });
      try {
        await client.put('after-initial-full').value('1');
      } finally {
        client.close();
      }
      const afterDefrag = (): string | undefined =>
        stderr
          .split('\n')
          .filter((l) => l.includes('full snapshot after defragmentation'))
          .map((l) => (JSON.parse(l) as { snapshot: string }).snapshot)
          .find((name) => !initial.includes(name));
      const post = await waitFor(afterDefrag, 'a post-defrag full snapshot after the write', 30_000);
      stop.abort();
      expect(await code).toBe(0);
      expect(stderr).not.toMatch(/callback after defragmentation failed/);
      const stored = await fulls();
      expect(stored).toEqual(expect.arrayContaining([...initial, post]));
    } finally {
      stop.abort();
      await code?.catch(() => undefined);
      await etcd.cleanup();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
