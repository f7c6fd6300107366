/**
 * Full and delta snapshot leases (upstream `pkg/health/heartbeat/heartbeat.go`) through our Kubernetes client (src/k8s/http.ts)
 * against the fake API server.
 */
import { describe, expect, it } from 'vitest';
import { FakeClock, systemClock } from '../../src/clock.js';
import { createKubeClient } from '../../src/k8s/client.js';
import { isKubeError } from '../../src/k8s/errors.js';
import { FullSnapshotLeaseRenewer, SnapshotLeases, snapshotLeaseHooks } from '../../src/k8s/snapshot-leases.js';
import { FakeKubeApiServer, LEASES } from '../support/fake-kube.js';
import { deltaSnapshot, fullSnapshot, micro, recordingLogger, seedLease } from './support.js';
import { waitFor } from '../support/wait.js';
import { useFakeKube } from '../support/fake-kube-fixture.js';

const NS = 'shoot--dev--one';
const FULL = 'etcd-main-full-snap';
const DELTA = 'etcd-main-delta-snap';
const fullPath = `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/${FULL}`;
const deltaPath = `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/${DELTA}`;

const k8s = useFakeKube();

function leases(opts: { clock?: FakeClock | typeof systemClock; logger?: ReturnType<typeof recordingLogger> } = {}): SnapshotLeases {
  return new SnapshotLeases({
    kube: k8s.kube,
    namespace: NS,
    fullSnapshotLeaseName: FULL,
    deltaSnapshotLeaseName: DELTA,
    clock: opts.clock ?? systemClock,
    logger: opts.logger ?? recordingLogger(),
  });
}

const spec = (name: string): Record<string, unknown> => k8s.fake.read(LEASES, NS, name)!.spec as Record<string, unknown>;
const created = new Date('2026-01-02T03:04:05Z');

