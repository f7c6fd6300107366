/**
 * `npm run bench -- <filter>` picks the benches to run: a filter naming a bench exactly picks it alone (before,
 * `restore` also ran the long restore-upstream bench, `save` every bench with "save" in its name), any other
 * filter every bench whose name contains it. `--list` prints the pick and runs nothing.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const BENCH = fileURLToPath(new URL('../../scripts/bench.mjs', import.meta.url));

const pick = (...filters: string[]): string[] =>
  execFileSync(process.execPath, [BENCH, '--list', ...filters], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l !== '');

describe('bench selection', () => {
  it('a filter that names a bench picks that bench alone', () => {
    expect(pick('restore')).toEqual(['restore.bench.ts']);
    expect(pick('compact', 'save')).toEqual(['compact.bench.ts', 'save.bench.ts']);
  });

  it('any other filter picks every bench whose name contains it', () => {
    expect(pick('rest')).toEqual(['restore-upstream.bench.ts', 'restore.bench.ts']);
  });

  it('no filter picks every bench', () => {
    expect(pick().length).toBeGreaterThan(10);
    expect(pick()).toContain('footprint.bench.ts');
  });

  it('a filter that matches nothing fails, naming it', () => {
    expect(() => execFileSync(process.execPath, [BENCH, '--list', 'no-such-bench'], { stdio: 'pipe' })).toThrow(
      /no benchmark matches no-such-bench/,
    );
  });
});
