/**
 * Member operations against scripted etcd answers (the error texts are etcd 3.4's, as EtcdClient passes them on):
 * retry and backoff of add-as-learner, the answers that count as success, removal, promotion and the
 * learner promoter's logging. The real-cluster behaviour is in test/initializer/multinode.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/clock.js';
import {
  ADD_LEARNER_RETRY,
  MemberControl,
  memberErrorKind,
  memberOpEndpoints,
  retryDelay,
  type ClusterClientFactory,
} from '../../src/cluster/members.js';
import { LearnerPromoter } from '../../src/cluster/promoter.js';
import type { EtcdMember } from '../../src/etcd/index.js';
import { Metrics } from '../../src/metrics.js';
import { fakeEtcdClient } from '../support/etcd-client.js';
import { collectingLogger } from './multinode-support.js';

const grpc = (code: number, text: string) => Object.assign(new Error(`${code} ${text}`), { code });
const TOO_MANY = grpc(9, 'FAILED_PRECONDITION: etcdserver: too many learner members in cluster');
const EXISTS = grpc(9, 'FAILED_PRECONDITION: etcdserver: member ID already exist');
const PEER_EXISTS = grpc(9, 'FAILED_PRECONDITION: etcdserver: Peer URLs already exists');
const UNHEALTHY = grpc(14, 'UNAVAILABLE: etcdserver: unhealthy cluster');
const NOT_IN_SYNC = grpc(9, 'FAILED_PRECONDITION: etcdserver: can only promote a learner member which is in sync with leader');
const NOT_LEARNER = grpc(9, 'FAILED_PRECONDITION: etcdserver: can only promote a learner member');
const NOT_FOUND = grpc(5, 'NOT_FOUND: etcdserver: member not found');

interface Calls {
  add: Array<{ endpoint: string; req: unknown }>;
  remove: Array<{ endpoint: string; req: unknown }>;
  promote: Array<{ endpoint: string; req: unknown }>;
}

/** A member as etcd answers MemberAdd: a learner that has not started (no name, no client URLs). */
const added = (id: string): EtcdMember => ({ id, name: '', peerUrls: ['https://etcd-main-1.peer:2380'], clientUrls: [], isLearner: true });

/** A client factory whose member RPCs answer from a script, one answer per call (an Error is thrown). */
function scripted(script: { add?: Array<EtcdMember | Error>; remove?: Error[]; promote?: Error[] }): {
  factory: ClusterClientFactory;
  calls: Calls;
} {
  const calls: Calls = { add: [], remove: [], promote: [] };
  const answer = async <T>(list: Array<T | Error> | undefined, fallback: T): Promise<T> => {
    const v = list && list.length > 0 ? list.shift()! : fallback;
    if (v instanceof Error) throw v;
    return v;
  };
  const factory: ClusterClientFactory = async (endpoints) => {
    const endpoint = endpoints[0]!;
    return fakeEtcdClient({
      memberAdd: (peerUrls, opts) => {
        calls.add.push({ endpoint, req: { peerUrls, learner: opts?.learner } });
        return answer(script.add, added('ff'));
      },
      memberRemove: (memberId) => {
        calls.remove.push({ endpoint, req: memberId });
        return answer(script.remove, undefined);
      },
      memberPromote: (memberId) => {
        calls.promote.push({ endpoint, req: memberId });
        return answer(script.promote, undefined);
      },
    });
  };
  return { factory, calls };
}

function control(factory: ClusterClientFactory, clock: FakeClock, endpoints = ['http://a:2379']) {
  const log = collectingLogger();
  const metrics = new Metrics({ defaultMetrics: false });
  const mc = new MemberControl({
    endpoints,
    newClient: factory,
    memberName: 'etcd-main-1',
    peerUrls: ['https://etcd-main-1.peer:2380'],
    logger: log.logger,
    metrics,
    clock,
  });
  return { mc, log, metrics };
}

/** Runs `p` while moving the fake clock forward; returns the elapsed fake time with the result. */
async function drive<T>(clock: FakeClock, p: Promise<T>): Promise<{ value?: T; error?: unknown; elapsedMs: number }> {
  const start = clock.now().getTime();
  let done = false;
  const out: { value?: T; error?: unknown } = {};
  p.then(
    (v) => {
      out.value = v;
      done = true;
    },
    (e: unknown) => {
      out.error = e;
      done = true;
    },
  );
  for (let i = 0; i < 10_000 && !done; i++) await clock.advanceAsync(100);
  return { ...out, elapsedMs: clock.now().getTime() - start };
}