describe('full snapshot lease', () => {
  it('sets holderIdentity to the last revision (decimal) and renewTime to the snapshot creation time', async () => {
    seedLease(k8s.fake, NS, FULL);
    const rv = k8s.fake.read(LEASES, NS, FULL)!.metadata.resourceVersion;
    const res = await leases().updateFull(fullSnapshot(1234567, created));
    expect(res).toEqual({ patched: true, holderIdentity: '1234567' });
    expect(spec(FULL)).toEqual({ holderIdentity: '1234567', renewTime: '2026-01-02T03:04:05.000000Z' });
    // A merge patch carrying the resourceVersion that was read: the optimistic lock.
    const [patch] = k8s.fake.requestsMatching({ method: 'PATCH', path: fullPath });
    expect(patch?.contentType).toBe('application/merge-patch+json');
    expect(patch?.body).toEqual({
      metadata: { resourceVersion: rv },
      spec: { holderIdentity: '1234567', renewTime: '2026-01-02T03:04:05.000000Z' },
    });
  });

  it('raises a lower holder, and with an equal holder renews only renewTime', async () => {
    seedLease(k8s.fake, NS, FULL, { holderIdentity: '100', renewTime: '2025-01-01T00:00:00.000000Z' });
    await leases().updateFull(fullSnapshot(150, created));
    expect(spec(FULL)).toEqual({ holderIdentity: '150', renewTime: micro(created) });

    const later = new Date('2026-01-02T04:00:00.250Z');
    const res = await leases().updateFull(fullSnapshot(150, later));
    expect(res).toEqual({ patched: true, holderIdentity: '150' });
    expect(spec(FULL)).toEqual({ holderIdentity: '150', renewTime: '2026-01-02T04:00:00.250000Z' });
    expect(k8s.fake.requestsMatching({ method: 'PATCH' }).at(-1)?.body).toMatchObject({
      spec: { renewTime: '2026-01-02T04:00:00.250000Z' },
    });
    expect((k8s.fake.requestsMatching({ method: 'PATCH' }).at(-1)?.body as { spec: object }).spec).not.toHaveProperty('holderIdentity');
  });

  it('does not lower a higher holder and sends no patch', async () => {
    seedLease(k8s.fake, NS, FULL, { holderIdentity: '900', renewTime: '2025-01-01T00:00:00.000000Z' });
    const before = k8s.fake.read(LEASES, NS, FULL);
    const res = await leases().updateFull(fullSnapshot(500, created));
    expect(res).toEqual({ patched: false, holderIdentity: '900' });
    expect(k8s.fake.read(LEASES, NS, FULL)).toEqual(before);
    expect(k8s.fake.requestsMatching({ method: 'PATCH' })).toHaveLength(0);
  });

  it('retries on 409 Conflict: re-reads the lease and patches with the new resourceVersion', async () => {
    seedLease(k8s.fake, NS, FULL, { holderIdentity: '10' });
    k8s.fake.beforeNext({ method: 'PATCH', path: fullPath }, () =>
      k8s.fake.write(LEASES, NS, FULL, (o) => {
        (o.metadata.annotations as Record<string, string> | undefined) ??= {};
        (o.metadata.annotations as Record<string, string>).touched = 'by-druid';
      }),
    );
    const res = await leases().updateFull(fullSnapshot(20, created));
    expect(res.holderIdentity).toBe('20');
    expect(k8s.fake.requestsMatching({ method: 'PATCH', path: fullPath }).map((r) => r.status)).toEqual([409, 200]);
    expect(k8s.fake.requestsMatching({ method: 'GET', path: fullPath })).toHaveLength(2);
    const lease = k8s.fake.read(LEASES, NS, FULL)!;
    expect(lease.metadata.annotations).toEqual({ touched: 'by-druid' });
    expect(lease.spec).toMatchObject({ holderIdentity: '20' });
  });

  it('after a conflict, a concurrently published higher revision wins', async () => {
    seedLease(k8s.fake, NS, FULL, { holderIdentity: '10' });
    k8s.fake.beforeNext({ method: 'PATCH', path: fullPath }, () =>
      k8s.fake.write(LEASES, NS, FULL, (o) => {
        (o.spec as Record<string, unknown>).holderIdentity = '99';
      }),
    );
    const res = await leases().updateFull(fullSnapshot(20, created));
    expect(res).toEqual({ patched: false, holderIdentity: '99' });
    expect(spec(FULL).holderIdentity).toBe('99');
  });

  it('gives up after 4 conflicting attempts with E_KUBE_CONFLICT', async () => {
    seedLease(k8s.fake, NS, FULL);
    k8s.fake.failNext(4, { status: 409 }, { method: 'PATCH', path: fullPath });
    const err = await leases()
      .updateFull(fullSnapshot(20, created))
      .catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_CONFLICT')).toBe(true);
    expect(k8s.fake.requestsMatching({ method: 'PATCH', path: fullPath })).toHaveLength(4);
  });

  it('a missing lease is E_KUBE_NOT_FOUND naming namespace/name; nothing is created', async () => {
    const err = await leases()
      .updateFull(fullSnapshot(20, created))
      .catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_NOT_FOUND')).toBe(true);
    expect((err as Error).message).toContain(`lease ${NS}/${FULL}`);
    expect((err as Error).message).toContain('etcd-druid');
    expect(k8s.fake.read(LEASES, NS, FULL)).toBeUndefined();
    expect(k8s.fake.requestsMatching({ method: 'POST' })).toHaveLength(0);
  });

  it('a holder that is not a revision is an error (upstream ParseInt), the lease is left alone', async () => {
    seedLease(k8s.fake, NS, FULL, { holderIdentity: 'abc:def:Leader' });
    const err = await leases()
      .updateFull(fullSnapshot(20, created))
      .catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_BAD_OBJECT')).toBe(true);
    expect((err as Error).message).toContain('abc:def:Leader');
    expect(k8s.fake.requestsMatching({ method: 'PATCH' })).toHaveLength(0);
  });

  it('times out after 60 s on the injected clock', async () => {
    seedLease(k8s.fake, NS, FULL);
    const clock = new FakeClock('2026-01-02T00:00:00Z');
    k8s.fake.stallNext(1, { method: 'GET', path: fullPath });
    const pending = leases({ clock })
      .updateFull(fullSnapshot(20, created))
      .catch((e: unknown) => e);
    await waitFor(() => k8s.fake.requestsMatching({ method: 'GET', path: fullPath }).length === 1, 'the stalled GET', 5_000, 5);
    clock.advance(59_999);
    clock.advance(1);
    const err = await pending;
    expect(isKubeError(err, 'E_KUBE_TIMEOUT')).toBe(true);
    expect((err as Error).message).toContain('60 s');
  });

  it('an unreachable API server is E_KUBE_UNREACHABLE', async () => {
    const gone = await FakeKubeApiServer.start();
    const url = gone.url;
    await gone.stop();
    const client = await createKubeClient({ kind: 'server', server: url });
    const l = new SnapshotLeases({
      kube: client,
      namespace: NS,
      fullSnapshotLeaseName: FULL,
      deltaSnapshotLeaseName: DELTA,
      clock: systemClock,
      logger: recordingLogger(),
    });
    const err = await l.updateFull(fullSnapshot(1, created)).catch((e: unknown) => e);
    expect(isKubeError(err, 'E_KUBE_UNREACHABLE')).toBe(true);
    // The transport's own reason, not just fetch's "fetch failed".
    expect((err as Error).message).toContain('ECONNREFUSED');
  });
});

