/**
 * The seeded fault soak (e2e/soak, `npm run soak`) for a short fixed seed: faults against a single member and
 * its sidecar while the workload writes, then the independent checker. Longer runs, other seeds and
 * topologies: `npm run soak -- --seed=<n> --minutes=<m> …` (README "How it is tested under faults").
 */
import { describe, expect, it } from 'vitest';
import { resultTable } from './soak/report.js';
import { describeFailure, runSoak } from './soak/run.js';
import { etcdBinaries } from '../test/support/etcd.js';

describe('fault soak (fixed seed)', () => {
  it(
    'seed 2, single member, Local store: faults injected, nothing acknowledged lost, every check passes',
    { timeout: 300_000 },
    async () => {
      const bins = await etcdBinaries();
      const result = await runSoak({
        seed: 2,
        durationMs: 45_000,
        topology: 'single',
        store: 'local',
        pointInTimeChecks: 2,
        etcdPath: bins.etcd,
        etcdctlPath: bins.etcdctl ?? 'etcdctl',
        keep: false,
        log: () => undefined,
      });
      const table = resultTable(result, 0.75);
      expect(result.failures, `${table}\n${describeFailure(result)}`).toEqual([]);
      expect(result.lost).toBe(0);
      expect(Object.values(result.nemesis.injected).reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(5);
      expect(result.writesAcked).toBeGreaterThan(100);
      expect(result.storeRevision).toBe(result.headRevision);
    },
  );
});
