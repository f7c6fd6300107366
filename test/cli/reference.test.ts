import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderFlagReference, renderMetricsReference } from '../../src/cli/reference.js';
import { COMMAND_NAMES, COMMAND_SPECS } from '../../src/config/commands.js';
import { flagBindings } from '../../src/config/build.js';

const FILE = join(import.meta.dirname, '..', '..', 'docs', 'reference', 'flags.md');
const METRICS_FILE = join(import.meta.dirname, '..', '..', 'docs', 'reference', 'metrics.md');

describe('docs/reference/flags.md', () => {
  it('is what the command specs generate (run `npm run docs` after changing a flag)', () => {
    expect(readFileSync(FILE, 'utf8')).toBe(renderFlagReference());
  });

  it('documents every flag of every command, with its default', () => {
    const doc = renderFlagReference();
    for (const name of COMMAND_NAMES) {
      expect(doc).toContain(`## ${name}\n`);
      for (const flag of flagBindings(COMMAND_SPECS[name]).keys()) expect(doc).toContain(`--${flag}\``);
    }
    expect(doc).toMatch(/\| `--delta-snapshot-memory-limit` \| uint \| `10485760` \|/);
    expect(doc).toMatch(/\| `--garbage-collection-period` \| duration[^|]*\| `1m0s` \|/);
  });
});

describe('docs/reference/metrics.md', () => {
  it('is what src/metrics.ts generates, with every metric, its type and labels', () => {
    const doc = renderMetricsReference();
    expect(readFileSync(METRICS_FILE, 'utf8')).toBe(doc);
    expect(doc).toContain('| `etcdbr_snapshot_latest_timestamp` | gauge | `kind` |');
    expect(doc).toContain('| `etcdbr_defragmentation_duration_seconds` | histogram | `succeeded`, `endpoint` |');
    expect(doc).toContain('| `etcdbr_backup_verify_failures_total` (ours) | counter |');
  });
});