describe('delta snapshot lease', () => {
  const now = new Date('2026-03-04T05:06:07.890Z');

  it('"0" when there are no deltas and no holder; renewTime = now; no optimistic lock', async () => {
    seedLease(k8s.fake, NS, DELTA);
    const res = await leases({ clock: new FakeClock(now) }).updateDelta([]);
    expect(res.holderIdentity).toBe('0');
    expect(spec(DELTA)).toEqual({ holderIdentity: '0', renewTime: '2026-03-04T05:06:07.890000Z' });
    const [patch] = k8s.fake.requestsMatching({ method: 'PATCH', path: deltaPath });
    expect(patch?.contentType).toBe('application/merge-patch+json');
    expect(patch?.body).toEqual({ spec: { holderIdentity: '0', renewTime: '2026-03-04T05:06:07.890000Z' } });
  });

  it('no deltas and an existing holder: only renewTime changes', async () => {
    seedLease(k8s.fake, NS, DELTA, { holderIdentity: '55' });
    await leases({ clock: new FakeClock(now) }).updateDelta([]);
    expect(spec(DELTA)).toEqual({ holderIdentity: '55', renewTime: micro(now) });
  });

  it('holder = last delta revision when missing or lower; a higher holder stays', async () => {
    seedLease(k8s.fake, NS, DELTA, { holderIdentity: '100' });
    const deltas = [deltaSnapshot(101, 110, now), deltaSnapshot(111, 120, now)];
    await leases({ clock: new FakeClock(now) }).updateDelta(deltas);
    expect(spec(DELTA)).toMatchObject({ holderIdentity: '120' });

    k8s.fake.write(LEASES, NS, DELTA, (o) => {
      (o.spec as Record<string, unknown>).holderIdentity = '500';
    });
    const later = new Date(now.getTime() + 20_000);
    await leases({ clock: new FakeClock(later) }).updateDelta(deltas);
    expect(spec(DELTA)).toEqual({ holderIdentity: '500', renewTime: micro(later) });

    k8s.fake.remove(LEASES, NS, DELTA);
    seedLease(k8s.fake, NS, DELTA);
    await leases({ clock: new FakeClock(now) }).updateDelta(deltas);
    expect(spec(DELTA)).toMatchObject({ holderIdentity: '120' });
  });

  it('is not conditional on resourceVersion (a concurrent write does not make it fail)', async () => {
    seedLease(k8s.fake, NS, DELTA);
    k8s.fake.beforeNext({ method: 'PATCH', path: deltaPath }, () => k8s.fake.write(LEASES, NS, DELTA));
    await leases().updateDelta([deltaSnapshot(1, 9, now)]);
    expect(k8s.fake.requestsMatching({ method: 'PATCH' }).map((r) => r.status)).toEqual([200]);
  });
});

