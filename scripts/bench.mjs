#!/usr/bin/env node
// `npm run bench`: runs every e2e/bench/*.bench.ts (or those whose name contains an argument) one after
// the other, each in its own process so RSS figures are not polluted by the previous benchmark.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const dir = join(root, 'e2e', 'bench');
const filters = process.argv.slice(2);
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.bench.ts'))
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();
if (files.length === 0) {
  console.error(`no benchmark matches ${filters.join(', ') || '(any)'} in ${dir}`);
  process.exit(1);
}
const tsx = join(root, 'node_modules', 'tsx', 'dist', 'cli.mjs');
let failed = 0;
for (const f of files) {
  console.log(`\n=== ${f} ===`);
  const r = spawnSync(process.execPath, ['--expose-gc', tsx, join(dir, f)], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, NODE_OPTIONS: [process.env.NODE_OPTIONS, '--conditions=development'].filter(Boolean).join(' ') },
  });
  if (r.status !== 0) {
    failed++;
    console.log(`!!! ${f} failed (exit ${r.status ?? r.signal})`);
  }
}
process.exit(failed > 0 ? 1 : 0);
