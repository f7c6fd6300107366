/**
 * The seeded fault soak (e2e/soak, `npm run soak`) for short fixed seeds, one per topology: faults while the
 * workload writes, then the independent checker (verify, restores compared with etcd key by key and by
 * hashkv, acknowledged writes, points in time, crashes, leftovers). Longer runs, other seeds and the S3
 * store behind the fault proxy: `npm run soak -- --seed=<n> --minutes=<m> …` (docs/testing.md "How it is tested
 * under faults").
 */
import { describe, expect, it } from 'vitest';
import { resultTable } from './soak/report.js';
import { describeFailure, runSoak, type SoakResult } from './soak/run.js';
import type { FaultKind, Topology } from './soak/schedule.js';
import { etcdBinaries } from '../test/support/etcd.js';

async function soak(seed: number, topology: Topology, seconds: number): Promise<SoakResult> {
  const bins = await etcdBinaries();
  const result = await runSoak({
    seed,
    durationMs: seconds * 1000,
    topology,
    store: 'local',
    pointInTimeChecks: 2,
    etcdPath: bins.etcd,
    etcdctlPath: bins.etcdctl ?? 'etcdctl',
    keep: false,
    log: () => undefined,
  });
  expect(result.failures, `${resultTable(result, seconds / 60)}\n${describeFailure(result)}`).toEqual([]);
  expect(result.lost).toBe(0);
  expect(result.writesAcked).toBeGreaterThan(50);
  expect(result.storeRevision).toBe(result.headRevision);
  return result;
}

const injected = (r: SoakResult, kind: FaultKind) => r.nemesis.injected[kind] ?? 0;

describe('fault soak (fixed seeds)', () => {
  it('seed 2, one member: sidecar SIGKILL/SIGTERM and etcd SIGKILL, nothing acknowledged lost', { timeout: 300_000 }, async () => {
    const r = await soak(2, 'single', 25);
    expect(injected(r, 'sidecar-sigkill') + injected(r, 'sidecar-sigterm')).toBeGreaterThanOrEqual(2);
    expect(injected(r, 'etcd-sigkill')).toBeGreaterThanOrEqual(1);
  });

  it(
    'seed 16, three members: a corrupted data dir re-added through the wrapper protocol, kills, nothing acknowledged lost',
    { timeout: 600_000 },
    async () => {
      const r = await soak(16, 'three', 30);
      // The first data fault always finds a cluster of three voting members; later faults may be skipped.
      expect(injected(r, 'data-dir-corrupt')).toBe(1);
      expect(Object.values(r.nemesis.injected).reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(3);
    },
  );
});
