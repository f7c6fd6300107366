/**
 * The flag reference in docs/reference/flags.md, generated from the command specs (the single source of
 * the flags, their defaults and usages), so the manual cannot drift from the binary: a test compares the
 * committed file with this output (`npm run docs` rewrites it).
 */
import { flagBindings } from '../config/build.js';
import { COMMAND_NAMES, COMMAND_SPECS } from '../config/commands.js';
import { Metrics } from '../metrics.js';
import { FLAG_USE } from './flag-use.js';
import { formatDefault } from './flags.js';

const TYPE_NAMES: Readonly<Record<string, string>> = {
  string: 'string',
  bool: 'bool',
  uint: 'uint',
  uint32: 'uint32',
  int: 'int',
  int64: 'int64',
  duration: 'duration (Go syntax: 30s, 8m, 1h)',
  stringSlice: 'strings (comma-separated, repeatable)',
  stringArray: 'string array (repeatable)',
};

function cell(text: string): string {
  return text.replaceAll('|', '\\|').replaceAll('\n', ' ');
}

export function renderFlagReference(): string {
  const out: string[] = [
    '# etcdbrctl flag reference',
    '',
    '<!-- Generated from src/config (the command specs) by `npm run docs`; a test fails when this file is stale. -->',
    '',
    'Flags are parsed as pflag/cobra parse them: `--flag=value` or `--flag value`, booleans as `--flag` or',
    '`--flag=false`. Every subcommand also takes `-h, --help`. Defaults not shown are the zero value (empty,',
    '0, false).',
    '',
    'Each command accepts only the flags it uses. A flag the Go tool accepts for a command but this one does',
    'not use is accepted and ignored, with a log line naming it (a warning; on `server`, whose arguments',
    'etcd-druid generates, at info level); each command lists those after its tables.',
    '',
    '| command | what it does |',
    '|---|---|',
    ...COMMAND_NAMES.map((n) => `| [\`${n}\`](#${n}) | ${cell(COMMAND_SPECS[n].short)} |`),
    '',
  ];
  for (const name of COMMAND_NAMES) {
    const spec = COMMAND_SPECS[name];
    out.push(`## ${name}`, '', spec.long.replaceAll('\n', ' '), '');
    if (spec.configFile) out.push('With `--config-file`, the file is applied first and flags given on the command line override it.', '');
    const { ignored, refused } = FLAG_USE[name];
    const unlisted = new Set([...ignored, ...refused]);
    const bindings = [...flagBindings(spec)].filter(([flag]) => !unlisted.has(flag));
    const groups = new Map<string, typeof bindings>();
    for (const entry of bindings) {
      const title = entry[1].use.group.title;
      groups.set(title, [...(groups.get(title) ?? []), entry]);
    }
    for (const [title, entries] of groups) {
      out.push(`### ${name}: ${title}`, '', '| flag | type | default | meaning |', '|---|---|---|---|');
      for (const [flag, b] of entries.sort(([a], [c]) => (a < c ? -1 : 1))) {
        const short = b.field.shorthand === undefined ? '' : `-${b.field.shorthand}, `;
        const def = formatDefault({ type: b.field.type, defaultValue: b.defaultValue }) ?? '';
        out.push(
          `| \`${short}--${flag}\` | ${cell(TYPE_NAMES[b.field.type] ?? b.field.type)} | ${cell(def === '' ? '' : `\`${def}\``)} | ${cell(b.field.usage)} |`,
        );
      }
      out.push('');
    }
    if (ignored.length > 0) {
      const names = [...ignored].sort().map((f) => `\`--${f}\``);
      out.push(`Accepted for compatibility with etcd-backup-restore, ignored by ${name}: ${names.join(', ')}.`, '');
    }
  }
  return out.join('\n');
}

/** Ours, not upstream's: the metrics etcd-backup-restore does not have. */
const OUR_METRICS = new Set([
  'etcdbr_snapshot_size_bytes',
  'etcdbr_backup_last_verified_revision',
  'etcdbr_backup_verify_failures_total',
  'etcdbr_snapshot_chain_gaps_total',
  'etcdbr_backup_latest_restorable_timestamp_seconds',
  'etcdbr_backup_hash_drill_last_proven_revision',
  'etcdbr_backup_hash_drill_last_proven_timestamp_seconds',
  'etcdbr_backup_hash_drill_last_run_timestamp_seconds',
  'etcdbr_backup_hash_drill_runs_total',
]);

/** docs/reference/metrics.md: every `etcdbr_*` metric with its type, labels and meaning. */
export function renderMetricsReference(): string {
  const metrics = new Metrics({ defaultMetrics: false });
  const rows = metrics.registry
    .getMetricsAsArray()
    .map((m) => {
      const meta = m as unknown as { name: string; help: string; labelNames?: readonly string[]; constructor: { name: string } };
      return { name: meta.name, type: meta.constructor.name.toLowerCase(), labels: meta.labelNames ?? [], help: meta.help };
    })
    .sort((a, b) => (a.name < b.name ? -1 : 1));
  return [
    '# etcdbrctl metrics reference',
    '',
    '<!-- Generated from src/metrics.ts by `npm run docs`; a test fails when this file is stale. -->',
    '',
    'Served at `/metrics` in the Prometheus text format, with Node.js process metrics (`process_*`, `nodejs_*`)',
    "beside them. Names, types and labels are etcd-backup-restore's, except those marked *ours*. Histograms",
    'also expose `_bucket`, `_sum` and `_count`.',
    '',
    '| metric | type | labels | meaning |',
    '|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| \`${r.name}\`${OUR_METRICS.has(r.name) ? ' (ours)' : ''} | ${r.type} | ${r.labels.map((l) => `\`${l}\``).join(', ')} | ${cell(r.help)} |`,
    ),
    '',
  ].join('\n');
}
