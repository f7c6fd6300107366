/**
 * Code and docs cite what a reader of the repository can open: upstream Go files and functions, our docs/
 * and README sections. Planning documents kept outside the repository (an "upstream reference", the
 * "seeds" requirement notes, anything under ../shared) mean nothing to a newcomer, so no file may cite them.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SCANNED = ['src', 'snapstore/src', 'test', 'e2e', 'docs'];
const TEXT = /\.(?:[cm]?[jt]s|md|json|ya?ml|sh)$/;
/** Skipped: vendored stores written by the Go tool, and this test, which has to spell the patterns out. */
const SKIPPED = [join('test', 'fixtures'), join('test', 'architecture', 'references.test.ts')];

/** Citations of documents outside the repository. */
const FOREIGN: Array<[RegExp, string]> = [
  [/upstream-reference/i, 'upstream-reference'],
  [/\.\.\/shared/, '../shared'],
  [/seeds(?:-requirements)? §/i, 'seeds §'],
  [/seeds? [A-Z]{2,}-\d/, 'seeds requirement id'],
  [/upstream(?: quirk)? §\d/i, 'upstream §'],
  [/\(§\d/, '(§…)'],
];

export function foreignCitations(text: string): string[] {
  const found: string[] = [];
  text.split('\n').forEach((line, index) => {
    for (const [pattern, name] of FOREIGN) if (pattern.test(line)) found.push(`${index + 1}: ${name}: ${line.trim()}`);
  });
  return found;
}

async function textFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    const rel = relative(ROOT, path);
    if (SKIPPED.some((s) => rel === s || rel.startsWith(s + '/')) || entry.name === 'node_modules') continue;
    if (entry.isDirectory()) out.push(...(await textFiles(path)));
    else if (TEXT.test(entry.name)) out.push(path);
  }
  return out;
}

describe('references a newcomer can follow', () => {
  it('no file under src/, snapstore/src, test/, e2e/ or docs/ cites a document outside the repository', async () => {
    const offenders: string[] = [];
    for (const dir of SCANNED) {
      for (const file of await textFiles(join(ROOT, dir))) {
        for (const hit of foreignCitations(await readFile(file, 'utf8'))) offenders.push(`${relative(ROOT, file)}:${hit}`);
      }
    }
    expect(offenders, 'cite the upstream Go file and function, docs/ or a README section instead').toEqual([]);
  });

  it('recognises each form of a foreign citation, and not RFC sections or ordinary words', () => {
    for (const line of [
      ' * Data-directory validation (upstream-reference.md §8.2).',
      ' * see ../shared/spec/architecture.md',
      ' * The bootstrap decision (seeds §5.3 and §11.2)',
      ' * (seeds-requirements §5.3)',
      ' * removal of superfluous members (seeds CLEAN-01)',
      ' * The config served on `/config` (upstream §12)',
      '    // Upstream quirk §15.1: the default',
      ' * Upstream `UpdateMemberPeerURL` (§9.3)',
    ]) {
      expect(foreignCitations(line), line).toHaveLength(1);
    }
    for (const line of [
      '/** Appends an HPACK integer (RFC 7541 §5.1). */',
      '// its crc record only seeds the running value.',
      ' * (upstream `pkg/initializer/initializer.go` `Initialize`)',
    ]) {
      expect(foreignCitations(line), line).toEqual([]);
    }
  });
});
