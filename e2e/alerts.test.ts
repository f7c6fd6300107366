/**
 * deploy/monitoring: every alert of the PrometheusRule evaluated by promtool (Prometheus' own rule tester)
 * on the metrics a running sidecar exposes at /metrics (names, labels and values as scraped), once as they
 * are (nothing fires) and once per alert with the one value changed that should make it fire; and every
 * metric the Grafana dashboard queries is one the sidecar exposes.
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { startEtcdWithClient, type EtcdWithClient } from '../test/support/etcd.js';
import { localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';

const execFileAsync = promisify(execFile);
const ROOT = join(import.meta.dirname, '..');
const RULE = join(ROOT, 'deploy', 'monitoring', 'prometheus-rule.yaml');
const DASHBOARD = join(ROOT, 'deploy', 'monitoring', 'grafana-dashboard.json');

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (comments and help lines skipped). */
function parseExposition(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) throw new Error(`unparsable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

const seriesName = (s: Sample) =>
  `${s.name}{${Object.entries(s.labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(',')}}`;

interface Case {
  /** The alert expected to fire (none: the sidecar as scraped). */
  alert?: string;
  /** Changes the scraped samples; `t` is the evaluation time in seconds. */
  change?: (samples: Sample[], t: number) => void;
  /** Extra series promtool should see (e.g. `up`). */
  extra?: Array<{ series: string; values: string }>;
  /** Labels of the firing alert besides the rule's own. */
  labels?: Record<string, string>;
}

const EVAL_MINUTES = 3 * 24 * 60; // three days: longer than every threshold and `for` in the rules
const STEP = '5m'; // within Prometheus' 5 min lookback, so a series is never stale between samples
const STEPS = EVAL_MINUTES / 5;

function set(samples: Sample[], name: string, labels: Record<string, string>, value: number): void {
  const s = samples.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
  if (!s) throw new Error(`the sidecar exposes no ${name}${JSON.stringify(labels)}`);
  s.value = value;
}

describe('deploy/monitoring against a running sidecar', () => {
  let env: EtcdWithClient;
  let client: Etcd3;
  let sidecar: SidecarProcess | undefined;
  let scraped: Sample[];
  let scrapedAt: number;

  beforeAll(async () => {
    env = await startEtcdWithClient('etcdbr-alerts-');
    client = env.client;
    const store = join(env.dir, 'store');
    sidecar = await startSidecar([
      `--endpoints=${env.etcd.clientUrl}`,
      ...localStoreFlags(store, join(env.dir, 'tmp')),
      '--schedule=0 0 1 1 *',
      '--delta-snapshot-period=1s',
      '--garbage-collection-period=1h',
      '--verify-schedule=* * * * *',
    ]);
    const s = sidecar;
    await waitFor(async () => ((await fetch(`${s.url}/healthz`)).status === 200 ? true : undefined), 'healthz 200');
    // The put must come after the first full snapshot: one that lands before it is inside the full, and with
    // no later write no delta is ever cut.
    await waitFor(async () => {
      const text = await (await fetch(`${s.url}/metrics`)).text();
      return /etcdbr_snapshot_latest_timestamp\{kind="Full"\} [1-9]/.test(text) ? true : undefined;
    }, 'the first full snapshot in the metrics');
    await client.put('/registry/alerts/a').value('1');
    await waitFor(async () => {
      const text = await (await fetch(`${s.url}/metrics`)).text();
      return /etcdbr_snapshot_latest_timestamp\{kind="Incr"\} [1-9]/.test(text) ? true : undefined;
    }, 'a delta snapshot in the metrics');
    await fetch(`${s.url}/snapshot/verify`);
    scrapedAt = Date.now() / 1000;
    scraped = parseExposition(await (await fetch(`${s.url}/metrics`)).text());
  }, 120_000);

  afterAll(async () => {
    await sidecar?.stop();
    await env?.cleanup();
  });

  /** Runs promtool on the rule file with the scraped samples (changed by `c`) held constant for three days. */
  async function promtool(c: Case): Promise<void> {
    const dir = env.dir;
    const rules = parse(readFileSync(RULE, 'utf8')) as {
      spec: { groups: Array<{ rules: Array<{ alert: string; labels?: Record<string, string>; annotations?: Record<string, string> }> }> };
    };
    writeFileSync(join(dir, 'rules.yaml'), stringify({ groups: rules.spec.groups }));
    const t = EVAL_MINUTES * 60;
    const samples = scraped.map((s) => ({ ...s, labels: { ...s.labels } }));
    // promtool's clock starts at 0: timestamps move so that the scrape happens at the end of the window.
    for (const s of samples) {
      if (/_timestamp(_seconds)?$/.test(s.name) && s.value > 0) s.value = Math.round(s.value - scrapedAt + t);
    }
    c.change?.(samples, t);
    const input = [
      ...samples.filter((s) => s.name.startsWith('etcdbr_')).map((s) => ({ series: seriesName(s), values: `${s.value}+0x${STEPS}` })),
      { series: 'up{job="etcd-backup-restore"}', values: `1+0x${STEPS}` },
      ...(c.extra ?? []),
    ];
    const all = rules.spec.groups.flatMap((g) => g.rules);
    const tests = all.map((r) => ({
      eval_time: `${EVAL_MINUTES}m`,
      alertname: r.alert,
      exp_alerts:
        r.alert === c.alert ? [{ exp_labels: { ...(r.labels ?? {}), ...(c.labels ?? {}) }, exp_annotations: r.annotations ?? {} }] : [],
    }));
    const file = join(dir, 'rules.test.yaml');
    writeFileSync(
      file,
      stringify({
        rule_files: [join(dir, 'rules.yaml')],
        evaluation_interval: '1m',
        tests: [{ interval: STEP, input_series: input, alert_rule_test: tests }],
      }),
    );
    try {
      await execFileAsync('promtool', ['test', 'rules', file]);
    } catch (err) {
      const e = err as { stdout?: string; stderr?: string; message: string };
      throw new Error(`promtool: ${e.stdout ?? ''}${e.stderr ?? e.message}`, { cause: err });
    }
  }

  it('the sidecar as scraped: no alert fires', async () => {
    await promtool({});
  });

  it('no full snapshot for three days: EtcdBackupFullSnapshotMissing', async () => {
    await promtool({
      alert: 'EtcdBackupFullSnapshotMissing',
      labels: { kind: 'Full' },
      change: (s) => set(s, 'etcdbr_snapshot_latest_timestamp', { kind: 'Full' }, 1),
    });
  });

  it('a full snapshot three hours old (three periods of the default hourly schedule): EtcdBackupFullSnapshotMissing', async () => {
    await promtool({
      alert: 'EtcdBackupFullSnapshotMissing',
      labels: { kind: 'Full' },
      change: (s, t) => set(s, 'etcdbr_snapshot_latest_timestamp', { kind: 'Full' }, t - 3 * 3600),
    });
  });

  it('writes waiting and no delta for hours: EtcdBackupDeltaSnapshotStale', async () => {
    await promtool({
      alert: 'EtcdBackupDeltaSnapshotStale',
      labels: { kind: 'Incr' },
      change: (s, t) => {
        set(s, 'etcdbr_snapshot_required', { kind: 'Incr' }, 1);
        set(s, 'etcdbr_snapshot_latest_timestamp', { kind: 'Incr' }, t - 7200 - EVAL_MINUTES * 60);
      },
    });
  });

  it('a verification whose newest restorable backup is old: EtcdBackupRecoveryPointTooOld', async () => {
    await promtool({
      alert: 'EtcdBackupRecoveryPointTooOld',
      change: (s) => set(s, 'etcdbr_backup_latest_restorable_timestamp_seconds', {}, 1),
    });
  });

  it('verification failures rising: EtcdBackupVerificationFailing', async () => {
    await promtool({
      alert: 'EtcdBackupVerificationFailing',
      change: (s) => {
        s.splice(
          s.findIndex((x) => x.name === 'etcdbr_backup_verify_failures_total'),
          1,
        );
      },
      extra: [{ series: 'etcdbr_backup_verify_failures_total', values: `0+1x${STEPS}` }],
    });
  });

  it('a hash drill that found the store different from etcd: EtcdBackupHashDrillMismatch', async () => {
    await promtool({
      alert: 'EtcdBackupHashDrillMismatch',
      labels: { result: 'mismatch' },
      change: (s) => {
        s.splice(
          s.findIndex((x) => x.name === 'etcdbr_backup_hash_drill_runs_total' && x.labels.result === 'mismatch'),
          1,
        );
      },
      extra: [{ series: 'etcdbr_backup_hash_drill_runs_total{result="mismatch"}', values: `0+1x${STEPS}` }],
    });
  });

  it('a failed defragmentation: EtcdDefragmentationFailing', async () => {
    await promtool({
      alert: 'EtcdDefragmentationFailing',
      labels: { succeeded: 'false', endpoint: 'http://etcd-0:2379' },
      extra: [
        {
          series: 'etcdbr_defragmentation_duration_seconds_count{succeeded="false",endpoint="http://etcd-0:2379"}',
          values: `0+1x${STEPS}`,
        },
      ],
    });
  });

  it('the snapshotter failing again and again: EtcdBackupSnapshotterFailing', async () => {
    await promtool({
      alert: 'EtcdBackupSnapshotterFailing',
      labels: { error: 'store' },
      extra: [{ series: 'etcdbr_snapshotter_failure{error="store"}', values: `0+1x${STEPS}` }],
    });
  });

  it('the sidecar cannot be scraped: EtcdBackupRestoreSidecarDown', async () => {
    await promtool({
      alert: 'EtcdBackupRestoreSidecarDown',
      labels: { job: 'etcd-backup-restore' },
      extra: [{ series: 'up{job="etcd-backup-restore"}', values: `0+0x${STEPS}` }],
    });
  });

  it('every metric the dashboard queries is one the sidecar exposes', () => {
    const exposed = new Set(scraped.map((s) => s.name));
    const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: Array<{ title: string; targets: Array<{ expr: string }> }> };
    expect(dashboard.panels.length).toBeGreaterThan(5);
    for (const p of dashboard.panels) {
      for (const t of p.targets) {
        for (const name of t.expr.match(/etcdbr_[a-z_]+/g) ?? [])
          expect({ panel: p.title, name, exposed: exposed.has(name) }).toEqual({ panel: p.title, name, exposed: true });
      }
    }
  });
});
