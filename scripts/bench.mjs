#!/usr/bin/env node
// `npm run bench [-- [--compiled] <name filter>... [-- <bench args>...]]`: runs every e2e/bench/*.bench.ts
// (those a filter names exactly, else those whose name contains a filter) one after the other, each in a fresh process so RSS figures are
// not polluted by the previous benchmark. Arguments after a second `--` go to every bench (e.g. --runs=1).
//
// By default a bench runs as `node --expose-gc --conditions=development --import tsx <file>`: one process
// whose node flags are its own. (Flags before tsx's CLI stay with the CLI, which runs the file in a child
// process without them, so --expose-gc never reached the bench; NODE_OPTIONS would also reach every
// process the bench spawns.) tsx's loader thread adds ~35 MiB of RSS that production (compiled JS) does
// not have; `--compiled` bundles the bench and our sources with esbuild (tsx's own copy; packages stay
// external) into node_modules/.cache and runs that with plain `node --expose-gc`, so RSS figures are
// the ones the sidecar would show.
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { constants } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** What bin/etcdbrctl sets for the real process; benches measure in-process, so they get it here
 * (BENCH_SEMI_SPACE_MB=16 measures with V8's default semi-space instead; NEW_SPACE_CAPACITY stays). */
const SEMI_SPACE = `--max-semi-space-size=${process.env.BENCH_SEMI_SPACE_MB ?? 2}`;
/** Also from bin/etcdbrctl: when V8 collects the young generation for the Buffers' sake (see there); as there,
 * only on Node 24 and later, whose V8 knows the flag (an older node refuses to start with it). */
const NEW_SPACE_CAPACITY = Number(process.versions.node.split('.')[0]) >= 24 ? ['--scavenger-max-new-space-capacity-mb=1'] : [];
/** Benches of what `server` does (a full snapshot, delta capture) also get what bin/etcdbrctl sets for the
 * long-lived commands only: `--optimize-for-size` and glibc's MALLOC_ARENA_MAX=2 (unless set). Without them the
 * full-snapshot bench's peak for an uncompressed 1 GiB snapshot to S3 was 158-163 MiB, with them 112-129, where
 * `server` itself peaks at 109-123 (2026-11-27). */
const LONG_LIVED = ['full-snapshot', 'delta-capture'];
const root = fileURLToPath(new URL('..', import.meta.url));
/** ETCDBR_BENCH_SOURCES: another folder of benches (the test of this runner's process handling). */
const dir = process.env.ETCDBR_BENCH_SOURCES ?? join(root, 'e2e', 'bench');
const compiled = process.argv.includes('--compiled');
/** `--list`: print the benches the filters pick, one a line, and run none (what a test checks). */
const listOnly = process.argv.includes('--list');
const argv = process.argv.slice(2).filter((a) => a !== '--compiled' && a !== '--list');
const sep = argv.indexOf('--');
const filters = sep === -1 ? argv : argv.slice(0, sep);
const benchArgs = sep === -1 ? [] : argv.slice(sep + 1);
const benches = readdirSync(dir).filter((f) => f.endsWith('.bench.ts'));
const isBenchName = (x) => benches.includes(`${x}.bench.ts`);
const files = benches
  // A filter that names a bench exactly picks that one alone (`restore` is not also `restore-upstream`);
  // any other filter picks every bench whose name contains it.
  .filter((f) => filters.length === 0 || filters.some((x) => (isBenchName(x) ? f === `${x}.bench.ts` : f.includes(x))))
  .sort();
if (files.length === 0) {
  console.error(`no benchmark matches ${filters.join(', ') || '(any)'} in ${dir}`);
  process.exit(1);
}
if (listOnly) {
  for (const f of files) console.log(f);
  process.exit(0);
}

/** Bundles one bench with our own sources; every package import stays external and loads from node_modules. */
async function bundle(file) {
  const esbuildPath = createRequire(join(root, 'node_modules', 'tsx', 'package.json')).resolve('esbuild');
  const esbuild = await import(pathToFileURL(esbuildPath).href);
  const outfile = join(root, 'node_modules', '.cache', 'etcdbrctl-bench', basename(file).replace(/\.ts$/, '.mjs'));
  await (esbuild.build ?? esbuild.default.build)({
    entryPoints: [file],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    conditions: ['development'],
    logLevel: 'warning',
    plugins: [
      {
        name: 'packages-external',
        setup(build) {
          build.onResolve({ filter: /^[^./]/ }, (a) => (a.path.startsWith('@etcdbrctl/') ? undefined : { path: a.path, external: true }));
        },
      },
    ],
  });
  return outfile;
}

/**
 * Runs one bench in a process group of its own and resolves with how it ended. A bench starts etcd, emulators
 * and sidecars and stops them in its own cleanup, which does not run when the bench is killed; nor does a
 * bench that crashed always get to it. So whatever is left in the group when the bench ends is killed, and a
 * signal that stops this runner (Ctrl-C, a `timeout`, a CI job cancelled) is passed to the bench's group
 * before this runner ends with it: before, the etcd, s3rver and sidecar of a footprint bench ran on.
 */
function runBench(args, env) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { cwd: root, stdio: 'inherit', env, detached: true });
    const killGroup = (signal) => {
      try {
        process.kill(-child.pid, signal);
      } catch {
        // ESRCH: the group is already empty
      }
    };
    let stoppedBy;
    const stop = (signal) => {
      stoppedBy ??= signal;
      killGroup(signal);
    };
    const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'];
    for (const s of signals) process.on(s, stop);
    child.on('exit', (code, signal) => {
      for (const s of signals) process.off(s, stop);
      killGroup('SIGKILL');
      resolve({ code, signal, stoppedBy });
    });
  });
}

let failed = 0;
for (const f of files) {
  console.log(`\n=== ${f}${compiled ? ' (compiled)' : ''} ===`);
  const longLived = LONG_LIVED.some((name) => f.startsWith(`${name}.`));
  const v8 = ['--expose-gc', SEMI_SPACE, ...NEW_SPACE_CAPACITY, ...(longLived ? ['--optimize-for-size'] : [])];
  const args = compiled ? [...v8, await bundle(join(dir, f))] : [...v8, '--conditions=development', '--import', 'tsx', join(dir, f)];
  // The bench finds its sources (support scripts it starts) through ETCDBR_BENCH_DIR when it runs bundled.
  const r = await runBench([...args, ...benchArgs], {
    ...process.env,
    ETCDBR_BENCH_DIR: dir,
    ...(longLived ? { MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX ?? '2' } : {}),
  });
  if (r.stoppedBy !== undefined) {
    console.log(`!!! stopped by ${r.stoppedBy} during ${f}`);
    process.exit(128 + constants.signals[r.stoppedBy]);
  }
  if (r.code !== 0) {
    failed++;
    console.log(`!!! ${f} failed (exit ${r.code ?? r.signal})`);
  }
}
process.exit(failed > 0 ? 1 : 0);
