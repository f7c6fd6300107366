import { describe, expect, it } from 'vitest';
import { Metrics, failureLabel } from '../../src/metrics.js';

describe('metrics', () => {
  it('exposes every etcdbr_* series of upstream pre-initialised to zero', async () => {
    const text = await new Metrics({ defaultMetrics: false }).registry.metrics();
    const expectLine = (line: string) => expect(text.split('\n')).toContain(line);
    for (const kind of ['Full', 'Incr', 'Chunk']) {
      expectLine(`etcdbr_snapshot_latest_revision{kind="${kind}"} 0`);
      expectLine(`etcdbr_snapshot_latest_timestamp{kind="${kind}"} 0`);
      expectLine(`etcdbr_snapshot_required{kind="${kind}"} 0`);
      for (const s of ['false', 'true']) {
        expectLine(`etcdbr_snapshot_gc_total{kind="${kind}",succeeded="${s}"} 0`);
        expectLine(`etcdbr_snapshot_duration_seconds_count{kind="${kind}",succeeded="${s}"} 0`);
      }
    }
    for (const s of ['false', 'true']) {
      expectLine(`etcdbr_validation_duration_seconds_count{succeeded="${s}"} 0`);
      expectLine(`etcdbr_defragmentation_duration_seconds_count{succeeded="${s}",endpoint=""} 0`);
      expectLine(`etcdbr_is_learner_count_total{succeeded="${s}"} 0`);
      expectLine(`etcdbr_add_learner_duration_seconds_count{succeeded="${s}"} 0`);
      expectLine(`etcdbr_member_remove_duration_seconds_count{succeeded="${s}"} 0`);
      expectLine(`etcdbr_member_promote_duration_seconds_count{succeeded="${s}"} 0`);
      for (const r of ['single_member', 'single_node']) {
        expectLine(`etcdbr_restoration_duration_seconds_count{restore="${r}",succeeded="${s}"} 0`);
      }
    }
    expectLine('etcdbr_snapshotter_failure{error=""} 0');
    expectLine('etcdbr_snapstore_latest_deltas_total 0');
    expectLine('etcdbr_snapstore_latest_deltas_revisions_total 0');
    expectLine('etcdbr_cluster_size 0');
    expectLine('etcdbr_is_learner 0');
    expect(text).toMatch(/^# TYPE etcdbr_network_transmitted_bytes counter$/m);
    expect(text).toMatch(/^# TYPE etcdbr_network_received_bytes counter$/m);
  });

  it('keeps separate registries per instance', async () => {
    const a = new Metrics({ defaultMetrics: false });
    const b = new Metrics({ defaultMetrics: false });
    a.clusterSize.set(3);
    expect(await b.registry.metrics()).toContain('etcdbr_cluster_size 0');
    expect(await a.registry.metrics()).toContain('etcdbr_cluster_size 3');
  });
});

describe('failure label', () => {
  it('keeps one series per kind of failure, whatever the names and numbers in it', () => {
    const a = failureLabel(new Error('cannot save Full-00000000-00001234-1795219404.gz to 10.0.0.7:9000: timeout after 30000ms'));
    const b = failureLabel(new Error('cannot save Full-00000000-00098765-1795299999.gz to 10.0.0.8:9000: timeout after 30000ms'));
    expect(a).toBe(b);
    expect(a).toBe('cannot save Full-N-N-N.gz to N.N.N.N:N: timeout after Nms');
  });

  it('hides long hex ids and cuts long messages', () => {
    expect(failureLabel(new Error('member 8e9e05c52164694d not found'))).toBe('member X not found');
    const long = failureLabel('x'.repeat(500));
    expect(long.length).toBe(120);
    expect(long.endsWith('…')).toBe(true);
  });
});