describe('memberErrorKind', () => {
  it.each([
    [TOO_MANY, 'too-many-learners'],
    [EXISTS, 'member-exists'],
    [PEER_EXISTS, 'peer-url-exists'],
    [UNHEALTHY, 'unhealthy-cluster'],
    [NOT_IN_SYNC, 'learner-not-in-sync'],
    [NOT_LEARNER, 'not-learner'],
    [NOT_FOUND, 'member-not-found'],
    [grpc(9, 'FAILED_PRECONDITION: etcdserver: rpc not supported for learner'), 'learner-endpoint'],
    [new Error('connect ECONNREFUSED'), 'other'],
  ])('%s', (err, kind) => {
    expect(memberErrorKind(err)).toBe(kind);
  });
});

describe('retry policy and endpoints', () => {
  it("upstream's add-learner backoff: 2 s doubling, capped at 120 s", () => {
    expect([1, 2, 3, 4, 5].map((a) => retryDelay(ADD_LEARNER_RETRY, a))).toEqual([2_000, 4_000, 8_000, 16_000, 32_000]);
    expect(retryDelay(ADD_LEARNER_RETRY, 10)).toBe(120_000);
  });

  it('takes --service-endpoints, else every advertise-client-url of the config', () => {
    expect(memberOpEndpoints(['https://svc:2379'], { 'advertise-client-urls': { a: ['https://a:2379'] } })).toEqual(['https://svc:2379']);
    expect(
      memberOpEndpoints([], { 'advertise-client-urls': { 'etcd-0': ['https://a:2379'], 'etcd-1': 'https://b:2379,https://b2:2379' } }),
    ).toEqual(['https://a:2379', 'https://b:2379', 'https://b2:2379']);
    expect(() => memberOpEndpoints([], {})).toThrow(/failed to get etcd endpoints from config file/);
  });
});

describe('MemberControl.addAsLearner', () => {
  it('adds the member as a learner with its peer URLs and counts it', async () => {
    const clock = new FakeClock(0);
    const { factory, calls } = scripted({ add: [added('deadbeef')] });
    const { mc, metrics } = control(factory, clock);
    const r = await drive(clock, mc.addAsLearner());
    expect(r.value).toEqual({ memberId: 'deadbeef', alreadyMember: false });
    expect(calls.add[0]!.req).toEqual({ peerUrls: ['https://etcd-main-1.peer:2380'], learner: true });
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/etcdbr_is_learner_count_total\{succeeded="true"\} 1/);
    expect(text).toMatch(/etcdbr_is_learner 1/);
    expect(text).toMatch(/etcdbr_add_learner_duration_seconds_count\{succeeded="true"\} 1/);
  });

  it.each([
    ['member exists', EXISTS],
    ['peer URL exists', PEER_EXISTS],
  ])('"%s" means an earlier attempt added it: success', async (_n, err) => {
    const clock = new FakeClock(0);
    const { factory } = scripted({ add: [err] });
    const { mc } = control(factory, clock);
    expect((await drive(clock, mc.addAsLearner())).value).toEqual({ alreadyMember: true });
  });

  it('"too many learners" waits 5 s on top of the backoff, and the data dir is wiped before every attempt', async () => {
    const clock = new FakeClock(0);
    const { factory, calls } = scripted({ add: [TOO_MANY, TOO_MANY, added('10')] });
    const { mc, metrics } = control(factory, clock);
    let wipes = 0;
    const r = await drive(clock, mc.addAsLearner({ beforeAttempt: async () => void wipes++ }));
    expect(r.value).toEqual({ memberId: '10', alreadyMember: false });
    expect(calls.add).toHaveLength(3);
    expect(wipes).toBe(3);
    // 5 s + 2 s, then 5 s + 4 s.
    expect(r.elapsedMs).toBeGreaterThanOrEqual(16_000);
    expect(r.elapsedMs).toBeLessThan(17_000);
    expect(await metrics.registry.metrics()).toMatch(/etcdbr_is_learner_count_total\{succeeded="false"\} 2/);
  });

  it('gives up after 6 attempts with a message that names the member and the last error', async () => {
    const clock = new FakeClock(0);
    const { factory, calls } = scripted({ add: Array.from({ length: 10 }, () => grpc(14, 'UNAVAILABLE: boom')) });
    const { mc } = control(factory, clock);
    const r = await drive(clock, mc.addAsLearner());
    expect(calls.add).toHaveLength(6);
    expect(String(r.error)).toMatch(/could not add member etcd-main-1 .* as a learner after 6 attempts: .*boom/);
    expect(r.elapsedMs).toBeGreaterThanOrEqual(62_000);
  });

  it('tries the next endpoint when one is down or a learner', async () => {
    const clock = new FakeClock(0);
    const { factory, calls } = scripted({ add: [new Error('connect ECONNREFUSED'), added('1')] });
    const { mc } = control(factory, clock, ['http://a:2379', 'http://b:2379']);
    expect((await drive(clock, mc.addAsLearner())).value).toEqual({ memberId: '1', alreadyMember: false });
    expect(calls.add.map((c) => c.endpoint)).toEqual(['http://a:2379', 'http://b:2379']);
  });
});