describe('snapshot lease hooks (the snapshotter onSnapshot and onIdleDeltaPeriod)', () => {
  it('after a delta: updates the delta lease from the latest delta set; failures are only warned', async () => {
    seedLease(k8s.fake, NS, DELTA);
    const logger = recordingLogger();
    const l = leases({ logger });
    const renewer = new FullSnapshotLeaseRenewer({ leases: l, latestFull: () => undefined, clock: new FakeClock(0), logger });
    const delta = deltaSnapshot(11, 42, created);
    const hooks = snapshotLeaseHooks({ leases: l, renewer, latestDeltas: async () => [delta], logger });
    await hooks.onSnapshot(delta);
    expect(spec(DELTA)).toMatchObject({ holderIdentity: '42' });

    k8s.fake.remove(LEASES, NS, DELTA);
    await expect(hooks.onSnapshot(delta)).resolves.toBeUndefined();
    expect(logger.warnings().join('\n')).toContain(
      `Delta snapshot lease update failed: lease ${NS}/${DELTA} (delta snapshot lease) does not exist`,
    );

    const failing = snapshotLeaseHooks({ leases: l, renewer, latestDeltas: () => Promise.reject(new Error('store list failed')), logger });
    await expect(failing.onSnapshot(delta)).resolves.toBeUndefined();
    expect(logger.warnings().at(-1)).toContain('store list failed');
  });

  it('after a full snapshot: triggers the full lease renewer at once', async () => {
    seedLease(k8s.fake, NS, FULL);
    const clock = new FakeClock('2026-01-02T00:00:00Z');
    const logger = recordingLogger();
    const l = leases({ clock, logger });
    const full = fullSnapshot(77, created);
    const renewer = new FullSnapshotLeaseRenewer({ leases: l, latestFull: () => full, clock, logger });
    const hooks = snapshotLeaseHooks({ leases: l, renewer, latestDeltas: () => [], logger });
    await hooks.onSnapshot(full);
    await renewer.whenIdle();
    expect(spec(FULL)).toEqual({ holderIdentity: '77', renewTime: micro(created) });
    expect(renewer.pending).toBe(false);
    await renewer.stop();
  });

  it('an idle delta period renews renewTime with the holder unchanged, quietly; the full lease is left alone', async () => {
    // What the lease holds after the last delta on a now idle etcd (druid's BackupReady reads renewTime).
    seedLease(k8s.fake, NS, DELTA, { holderIdentity: '42', renewTime: micro(created) });
    seedLease(k8s.fake, NS, FULL, { holderIdentity: '10', renewTime: micro(created) });
    const fullBefore = k8s.fake.read(LEASES, NS, FULL);
    const clock = new FakeClock('2026-01-02T03:09:05.500Z');
    const logger = recordingLogger();
    const l = leases({ clock, logger });
    const renewer = new FullSnapshotLeaseRenewer({ leases: l, latestFull: () => undefined, clock, logger });
    const hooks = snapshotLeaseHooks({ leases: l, renewer, latestDeltas: () => [deltaSnapshot(11, 42, created)], logger });
    for (const step of [0, 20_000, 20_000]) {
      clock.advance(step);
      await hooks.onIdleDeltaPeriod(new AbortController().signal);
      expect(spec(DELTA)).toEqual({ holderIdentity: '42', renewTime: micro(clock.now()) });
    }
    // Only renewTime is sent: the holder is the revision of the last delta, and no new one was stored.
    const patches = k8s.fake.requestsMatching({ method: 'PATCH', path: deltaPath });
    expect(patches.map((p) => p.body)).toEqual(
      [0, 20_000, 40_000].map((ms) => ({ spec: { renewTime: micro(new Date(Date.parse('2026-01-02T03:09:05.500Z') + ms)) } })),
    );
    expect(k8s.fake.read(LEASES, NS, FULL)).toEqual(fullBefore);
    expect(logger.warnings()).toEqual([]);
    // An idle etcd's log stays quiet: the renewal of an unchanged holder is a debug line.
    expect(logger.lines.filter((x) => x.msg === 'Delta snapshot lease renewed').map((x) => x.level)).toEqual(['debug', 'debug', 'debug']);
  });

  it('an idle delta period raises a holder the store is above (a failed renewal before), and writes "0" into an empty lease', async () => {
    // Upstream lists the store on every tick: the latest deltas decide, as after a delta.
    seedLease(k8s.fake, NS, DELTA, { holderIdentity: '30' });
    const logger = recordingLogger();
    const l = leases({ clock: new FakeClock(created), logger });
    const renewer = new FullSnapshotLeaseRenewer({ leases: l, latestFull: () => undefined, clock: new FakeClock(created), logger });
    let deltas = [deltaSnapshot(11, 30, created), deltaSnapshot(31, 42, created)];
    const hooks = snapshotLeaseHooks({ leases: l, renewer, latestDeltas: () => deltas, logger });
    await hooks.onIdleDeltaPeriod(new AbortController().signal);
    expect(spec(DELTA)).toEqual({ holderIdentity: '42', renewTime: micro(created) });
    expect(logger.lines.find((x) => x.msg === 'Delta snapshot lease renewed')?.level).toBe('info');

    // A new full snapshot starts a set without deltas: the holder stays (upstream), only renewTime moves.
    deltas = [];
    await hooks.onIdleDeltaPeriod(new AbortController().signal);
    expect(spec(DELTA)).toMatchObject({ holderIdentity: '42' });

    k8s.fake.remove(LEASES, NS, DELTA);
    seedLease(k8s.fake, NS, DELTA);
    await hooks.onIdleDeltaPeriod(new AbortController().signal);
    expect(spec(DELTA)).toEqual({ holderIdentity: '0', renewTime: micro(created) });
  });

  it('runs delta lease updates one at a time; an aborted idle renewal (the snapshotter stopped) is no warning', async () => {
    seedLease(k8s.fake, NS, DELTA);
    const logger = recordingLogger();
    const l = leases({ logger });
    const renewer = new FullSnapshotLeaseRenewer({ leases: l, latestFull: () => undefined, clock: new FakeClock(0), logger });
    const delta = deltaSnapshot(11, 42, created);
    let listed = 0;
    const hooks = snapshotLeaseHooks({
      leases: l,
      renewer,
      latestDeltas: () => {
        listed++;
        return [delta];
      },
      logger,
    });
    k8s.fake.stallNext(1, { method: 'PATCH', path: deltaPath });
    const stop = new AbortController();
    const idle = hooks.onIdleDeltaPeriod(stop.signal);
    await waitFor(() => k8s.fake.requestsMatching({ method: 'PATCH', path: deltaPath }).length === 1, 'the stalled idle renewal');
    const afterDelta = hooks.onSnapshot(delta);
    // The update after the delta waits for the renewal in flight: it has not even listed the store yet.
    await new Promise((resolve) => setImmediate(resolve));
    expect(listed).toBe(1);
    expect(k8s.fake.requestsMatching({ path: deltaPath })).toHaveLength(2);
    stop.abort();
    await idle;
    await afterDelta;
    expect(spec(DELTA)).toMatchObject({ holderIdentity: '42' });
    expect(k8s.fake.requestsMatching({ path: deltaPath }).map((r) => r.method)).toEqual(['GET', 'PATCH', 'GET', 'PATCH']);
    expect(logger.warnings()).toEqual([]);
    expect(logger.lines.some((x) => x.level === 'debug' && x.msg.includes('renewal aborted'))).toBe(true);
  });
});

