/** The table a soak run prints. */
import type { SoakResult } from './run.js';

export function resultTable(r: SoakResult, minutes: number): string {
  const kinds = [...new Set([...Object.keys(r.nemesis.injected), ...Object.keys(r.nemesis.skipped)])].sort();
  const rows: Array<[string, string]> = [
    ['seed', String(r.seed)],
    ['topology / store', `${r.topology} / ${r.store}`],
    ['minutes of faults', minutes.toFixed(1)],
    ...kinds.map((k): [string, string] => [
      `faults: ${k}`,
      `${r.nemesis.injected[k as keyof typeof r.nemesis.injected] ?? 0}${r.nemesis.skipped[k as keyof typeof r.nemesis.skipped] ? ` (+${r.nemesis.skipped[k as keyof typeof r.nemesis.skipped]} skipped: target not ready)` : ''}`,
    ]),
    ['writes acknowledged', String(r.writesAcked)],
    ['writes unanswered (may or may not have applied)', String(r.writesUnknown)],
    ['lost', String(r.lost)],
    ['largest recovery point at a fault (revisions)', String(r.nemesis.maxRecoveryPoint)],
    ["etcd's head / store's last revision", `${r.headRevision} / ${r.storeRevision}`],
    ['catch-up once quiet', `${(r.catchUpMs / 1000).toFixed(1)} s`],
    ['hashkv compared', r.leases ? 'yes (leases in the workload: the restores keep them)' : 'yes'],
    ['point-in-time restores checked', r.pointInTime.join(', ') || '-'],
    ['revisions no restore reaches (delta gaps after a leader loss)', r.unreachable.join(', ') || '-'],
    ['crashes', String(r.crashes.length)],
    ['result', r.failures.length === 0 ? 'PASS' : `FAIL (${r.failures.length} differences)`],
  ];
  const w = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `| ${k.padEnd(w)} | ${v} |`).join('\n');
}
