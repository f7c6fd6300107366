/** A Node older than the project needs (where bin/etcdbrctl must switch to ours), for the tests of that switch. */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Where `node scripts/setup.mjs --tests` unpacks the npm registry's Node 20 when the machine has no older Node. */
const CACHED_OLD_NODE = join(fileURLToPath(new URL('../..', import.meta.url)), 'node_modules', '.cache', 'node-20.20.2', 'bin', 'node');

function isOld(node: string): boolean {
  const v = spawnSync(node, ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout.trim();
  const [major = 0, minor = 0] = v.split('.').map(Number);
  return v !== '' && (major < 22 || (major === 22 && minor < 12));
}

/** A Node older than 22.12 on PATH outside node_modules (the machine's own Node), or undefined. */
export function oldSystemNode(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '' || dir.includes('node_modules')) continue;
    const node = join(dir, 'node');
    if (existsSync(node) && isOld(node)) return node;
  }
  return undefined;
}

/**
 * A Node older than 22.12: the machine's own, else the one the setup unpacked. Throws, saying how to get one,
 * when there is neither: the tests of the switch run everywhere, never skipped quietly.
 */
export function oldNode(): string {
  const found = oldSystemNode() ?? (existsSync(CACHED_OLD_NODE) && isOld(CACHED_OLD_NODE) ? CACHED_OLD_NODE : undefined);
  if (found === undefined) {
    throw new Error(
      `no Node older than 22.12 on PATH and none at ${CACHED_OLD_NODE}: run "node scripts/setup.mjs --tests" (npm test runs it)`,
    );
  }
  return found;
}
