// Restores one chain several times in one Node process through the CLI's own `main` (dist/cli/main.js), for
// restore-upstream.bench.ts --warm: the first restore pays for loading the restore's modules and for V8
// compiling its code, the later ones run the same restore on code that is compiled and optimized already.
// Their difference is what a fresh `etcdbrctl restore` process spends on start-up beyond Node's own start.
//
//   node restore-in-process.mjs ROOT RUNS TMP ARG...   (ARG: the restore's flags; "{dir}" becomes a new dir)
//
// One JSON line per restore on stdout: {"ms": wall, "cpuMs": user + system of this process, "code": exit code}.
import { mkdtemp, rm } from 'node:fs/promises';
import { enableCompileCache } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';

const [root, runsText, tmp, ...args] = process.argv.slice(2);
const runs = Number(runsText);
if (!root || !tmp || !Number.isInteger(runs) || runs < 1) {
  process.stderr.write('usage: restore-in-process.mjs ROOT RUNS TMP ARG...\n');
  process.exit(2);
}
// As bin/etcdbrctl does for short commands (its V8 flags come from the bench's command line).
enableCompileCache();
const { main } = await import(pathToFileURL(join(root, 'dist', 'cli', 'main.js')).href);
let log = '';
const io = { stdout: { write: (s) => ((log += s), true) }, stderr: { write: (s) => ((log += s), true) } };
for (let i = 0; i < runs; i++) {
  const dir = await mkdtemp(join(tmp, 'in-process-'));
  log = '';
  const started = performance.now();
  const cpu = process.cpuUsage();
  const code = await main(['restore', ...args.map((a) => a.replaceAll('{dir}', dir))], process.env, io);
  const used = process.cpuUsage(cpu);
  await rm(dir, { recursive: true, force: true });
  if (code !== 0) {
    process.stderr.write(log.slice(-3000));
    process.exit(1);
  }
  process.stdout.write(`${JSON.stringify({ ms: performance.now() - started, cpuMs: (used.user + used.system) / 1000, code })}\n`);
}
