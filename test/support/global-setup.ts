import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Builds dist/ and the bundled CLI once before any test (scripts/build.mjs, as `npm run build`), so tests that
 * run bin/etcdbrctl as a process use the current sources (two workers building at the same time would write
 * the same files).
 */
export default function setup(): void {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const script = fileURLToPath(new URL('../../scripts/build.mjs', import.meta.url));
  const build = spawnSync(process.execPath, [script], { cwd: root, encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`the build failed:\n${build.stdout}${build.stderr}`);
}
