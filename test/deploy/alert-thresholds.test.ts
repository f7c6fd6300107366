/**
 * deploy/monitoring/prometheus-rule.yaml's thresholds follow the sidecar's defaults: the full-snapshot alert
 * waits two periods of the default --schedule, no less (it would fire between two good snapshots) and no more
 * (a missing full would go unnoticed for a day). e2e/alerts.test.ts evaluates the rules with promtool.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { snapshotterGroup } from '../../src/config/groups/snapshotter.js';
import { CronSchedule } from '../../src/config/schedule.js';
import { HASH_DRILL_RESULTS, Metrics } from '../../src/metrics.js';

const RULE = fileURLToPath(new URL('../../deploy/monitoring/prometheus-rule.yaml', import.meta.url));

interface Rule {
  alert: string;
  expr: string;
}

function rule(name: string): Rule {
  const doc = parse(readFileSync(RULE, 'utf8')) as { spec: { groups: Array<{ rules: Rule[] }> } };
  const found = doc.spec.groups.flatMap((g) => g.rules).find((r) => r.alert === name);
  if (!found) throw new Error(`no alert ${name} in ${RULE}`);
  return found;
}

/** The `time() - <metric> > N` threshold of an expression, in seconds (N may be a product such as 2 * 3600). */
function ageThresholdSeconds(expr: string): number {
  const m = /time\(\) - [^>]+> ([\d\s*]+)$/.exec(expr.trim());
  if (!m) throw new Error(`no age threshold in ${expr}`);
  return m[1]!.split('*').reduce((p, f) => p * Number(f.trim()), 1);
}

describe('prometheus-rule.yaml thresholds', () => {
  it('EtcdBackupFullSnapshotMissing waits two periods of the default --schedule', () => {
    const schedule = new CronSchedule(snapshotterGroup.defaults().schedule, { timeZone: 'UTC' });
    const first = schedule.next(new Date('2026-01-01T00:30:00Z'));
    const period = (schedule.next(first).getTime() - first.getTime()) / 1000;
    expect(ageThresholdSeconds(rule('EtcdBackupFullSnapshotMissing').expr)).toBe(2 * period);
  });

  it("EtcdBackupHashDrillMismatch counts the drill's mismatch result, under the name the sidecar exposes", () => {
    const name = (new Metrics({ defaultMetrics: false }).hashDrillRuns as unknown as { name: string }).name;
    expect(HASH_DRILL_RESULTS).toContain('mismatch');
    expect(rule('EtcdBackupHashDrillMismatch').expr).toBe(`increase(${name}{result="mismatch"}[6h]) > 0`);
  });
});
