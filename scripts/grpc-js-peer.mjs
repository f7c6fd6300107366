#!/usr/bin/env node
/**
 * Builds our compiled sidecar with its etcd transport swapped for @grpc/grpc-js (e2e/bench/support/
 * grpc-js-transport.ts, carrying the same generated messages) and prints the path of an executable that runs
 * it, for the footprint bench's peer column:
 *
 *   ETCDBRCTL_PEER=$(node scripts/grpc-js-peer.mjs) npm run bench -- --compiled footprint -- --only=idle,delta
 *
 * It copies dist/ (run `npm run build` first) and bin/ into node_modules/.cache/etcdbrctl-grpc-js, compiles the
 * adapter beside dist/etcd/grpc.js and points dist/etcd/calls.js at it; nothing else changes, so the two columns
 * differ by the transport alone (docs/design-decisions.md, "One etcd transport, and the replay's lean client").
 */
import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUT = join(ROOT, 'node_modules', '.cache', 'etcdbrctl-grpc-js');

if (!existsSync(join(ROOT, 'dist', 'etcd', 'calls.js'))) {
  console.error('dist/etcd/calls.js is missing: run `npm run build` first');
  process.exit(1);
}
rmSync(OUT, { recursive: true, force: true });
mkdirSync(OUT, { recursive: true });
for (const dir of ['dist', 'bin']) cpSync(join(ROOT, dir), join(OUT, dir), { recursive: true });
cpSync(join(ROOT, 'package.json'), join(OUT, 'package.json'));
// Packages (and the malloc-trim addon bin/etcdbrctl loads) resolve from the project's own node_modules.
symlinkSync(join(ROOT, 'node_modules'), join(OUT, 'node_modules'));

const esbuildPath = createRequire(join(ROOT, 'node_modules', 'tsx', 'package.json')).resolve('esbuild');
const esbuild = await import(pathToFileURL(esbuildPath).href);
const adapter = join(OUT, 'dist', 'etcd', 'grpc-js-transport.js');
await (esbuild.build ?? esbuild.default.build)({
  entryPoints: [join(ROOT, 'e2e', 'bench', 'support', 'grpc-js-transport.ts')],
  outfile: adapter,
  platform: 'node',
  format: 'esm',
  logLevel: 'warning',
});
// Not bundled: the adapter must share the sidecar's errors module (its EtcdError is what callers test for).
writeFileSync(adapter, readFileSync(adapter, 'utf8').replace('"../../../src/etcd/errors.js"', '"./errors.js"'));
const calls = join(OUT, 'dist', 'etcd', 'calls.js');
const source = readFileSync(calls, 'utf8');
const swapped = source.replace(
  "import { GrpcTransport } from './grpc.js';",
  "import { GrpcJsTransport as GrpcTransport } from './grpc-js-transport.js';",
);
if (swapped === source) throw new Error(`${calls}: the transport's import was not found (did calls.ts change?)`);
writeFileSync(calls, swapped);

const wrapper = join(OUT, 'etcdbrctl-grpc-js');
writeFileSync(wrapper, `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(join(OUT, 'bin', 'etcdbrctl'))} "$@"\n`);
chmodSync(wrapper, 0o755);
console.log(wrapper);
