#!/usr/bin/env node
// Builds the Go etcd-backup-restore (the interop suite's peer, ETCDBRCTL_PEER) from one release tag, the way
// its Makefile's `build` target does (CGO off, vendored modules, version and Git SHA in -ldflags), but
// offline: every tag vendors its modules, so no module proxy is asked (GOPROXY=off) and no toolchain is
// fetched (GOTOOLCHAIN=local). The compiler is a Debian package, picked by the tag's go.mod:
//   go 1.19 (v0.23)                  /usr/lib/go-1.19 from bookworm's golang-go
//   go 1.25, 1.26 (v0.41, v0.43)    /usr/lib/go-1.26 from trixie-backports' golang-1.26-go
// Plain JavaScript like setup.mjs: it runs without the project's build. A few minutes per tag on two cores (4-8 measured).
//
//   node scripts/build-peer.mjs --git-dir=<clone of gardener/etcd-backup-restore> --tag=v0.43.0 --out=/work/peers
//
// writes <out>/etcdbrctl-<tag> (the source is unpacked into <out>/src/<tag>, kept for the next build's cache).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';

function fail(msg) {
  console.error(`[build-peer] ERROR: ${msg}`);
  process.exit(1);
}

const args = Object.fromEntries(
  process.argv.slice(2).map((a) => {
    const m = /^--([a-z-]+)=(.*)$/.exec(a);
    if (!m) fail(`unknown argument ${a}; usage: --git-dir=DIR --tag=vX.Y.Z --out=DIR`);
    return [m[1], m[2]];
  }),
);
for (const k of ['git-dir', 'tag', 'out']) if (!args[k]) fail(`--${k} is required (usage: --git-dir=DIR --tag=vX.Y.Z --out=DIR)`);
const tag = args.tag;
const out = resolve(args.out);
const src = join(out, 'src', tag);

if (!existsSync(join(src, 'go.mod'))) {
  mkdirSync(src, { recursive: true });
  const archive = spawnSync('git', [`--git-dir=${args['git-dir']}`, 'archive', tag], { maxBuffer: 1 << 30 });
  if (archive.status !== 0) fail(`git archive ${tag} failed: ${archive.stderr.toString()}`);
  execFileSync('tar', ['-x', '-C', src], { input: archive.stdout });
}
if (!existsSync(join(src, 'vendor', 'modules.txt'))) fail(`${tag} has no vendor/ folder: this script builds offline only`);

// The oldest Debian Go that the tag's go.mod accepts (its `go` line is the minimum): the closest to the
// compiler upstream released the tag with (a much newer Go may refuse what an old tag's vendored modules do).
const wanted = /^go (\d+)\.(\d+)/m.exec(readFileSync(join(src, 'go.mod'), 'utf8'));
if (!wanted) fail(`no go directive in ${tag}'s go.mod`);
const [wantMajor, wantMinor] = [Number(wanted[1]), Number(wanted[2])];
const installed = readdirSync('/usr/lib')
  .map((d) => /^go-(\d+)\.(\d+)$/.exec(d))
  .filter((m) => m !== null && (Number(m[1]) > wantMajor || (Number(m[1]) === wantMajor && Number(m[2]) >= wantMinor)))
  .sort((a, b) => Number(a[1]) - Number(b[1]) || Number(a[2]) - Number(b[2]));
if (installed.length === 0) {
  fail(
    `${tag} needs Go >= ${wantMajor}.${wantMinor} and no /usr/lib/go-X.Y has it. Debian packages it: ` +
      (wantMinor <= 19
        ? 'apt-get install golang-go (bookworm)'
        : 'add "trixie trixie-backports" to the apt sources with a pin of priority 100 (docs/testing.md "Interop with the Go tool"), ' +
          'then apt-get update && apt-get install -t trixie-backports golang-1.26-go'),
  );
}
const go = join('/usr/lib', installed[0][0], 'bin', 'go');

const sha = execFileSync('git', [`--git-dir=${args['git-dir']}`, 'rev-parse', '--short', `${tag}^{commit}`], { encoding: 'utf8' }).trim();
const pkg = 'github.com/gardener/etcd-backup-restore/pkg/version';
const binary = join(out, `etcdbrctl-${tag}`);
console.error(`[build-peer] ${tag} (${sha}) with ${go} -> ${binary}`);
const build = spawnSync(
  'nice',
  ['-n', '10', go, 'build', '-ldflags', `-w -X ${pkg}.Version=${tag} -X ${pkg}.GitSHA=${sha}`, '-o', binary, '.'],
  {
    cwd: src,
    stdio: 'inherit',
    env: { ...process.env, GOTOOLCHAIN: 'local', CGO_ENABLED: '0', GOFLAGS: '-mod=vendor', GOPROXY: 'off' },
  },
);
if (build.status !== 0) fail(`go build of ${tag} failed (exit ${String(build.status)})`);
const version = spawnSync(binary, ['--version'], { encoding: 'utf8' });
console.error(`[build-peer] built: ${`${version.stdout}${version.stderr}`.trim().split('\n').join('; ')}`);
