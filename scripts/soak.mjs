#!/usr/bin/env node
// `npm run soak -- --seed=<n> --minutes=<m> [--topology=single|three] [--store=local|s3]`: the seeded fault
// soak (e2e/soak/main.ts) against the compiled sidecar (bin/etcdbrctl, built first by `npm run build`).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const r = spawnSync(process.execPath, ['--conditions=development', '--import', 'tsx', 'e2e/soak/main.ts', ...process.argv.slice(2)], {
  cwd: root,
  stdio: 'inherit',
});
process.exit(r.status ?? 1);
