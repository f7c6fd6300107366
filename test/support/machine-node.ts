/** The machine's own Node, when it is older than the project needs (where bin/etcdbrctl must switch to ours). */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/** A Node older than 22.12 on PATH outside node_modules (the machine's own Node), or undefined. */
export function oldSystemNode(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '' || dir.includes('node_modules')) continue;
    const node = join(dir, 'node');
    if (!existsSync(node)) continue;
    const v = spawnSync(node, ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout.trim();
    const [major = 0, minor = 0] = v.split('.').map(Number);
    if (major < 22 || (major === 22 && minor < 12)) return node;
  }
  return undefined;
}