describe('MemberControl.remove and promote', () => {
  it('removes by hex id; "member not found" is success', async () => {
    const clock = new FakeClock(0);
    const { factory, calls } = scripted({ remove: [NOT_FOUND] });
    const { mc } = control(factory, clock);
    // drive() never rejects: a failed removal would only show in `error`.
    const r = await drive(clock, mc.remove('ff'));
    expect(r.error).toBeUndefined();
    expect(r).toHaveProperty('value');
    expect(calls.remove.map((c) => c.req)).toEqual(['ff']);
  });

  it('promote: "not a learner" means done, "not in sync" is an error for the next period', async () => {
    const clock = new FakeClock(0);
    const { factory } = scripted({ promote: [NOT_LEARNER, NOT_IN_SYNC] });
    const { mc } = control(factory, clock);
    expect(await mc.promote('a')).toBe('not-learner');
    await expect(mc.promote('a')).rejects.toThrow(/in sync with leader/);
    expect(await mc.promote('a')).toBe('promoted');
  });
});

describe('LearnerPromoter', () => {
  const status = { memberId: 'a', leaderId: 'b', isLearner: true, dbSize: 0, dbSizeInUse: 0 };

  it('one attempt per call, info while catching up, error once stuck, gauge and follow-up after promotion', async () => {
    const clock = new FakeClock(0);
    const log = collectingLogger();
    const metrics = new Metrics({ defaultMetrics: false });
    const answers: unknown[] = [NOT_IN_SYNC, NOT_IN_SYNC, 'promoted'];
    const promoted: string[] = [];
    const p = new LearnerPromoter({
      members: {
        promote: async () => {
          const a = answers.shift();
          if (a instanceof Error) throw a;
          return a as 'promoted';
        },
      },
      clusterSize: 3,
      clock,
      logger: log.logger,
      metrics,
      stuckAfterMs: 60_000,
      onPromoted: async (id) => void promoted.push(id),
    });
    p.onLearner(status);
    p.onLearner(status); // still in flight: ignored
    await p.settle();
    expect(log.lines.filter((l) => l.level === 'info' && /not yet in sync/.test(l.msg))).toHaveLength(1);
    clock.advance(61_000);
    p.onLearner(status);
    await p.settle();
    expect(log.lines.filter((l) => l.level === 'error' && /has not caught up/.test(l.msg))).toHaveLength(1);
    expect(await metrics.registry.metrics()).toMatch(/etcdbr_is_learner 1/);
    p.onLearner(status);
    await p.settle();
    expect(promoted).toEqual(['a']);
    expect(await metrics.registry.metrics()).toMatch(/etcdbr_is_learner 0/);
  });

  it('does nothing in a single-node cluster', async () => {
    // Counted, not thrown: the promoter catches what promote() throws, so a throw here could not fail the test.
    let promotes = 0;
    const log = collectingLogger();
    const p = new LearnerPromoter({
      members: {
        promote: async () => {
          promotes++;
          return 'promoted';
        },
      },
      clusterSize: 1,
      clock: new FakeClock(0),
      logger: log.logger,
      metrics: new Metrics({ defaultMetrics: false }),
    });
    p.onLearner(status);
    await p.settle();
    expect(promotes).toBe(0);
    expect(log.lines).toEqual([]);
  });
});