describe('FullSnapshotLeaseRenewer (upstream RenewFullSnapshotLeasePeriodically)', () => {
  it('waits one interval, re-arms while there is no full snapshot, stops after a success', async () => {
    seedLease(k8s.fake, NS, FULL);
    const clock = new FakeClock('2026-01-02T00:00:00Z');
    const logger = recordingLogger();
    let latest: ReturnType<typeof fullSnapshot> | undefined;
    const renewer = new FullSnapshotLeaseRenewer({ leases: leases({ clock, logger }), latestFull: () => latest, clock, logger });
    try {
      renewer.start();
      clock.advance(59_999);
      await renewer.whenIdle();
      expect(k8s.fake.requests).toHaveLength(0);
      clock.advance(1);
      await renewer.whenIdle();
      expect(k8s.fake.requests).toHaveLength(0);
      expect(renewer.pending).toBe(true);
      expect(clock.nextDue()?.toISOString()).toBe('2026-01-02T00:02:00.000Z');

      latest = fullSnapshot(300, created);
      clock.advance(60_000);
      await renewer.whenIdle();
      expect(spec(FULL)).toMatchObject({ holderIdentity: '300' });
      expect(renewer.pending).toBe(false);
      clock.advance(10 * 60_000);
      await renewer.whenIdle();
      expect(k8s.fake.requestsMatching({ method: 'PATCH' })).toHaveLength(1);
    } finally {
      await renewer.stop();
    }
  });

  it('a failed update is warned and retried one interval later', async () => {
    seedLease(k8s.fake, NS, FULL);
    const clock = new FakeClock('2026-01-02T00:00:00Z');
    const logger = recordingLogger();
    const renewer = new FullSnapshotLeaseRenewer({
      leases: leases({ clock, logger }),
      latestFull: () => fullSnapshot(5, created),
      clock,
      logger,
    });
    try {
      k8s.fake.failNext(1, { status: 500 }, { method: 'GET', path: fullPath });
      renewer.trigger();
      await renewer.whenIdle();
      expect(logger.warnings()).toHaveLength(1);
      expect(logger.warnings()[0]).toContain('Full snapshot lease update failed');
      expect(logger.warnings()[0]).toContain('HTTP 500');
      expect(renewer.pending).toBe(true);
      expect(spec(FULL).holderIdentity).toBeUndefined();

      clock.advance(60_000);
      await renewer.whenIdle();
      expect(spec(FULL).holderIdentity).toBe('5');
      expect(renewer.pending).toBe(false);
    } finally {
      await renewer.stop();
    }
  });

  it('a missing lease keeps being retried every interval with a warning naming it', async () => {
    const clock = new FakeClock(0);
    const logger = recordingLogger();
    const renewer = new FullSnapshotLeaseRenewer({
      leases: leases({ clock, logger }),
      latestFull: () => fullSnapshot(5, created),
      clock,
      logger,
    });
    try {
      renewer.trigger();
      await renewer.whenIdle();
      clock.advance(60_000);
      await renewer.whenIdle();
      expect(logger.warnings()).toHaveLength(2);
      expect(logger.warnings()[1]).toContain(`lease ${NS}/${FULL} (full snapshot lease) does not exist`);
      expect(renewer.pending).toBe(true);
    } finally {
      await renewer.stop();
    }
  });

  it('a timed-out update is retried after the interval; stop aborts a stalled update', async () => {
    seedLease(k8s.fake, NS, FULL);
    const clock = new FakeClock(0);
    const logger = recordingLogger();
    const renewer = new FullSnapshotLeaseRenewer({
      leases: leases({ clock, logger }),
      latestFull: () => fullSnapshot(8, created),
      clock,
      logger,
    });
    k8s.fake.stallNext(2, { method: 'GET', path: fullPath });
    renewer.trigger();
    await waitFor(() => k8s.fake.requestsMatching({ method: 'GET' }).length === 1, 'the first (stalled) GET', 5_000, 5);
    clock.advance(60_000);
    await renewer.whenIdle();
    expect(logger.warnings()[0]).toContain('did not finish within 60 s');
    expect(renewer.pending).toBe(true);

    clock.advance(60_000);
    await waitFor(() => k8s.fake.requestsMatching({ method: 'GET' }).length === 2, 'the retried (stalled) GET', 5_000, 5);
    await renewer.stop();
    expect(renewer.pending).toBe(false);
    expect(logger.warnings()).toHaveLength(1);
    expect(clock.pending).toBe(0);
  });

  it('a trigger during an update runs another one right after it', async () => {
    seedLease(k8s.fake, NS, FULL);
    const clock = new FakeClock(0);
    const logger = recordingLogger();
    let latest = fullSnapshot(10, created);
    const renewer = new FullSnapshotLeaseRenewer({ leases: leases({ clock, logger }), latestFull: () => latest, clock, logger });
    try {
      renewer.trigger();
      latest = fullSnapshot(20, new Date(created.getTime() + 3_600_000));
      renewer.trigger();
      await renewer.whenIdle();
      expect(spec(FULL)).toEqual({ holderIdentity: '20', renewTime: '2026-01-02T04:04:05.000000Z' });
      expect(k8s.fake.requestsMatching({ method: 'PATCH' })).toHaveLength(2);
    } finally {
      await renewer.stop();
    }
  });
});
