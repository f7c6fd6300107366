import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderFlagReference } from '../../src/cli/reference.js';
import { COMMAND_NAMES, COMMAND_SPECS } from '../../src/config/commands.js';
import { flagBindings } from '../../src/config/build.js';

const FILE = join(import.meta.dirname, '..', '..', 'docs', 'reference', 'flags.md');

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
