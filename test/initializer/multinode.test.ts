/**
 * The multi-node initializer against real 3-member etcd clusters on loopback: a wiped member is removed,
 * re-added as a learner, started on the served config, synced and promoted while the cluster keeps quorum;
 * scale-up 1→3 adds learners one at a time; bad input fails with a clear reason and never wipes a healthy
 * member's data dir.
 */
import { podEnvironment } from '../../src/config/pod-environment.js';
import { cp, mkdtemp, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { newSnapshot, type SnapStore } from '@etcdbrctl/snapstore';
import { systemClock } from '../../src/clock.js';
import { LeadershipWatcher } from '../../src/cluster/leadership.js';
import { MemberControl, clusterClientFactory } from '../../src/cluster/members.js';
import { MultiNode } from '../../src/cluster/multinode.js';
import { LearnerPromoter } from '../../src/cluster/promoter.js';
import type { EtcdConnectionConfig } from '../../src/config/types.js';
import { freePort } from '../../src/etcd/ports.js';
import { readEtcdConfigTemplate, renderMemberConfig } from '../../src/config/etcd-config.js';
import {
  InitializationError,
  initializeDataDir,
  type InitializationOutcome,
  type InitializationProgress,
} from '../../src/initializer/initializer.js';
import { Metrics } from '../../src/metrics.js';
import { startEtcdFromConfig, type ConfiguredEtcd } from '../../e2e/support/wrapper.js';
import { startTestCluster, type TestCluster } from '../support/cluster.js';
import { etcdBinaries, startTestEtcd } from '../support/etcd.js';
import { etcdClient } from '../support/etcd-client.js';
import { collectingLogger, writeTemplate, type CollectedLog } from '../cluster/multinode-support.js';
import { waitFor } from '../support/wait.js';

const CONNECTION: EtcdConnectionConfig = {
  endpoints: [],
  serviceEndpoints: [],
  username: '',
  password: '',
  connectionTimeout: 5_000,
  snapshotTimeout: 60_000,
  defragTimeout: 60_000,
  insecureTransport: true,
  insecureSkipVerify: false,
  certFile: '',
  keyFile: '',
  caFile: '',
  maxCallSendMsgSize: 0,
};

const FAST_RETRIES = {
  observeRetry: { attempts: 2, initialMs: 300, factor: 2, capMs: 2_000 },
  addRetry: { attempts: 15, initialMs: 500, factor: 1.5, capMs: 3_000 },
  tooManyLearnersWaitMs: 500,
};

interface Member {
  index: number;
  template: string;
  mn: MultiNode;
  log: CollectedLog;
  metrics: Metrics;
}

function memberOf(index: number, template: string, extraEnv: Record<string, string> = {}): Member {
  const log = collectingLogger();
  const metrics = new Metrics({ defaultMetrics: false });
  const mn = new MultiNode({
    pod: podEnvironment({ ETCD_CONF: template, POD_NAME: `etcd-main-${index}`, ...extraEnv }),
    connection: CONNECTION,
    namespace: '',
    clock: systemClock,
    logger: log.logger,
    metrics,
    retries: FAST_RETRIES,
  });
  return { index, template, mn, log, metrics };
}

async function initialize(
  cluster: TestCluster,
  m: Member,
  store?: () => Promise<SnapStore>,
  onProgress?: (p: InitializationProgress) => void,
): Promise<InitializationOutcome> {
  const o = await m.mn.initOptions();
  if (!o) throw new Error('expected a multi-node member');
  return initializeDataDir('full', {
    dataDir: cluster.members[m.index]!.dataDir,
    clusterSize: o.clusterSize,
    multiNode: o.multiNode,
    ...(store ? { store } : {}),
    binaries: () => etcdBinaries(),
    restore: {
      tempDir: join(cluster.dir, 'restore-tmp'),
      name: `etcd-main-${m.index}`,
      initialCluster: cluster.initialCluster,
      initialClusterToken: cluster.token,
      initialAdvertisePeerUrls: [cluster.members[m.index]!.peerUrl],
      skipHashCheck: false,
      maxFetchers: 2,
      embeddedEtcdQuotaBytes: 1 << 30,
      maxRequestBytes: 10 << 20,
      maxTxnOps: 10_000,
    },
    logger: m.log.logger,
    metrics: m.metrics,
    ...(onProgress ? { onProgress } : {}),
  });
}

/** What `/config` serves (the route renders exactly this), written where the wrapper would put it. */
async function servedConfig(m: Member, dir: string): Promise<{ path: string; config: Record<string, unknown> }> {
  const view = await m.mn.clusterView();
  const config = renderMemberConfig(await readEtcdConfigTemplate(m.template), `etcd-main-${m.index}`, view);
  const path = join(dir, `served-${m.index}.yaml`);
  await writeFile(path, stringify(config, { sortMapEntries: true }));
  return { path, config };
}

/** The sidecar's leadership loop on the member's own etcd, with learner promotion wired as in the server. */
function watchLeadership(m: Member, clientUrl: string): { stop(): Promise<void> } {
  const client = etcdClient(clientUrl);
  const ac = new AbortController();
  const watcher = new LeadershipWatcher(
    client,
    { periodMs: 300, timeoutMs: 2_000 },
    {
      onStartedLeading: () => {},
      onStoppedLeading: () => undefined,
      onLearner: (st) => m.mn.onLearner(st),
      onStatus: (_s, st) => m.mn.onStatus(st),
    },
    systemClock,
    m.log.logger,
  );
  const done = watcher.run(ac.signal);
  return {
    async stop() {
      ac.abort();
      await done;
      await m.mn.settle();
      client.close();
    },
  };
}

/**
 * Load while members are removed, re-added and promoted: puts a key every 50 ms through the given members and
 * records what was acknowledged and what failed. The pause paces the load (on two cores); nothing waits on it.
 */
function startWriter(endpoints: string[]): { stop(): Promise<{ acked: string[]; failures: string[] }> } {
  const client = new Etcd3({ hosts: endpoints });
  const acked: string[] = [];
  const failures: string[] = [];
  let running = true;
  const loop = (async () => {
    for (let i = 0; running; i++) {
      const key = `w/${String(i).padStart(6, '0')}`;
      try {
        await client
          .put(key)
          .value(String(i))
          .options({ deadline: new Date(Date.now() + 5_000) })
          .exec();
        acked.push(key);
      } catch (err) {
        failures.push(`${key}: ${(err as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      client.close();
      return { acked, failures };
    },
  };
}

async function members(endpoint: string): Promise<Array<{ id: string; name: string; isLearner: boolean; peerURLs: string[] }>> {
  const c = new Etcd3({ hosts: endpoint });
  try {
    return (await c.cluster.memberList({}, { deadline: new Date(Date.now() + 3_000) })).members.map((m) => ({
      id: BigInt(m.ID).toString(16),
      name: m.name,
      isLearner: Boolean(m.isLearner),
      peerURLs: m.peerURLs,
    }));
  } finally {
    c.close();
  }
}

/** Names and sizes of every file under dir: "was this data dir touched". */
async function fingerprint(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const p = join(e.parentPath, e.name);
    out.push(`${p.slice(dir.length)}:${(await stat(p)).size}`);
  }
  return out.sort();
}

describe('multi-node initializer on a 3-member cluster', () => {
  let cluster: TestCluster | undefined;
  let dir: string;
  const started: ConfiguredEtcd[] = [];
  const stops: Array<() => Promise<unknown>> = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-multinode-'));
  });
  afterAll(async () => {
    for (const s of stops.reverse()) await s().catch(() => undefined);
    await Promise.all(started.map((e) => e.stop(5_000)));
    await cluster?.cleanup();
    await rm(dir, { recursive: true, force: true });
  });

  it('a wiped member is removed, re-added as a learner, synced from the leader and promoted, with no lost write and quorum kept', async () => {
    cluster = await startTestCluster(3);
    const c = cluster;
    const seed = new Etcd3({ hosts: c.clientUrls() });
    for (let i = 0; i < 200; i++) await seed.put(`seed/${i}`).value('x'.repeat(100));
    seed.close();
    const before = await members(c.members[0]!.clientUrl);
    const oldId = before.find((m) => m.name === 'etcd-main-2')!.id;

    await c.stop('etcd-main-2');
    await rm(c.members[2]!.dataDir, { recursive: true, force: true });
    const writer = startWriter([c.members[0]!.clientUrl, c.members[1]!.clientUrl]);
    stops.push(() => writer.stop());

    const m = memberOf(2, await writeTemplate(c, 2, dir));
    const progress: InitializationProgress[] = [];
    expect(await initialize(c, m, undefined, (p) => progress.push(p)), m.log.text()).toBe('rejoined-as-learner');
    const decision = m.log.lines.find((l) => l.msg === 'bootstrap decision');
    expect(decision).toMatchObject({ action: 'rejoin-as-learner' });
    // What the EtcdMember status is told: validation failed, then the decision.
    expect(progress).toEqual([
      { step: 'validated', valid: false, status: 'DataDirectoryNotExist', reason: expect.any(String), clusterSize: 3 },
      { step: 'decided', decision: expect.objectContaining({ action: 'rejoin-as-learner' }) },
    ]);

    const afterAdd = await members(c.members[0]!.clientUrl);
    expect(afterAdd.map((x) => x.id)).not.toContain(oldId);
    const learner = afterAdd.find((x) => x.isLearner);
    expect(learner?.peerURLs).toEqual([c.members[2]!.peerUrl]);

    const { path, config } = await servedConfig(m, dir);
    expect(config['initial-cluster-state']).toBe('existing');
    expect(String(config['initial-cluster']).split(',')).toHaveLength(3);
    expect(config.name).toBe('etcd-main-2');
    const etcd = await startEtcdFromConfig(await etcdBinaries(), path, config);
    started.push(etcd);
    await etcd.ready();
    const watch = watchLeadership(m, c.members[2]!.clientUrl);
    stops.push(() => watch.stop());

    await waitFor(
      async () => {
        const list = await members(c.members[0]!.clientUrl);
        const own = list.find((x) => x.name === 'etcd-main-2');
        return own && !own.isLearner && list.length === 3 ? own : undefined;
      },
      'member etcd-main-2 promoted',
      60_000,
      200,
    );
    await watch.stop();
    const { acked, failures } = await writer.stop();
    expect(failures, 'every write during remove / re-add / promote succeeded (quorum kept)').toEqual([]);
    expect(acked.length).toBeGreaterThan(10);

    // Every acknowledged write is on the re-synced member.
    const own = new Etcd3({ hosts: c.members[2]!.clientUrl });
    try {
      const keys = await own.getAll().prefix('w/').keys();
      expect(keys.sort()).toEqual(expect.arrayContaining(acked));
      expect(await own.getAll().prefix('seed/').count()).toBe(200);
    } finally {
      own.close();
    }
    const metrics = await m.metrics.registry.getMetricsAsJSON();
    const value = (name: string, labels: Record<string, string>) =>
      (metrics.find((x) => x.name === name)?.values as Array<{ labels: Record<string, string>; value: number; metricName?: string }>)
        .filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))
        .map((v) => v.value);
    expect(value('etcdbr_is_learner_count_total', { succeeded: 'true' })).toEqual([1]);
    expect(value('etcdbr_is_learner', {})).toEqual([0]);
    expect(m.log.lines.some((l) => l.msg === 'promoted learner to a voting member')).toBe(true);
    expect(m.metrics.registry.getSingleMetric('etcdbr_member_remove_duration_seconds')).toBeDefined();
    const text = await m.metrics.registry.metrics();
    expect(text).toMatch(/etcdbr_member_remove_duration_seconds_count\{succeeded="true"\} 1/);
    expect(text).toMatch(/etcdbr_member_promote_duration_seconds_count\{succeeded="true"\} 1/);
    expect(text).toMatch(/etcdbr_restoration_duration_seconds_count\{restore="single_member",succeeded="true"\} 1/);
    expect(text).toMatch(/etcdbr_add_learner_duration_seconds_count\{succeeded="true"\} 1/);
  }, 180_000);
});

describe('scale-up 1→3', () => {
  let cluster: TestCluster | undefined;
  let dir: string;
  const started: ConfiguredEtcd[] = [];
  const stops: Array<() => Promise<unknown>> = [];
  afterAll(async () => {
    for (const s of stops.reverse()) await s().catch(() => undefined);
    await Promise.all(started.map((e) => e.stop(5_000)));
    await cluster?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('adds the new members as learners one at a time and promotes each once in sync', async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-scaleup-'));
    cluster = await startTestCluster(3, { start: false });
    const c = cluster;
    // The single-node cluster as it ran before druid rewrote the config for three replicas.
    await c.start('etcd-main-0', { initialCluster: `etcd-main-0=${c.members[0]!.peerUrl}` });
    const seed = new Etcd3({ hosts: c.members[0]!.clientUrl });
    for (let i = 0; i < 100; i++) await seed.put(`seed/${i}`).value('y');
    seed.close();
    const writer = startWriter([c.members[0]!.clientUrl]);
    stops.push(() => writer.stop());

    // The member list as it changes, sampled every 100 ms (etcd has no membership watch): never more than one
    // learner at a time. A sampler, not a wait: the test waits on the promotions below.
    let maxLearners = 0;
    const learnerIds: string[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const list = await members(c.members[0]!.clientUrl).catch(() => []);
        const learners = list.filter((x) => x.isLearner);
        maxLearners = Math.max(maxLearners, learners.length);
        for (const l of learners) if (!learnerIds.includes(l.id)) learnerIds.push(l.id);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    stops.push(async () => {
      polling = false;
      await poller;
    });

    const bringUp = async (index: number): Promise<Member> => {
      const m = memberOf(index, await writeTemplate(c, index, dir));
      expect(await initialize(c, m), m.log.text()).toBe('joined-as-learner');
      const { path, config } = await servedConfig(m, dir);
      expect(config['initial-cluster-state']).toBe('existing');
      const etcd = await startEtcdFromConfig(await etcdBinaries(), path, config);
      started.push(etcd);
      await etcd.ready();
      const watch = watchLeadership(m, c.members[index]!.clientUrl);
      stops.push(() => watch.stop());
      await waitFor(
        async () => {
          const own = (await members(c.members[0]!.clientUrl)).find((x) => x.name === `etcd-main-${index}`);
          return own && !own.isLearner ? own : undefined;
        },
        `etcd-main-${index} promoted`,
        120_000,
        200,
      );
      return m;
    };
    const [m1, m2] = await Promise.all([bringUp(1), bringUp(2)]);
    polling = false;
    await poller;

    const list = await members(c.members[0]!.clientUrl);
    expect(list.map((x) => x.name).sort()).toEqual(['etcd-main-0', 'etcd-main-1', 'etcd-main-2']);
    expect(list.every((x) => !x.isLearner)).toBe(true);
    expect(maxLearners).toBe(1);
    expect(learnerIds).toHaveLength(2);
    const { acked, failures } = await writer.stop();
    expect(failures).toEqual([]);
    for (const i of [1, 2]) {
      const cl = new Etcd3({ hosts: c.members[i]!.clientUrl });
      try {
        expect(await cl.getAll().prefix('seed/').count()).toBe(100);
        expect((await cl.getAll().prefix('w/').keys()).sort()).toEqual(expect.arrayContaining(acked));
      } finally {
        cl.close();
      }
    }
    for (const m of [m1, m2]) expect(m.log.lines.find((l) => l.msg === 'bootstrap decision')).toMatchObject({ action: 'join-as-learner' });
  }, 240_000);
});

describe('bad input gives a clear status and never wipes a healthy data dir', () => {
  let cluster: TestCluster;
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-multinode-bad-'));
    cluster = await startTestCluster(3);
    const seed = new Etcd3({ hosts: cluster.clientUrls() });
    await seed.put('a').value('1');
    seed.close();
  });
  afterAll(async () => {
    await cluster?.cleanup();
    await rm(dir, { recursive: true, force: true });
  });

  it('a member name missing from initial-cluster', async () => {
    const c = cluster;
    await c.stop('etcd-main-2');
    const before = await fingerprint(c.members[2]!.dataDir);
    const m = memberOf(2, await writeTemplate(c, 2, dir), { POD_NAME: 'etcd-main-9' });
    const err = await initialize(c, m).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InitializationError);
    expect(err).toMatchObject({ code: 'not-in-initial-cluster' });
    expect((err as Error).message).toMatch(/etcd-main-9.*initial-cluster/);
    expect(await fingerprint(c.members[2]!.dataDir)).toEqual(before);
    expect(m.log.lines.find((l) => l.msg === 'bootstrap decision')).toMatchObject({ action: 'fail' });
  });

  it('a valid data dir of another cluster', async () => {
    const c = cluster;
    const own = c.members[2]!.dataDir;
    const foreign = await startTestEtcd({ name: 'etcd-main-2' });
    const put = new Etcd3({ hosts: foreign.clientUrl });
    await put.put('other').value('cluster');
    put.close();
    await foreign.stop();
    await rename(own, `${own}.saved`);
    await cp(foreign.dataDir, own, { recursive: true });
    await foreign.cleanup();
    try {
      const before = await fingerprint(own);
      const m = memberOf(2, await writeTemplate(c, 2, dir));
      const err = await initialize(c, m).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'cluster-id-mismatch' });
      expect((err as Error).message).toMatch(/belongs to etcd cluster \w+ but the running cluster is \w+/);
      expect(await fingerprint(own)).toEqual(before);
    } finally {
      await rm(own, { recursive: true, force: true });
      await rename(`${own}.saved`, own);
    }
    await c.start('etcd-main-2', { state: 'existing' });
  });

  it('a learner that never syncs is reported, and can be removed', async () => {
    const c = cluster;
    const log = collectingLogger();
    const metrics = new Metrics({ defaultMetrics: false });
    const ghost = new MemberControl({
      endpoints: c.clientUrls(),
      newClient: clusterClientFactory({ insecureTransport: true, insecureSkipVerify: false, connectionTimeoutMs: 5_000 }),
      memberName: 'etcd-main-ghost',
      peerUrls: [`http://127.0.0.1:${await freePort()}`],
      logger: log.logger,
      metrics,
      ...FAST_RETRIES,
    });
    const added = await ghost.addAsLearner();
    expect(added.memberId).toMatch(/^[0-9a-f]+$/);
    const promoter = new LearnerPromoter({
      members: ghost,
      clusterSize: 3,
      clock: systemClock,
      logger: log.logger,
      metrics,
      stuckAfterMs: 0,
    });
    promoter.onLearner({ memberId: added.memberId!, leaderId: '1', isLearner: true, dbSize: 0, dbSizeInUse: 0 });
    await promoter.settle();
    const stuck = log.lines.find((l) => l.level === 'error');
    expect(stuck?.msg).toMatch(/learner has not caught up with the leader/);
    expect(JSON.stringify(stuck)).toMatch(/in sync with leader/);
    await ghost.remove(added.memberId!);
    expect((await members(c.members[0]!.clientUrl)).some((x) => x.id === added.memberId)).toBe(false);
  });

  it('an unreachable cluster: valid data starts as is, an invalid member fails instead of bootstrapping', async () => {
    const c = cluster;
    await Promise.all(c.members.map((m) => c.stop(m.name)));
    const before = await fingerprint(c.members[1]!.dataDir);
    const valid = memberOf(1, await writeTemplate(c, 1, dir));
    expect(await initialize(c, valid)).toBe('valid');
    expect(await fingerprint(c.members[1]!.dataDir)).toEqual(before);

    // A wiped member with backups in the store: quorum is lost, no guess.
    await rm(c.members[2]!.dataDir, { recursive: true, force: true });
    const wiped = memberOf(2, await writeTemplate(c, 2, dir));
    const store = async () =>
      ({
        list: async () => [newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: 5, createdOn: new Date() })],
      }) as unknown as SnapStore;
    const err = await initialize(c, wiped, store).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'quorum-lost' });
    expect((err as Error).message).toMatch(/no quorate cluster answered/);
  }, 60_000);
});
