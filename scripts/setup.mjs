#!/usr/bin/env node
// Makes a fresh checkout runnable: npm dependencies, an etcd binary, the TypeScript build.
// Runs before `npm start`, `npm test` and `npm run bench`. Plain JavaScript on purpose: it must run
// before anything is installed or compiled.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const quiet = process.argv.includes('--quiet');
const say = (msg) => { if (!quiet) console.error(`[setup] ${msg}`); };

function fail(msg) {
  console.error(`[setup] ERROR: ${msg}`);
  process.exit(1);
}

function checkNode() {
  const [major, minor] = process.versions.node.split('.').map(Number);
  if (major < 20 || (major === 20 && minor < 11)) {
    fail(`Node.js >= 20.11 is required, this is ${process.version}. Install a newer Node.js (e.g. from https://nodejs.org or your distribution).`);
  }
}

function mtime(p) {
  try { return statSync(p).mtimeMs; } catch { return 0; }
}

function ensureNpmDependencies() {
  const marker = join(root, 'node_modules', '.package-lock.json');
  const lock = join(root, 'package-lock.json');
  if (existsSync(marker) && mtime(marker) >= mtime(lock) && existsSync(join(root, 'node_modules', 'vitest'))) return;
  say('installing npm dependencies (npm ci) ...');
  const r = spawnSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) fail('npm ci failed (see above).');
}

function which(name) {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const p = join(dir, name);
    try { if (statSync(p).isFile()) return p; } catch { /* not here */ }
  }
  return undefined;
}

let aptUpdated = false;

/** Installs Debian packages when running as root; otherwise says exactly what to install. */
function ensureFromDebian(what, binaries, packages, otherwise) {
  if (binaries.every((b) => which(b))) return;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (isRoot && which('apt-get')) {
    say(`${what} not found; installing Debian's ${packages.join(' ')} ...`);
    try {
      const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
      if (!aptUpdated) execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
      aptUpdated = true;
      execFileSync('apt-get', ['install', '-y', '-qq', ...packages], { stdio: 'inherit', env });
    } catch {
      fail(`installing ${packages.join(' ')} with apt-get failed (see above).`);
    }
    const missing = binaries.filter((b) => !which(b));
    if (missing.length > 0) fail(`apt-get finished but ${missing.join(', ')} is not on PATH.`);
    return;
  }
  fail(
    `${what} is needed but was not found on PATH.\n` +
      `  On Debian/Ubuntu:  sudo apt-get install ${packages.join(' ')}\n` +
      (otherwise ? `  Elsewhere:         ${otherwise}` : ''),
  );
}

function ensureEtcd() {
  const fromEnv = process.env.ETCD_BIN;
  if (fromEnv) {
    if (!existsSync(fromEnv)) fail(`ETCD_BIN=${fromEnv} does not exist.`);
    return;
  }
  ensureFromDebian('etcd', ['etcd', 'etcdctl'], ['etcd-server', 'etcd-client'],
    'put etcd and etcdctl (3.4+; etcdutl too for 3.5+) on PATH, or set ETCD_BIN=/path/to/etcd');
}

// The compatibility tests check our byte formats against Go's own compress/* and encoding/json,
// the libraries etcd-backup-restore is built with.
function ensureGo() {
  ensureFromDebian('The Go toolchain (for the compatibility tests)', ['go'], ['golang-go'],
    'install Go 1.19+ from https://go.dev/dl and put `go` on PATH');
}

function build() {
  say('building TypeScript (tsc -b) ...');
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-b', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) fail('the TypeScript build failed (see above).');
}

const forTests = process.argv.includes('--tests');
checkNode();
ensureNpmDependencies();
ensureEtcd();
if (forTests) ensureGo();
build();
