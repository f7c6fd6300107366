import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Builds dist/ once before any test, so tests that run bin/etcdbrctl as a process use the current
 * sources (two workers building at the same time would write the same files).
 */
export default function setup(): void {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  // TypeScript 7's native tsc; `typescript` is the TypeScript 6 API package (see package.json).
  const tsc = fileURLToPath(new URL('../../node_modules/@typescript/native/bin/tsc', import.meta.url));
  const build = spawnSync(process.execPath, [tsc, '-b', 'tsconfig.build.json'], { cwd: root, encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`the TypeScript build failed:\n${build.stdout}${build.stderr}`);
}
