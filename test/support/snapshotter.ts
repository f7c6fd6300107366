import type { Etcd3 } from 'etcd3';
import { silentLogger, type SnapStore } from '@etcdbrctl/snapstore';
import { systemClock, type Clock } from '../../src/clock.js';
import { Metrics } from '../../src/metrics.js';
import { CronSchedule } from '../../src/config/schedule.js';
import { Snapshotter, type SnapshotterConfig, type SnapshotterDeps } from '../../src/snapshotter/snapshotter.js';
import { ours } from './etcd-client.js';

/** A full-snapshot schedule that never fires during a test: only the start-up full (or none) is taken. */
export const YEARLY = new CronSchedule('0 0 1 1 *', { timeZone: 'UTC' });

/** Snapshotter settings for tests: yearly fulls, deltas every second, gzip; `overrides` win. */
export function testSnapshotterConfig(overrides: Partial<SnapshotterConfig> = {}): SnapshotterConfig {
  return {
    schedule: YEARLY,
    deltaSnapshotPeriodMs: 1000,
    deltaSnapshotMemoryLimit: 10 * 1024 * 1024,
    snapshotTimeoutMs: 60_000,
    connectionTimeoutMs: 5_000,
    compression: 'gzip',
    finalDeltaTimeoutMs: 5_000,
    ...overrides,
  };
}

export interface TestSnapshotterDeps {
  /** The test's own client; the snapshotter gets it as EtcdClient. */
  client: Etcd3;
  store: SnapStore;
  /** A fresh registry when not given. */
  metrics?: Metrics;
  onSnapshot?: SnapshotterDeps['onSnapshot'];
  onIdleDeltaPeriod?: SnapshotterDeps['onIdleDeltaPeriod'];
  /** The system clock when not given; a `FakeClock` makes the delta and full timers fire only when advanced. */
  clock?: Clock;
  stillLeads?: SnapshotterDeps['stillLeads'];
}

/** A snapshotter on `client` and `store` with the given clock (system clock by default) and a silent logger. */
export function createTestSnapshotter(deps: TestSnapshotterDeps, overrides: Partial<SnapshotterConfig> = {}): Promise<Snapshotter> {
  const {
    client,
    store,
    metrics = new Metrics({ defaultMetrics: false }),
    onSnapshot,
    onIdleDeltaPeriod,
    clock = systemClock,
    stillLeads,
  } = deps;
  return Snapshotter.create(testSnapshotterConfig(overrides), {
    client: ours(client),
    store: async () => store,
    clock,
    logger: silentLogger,
    metrics,
    ...(onSnapshot ? { onSnapshot } : {}),
    ...(stillLeads ? { stillLeads } : {}),
    ...(onIdleDeltaPeriod ? { onIdleDeltaPeriod } : {}),
  });
}
