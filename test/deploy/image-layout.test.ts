/**
 * The container image without a container engine (`npm run image-test`, e2e/image, builds and runs the real
 * one with podman; it is slow and not part of `npm test`). Two parts:
 *
 * 1. Invariants read from the Dockerfile: pinned base images, one Node release for build and runtime,
 *    etcd binaries from the official image where ETCD_BIN points, a non-root user with a passwd entry and no
 *    HOME of the image's own, an ENTRYPOINT that runs etcdbrctl, nothing installed or compiled for the final
 *    stage, no npm or Node headers in it, a build context limited by .dockerignore.
 * 2. A replay of the Dockerfile into temp directories that stand for the build stage's and the final stage's
 *    file systems. COPY lines are followed as written; of the RUN steps, `npm ci` is stood in for by a copy
 *    of this checkout's node_modules (an npm ci of the same lock file), `npm run build` runs for real (tsc on
 *    what the COPY lines brought: a file the build needs and the build context lacks fails it), and
 *    `npm prune` runs for real (offline). The runtime base's RUN commands are interpreted (rm, groupadd,
 *    useradd, mkdir, chown, chmod, ln -s) and anything else fails the test. Then the CLI runs from the final
 *    tree with the image's environment: no dev dependencies, no sources, no scripts/setup.mjs.
 */
import { execFile, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, readlinkSync, realpathSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findEtcdBinaries } from '../../src/etcd/binaries.js';
import { moduleImports } from '../support/module-imports.js';
import { copyPaths, envPairs, execForm, inBuildContext, parseDockerfile, resolveInStage } from './dockerfile.js';
import type { Instruction, Stage } from './dockerfile.js';

const execFileAsync = promisify(execFile);

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const dockerfile = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
const dockerignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8');
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  engines: { node: string };
  scripts: Record<string, string>;
  devDependencies: Record<string, string>;
  optionalDependencies?: Record<string, string>;
};
const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, { dev?: boolean; optional?: boolean; devOptional?: boolean; link?: boolean }>;
};

const finalStage = dockerfile.stages.at(-1)!;
/** The stage whose whole file tree (`COPY --from=<it> / /`) the final stage starts from. */
const runtimeBase = dockerfile.stages.find((st) =>
  finalStage.instructions.some((c) => c.keyword === 'COPY' && c.flags.from === st.name && copyPaths(c).sources.join() === '/'),
);
/** A value for `--build-arg GIT_SHA=...`, to see it arrive in `--version`. */
const GIT_SHA = '0123456789abcdef0123456789abcdef01234567';

/** The stage a `COPY --from=<name|index>` refers to. */
function stageOf(ref: string | undefined): Stage {
  const s = ref === undefined || ref === '' ? undefined : (dockerfile.stages.find((st) => st.name === ref) ?? (/^\d+$/.test(ref) ? dockerfile.stages[Number(ref)] : undefined));
  if (s === undefined) throw new Error(`COPY --from=${ref ?? ''} names no stage of the Dockerfile`);
  return s;
}

function instructions(stage: Stage, keyword: string): Instruction[] {
  return stage.instructions.filter((i) => i.keyword === keyword);
}

/** `&&`-separated commands of the stage's RUN lines, in order. */
function runCommands(stage: Stage): string[] {
  return instructions(stage, 'RUN').flatMap((i) => i.args.split('&&').map((c) => c.trim()));
}

/** The final stage's ENV with `${ARG}` references replaced by build args (defaults from ARG lines). */
function finalEnv(buildArgs: Record<string, string>): Map<string, string> {
  const args = new Map<string, string>();
  const env = new Map<string, string>();
  for (const i of finalStage.instructions) {
    if (i.keyword === 'ARG') {
      const [name, def = ''] = i.args.split('=');
      args.set(name!, buildArgs[name!] ?? def.replace(/^"(.*)"$/, '$1'));
    } else if (i.keyword === 'ENV') {
      for (const [k, v] of envPairs(i)) {
        env.set(k, v.replace(/\$\{?(\w+)\}?/g, (_, name: string) => args.get(name) ?? env.get(name) ?? ''));
      }
    }
  }
  return env;
}

function lastUser(stage: Stage): string | undefined {
  return instructions(stage, 'USER').at(-1)?.args;
}

describe('Dockerfile invariants', () => {
  it('pins every base image to an exact version (tag x.y.z or a digest)', () => {
    expect(dockerfile.stages.length).toBeGreaterThanOrEqual(3);
    for (const stage of dockerfile.stages) {
      const ref = stage.image;
      if (dockerfile.stages.some((s) => s.name === ref) || ref === 'scratch') continue; // FROM <earlier stage>, or nothing
      const pinned = /@sha256:[0-9a-f]{64}$/.test(ref) || /:v?\d+\.\d+\.\d+(?:[-.][\w.-]+)?$/.test(ref);
      expect(pinned, `line ${stage.line}: FROM ${ref} is not pinned to an exact version`).toBe(true);
      expect(ref, `line ${stage.line}: FROM must not depend on build args`).not.toContain('$');
    }
  });

  it('builds and runs on one Node release, which package.json engines accepts', () => {
    const nodeImages = dockerfile.stages.map((s) => /^node:(\d+)\.(\d+)\.(\d+)-(\w+)/.exec(s.image)).filter((m) => m !== null);
    expect(nodeImages.length).toBe(2);
    const [build, runtime] = nodeImages as RegExpExecArray[];
    expect(build!.slice(1, 5), 'build and runtime stages must use the same Node version and Debian release').toEqual(runtime!.slice(1, 5));
    // The final stage is the runtime base's file tree (one layer, without what that stage removed).
    expect(runtimeBase, 'a COPY --from=<runtime base> / / in the final stage').toBeDefined();
    expect(runtimeBase!.image).toBe(runtime!.input);
    expect(runtimeBase!.image).toMatch(/^node:[\d.]+-bookworm-slim$/);
    expect(finalStage.image).toBe('scratch');
    const firstCopy = instructions(finalStage, 'COPY')[0]!;
    expect(firstCopy.flags.from, 'the runtime base comes first; everything else is laid on top').toBe(runtimeBase!.name);
    const engines = /^>=(\d+)\.(\d+)$/.exec(pkg.engines.node);
    expect(engines, `engines.node ${pkg.engines.node}`).not.toBeNull();
    const [major, minor] = [Number(build![1]), Number(build![2])];
    expect(major > Number(engines![1]) || (major === Number(engines![1]) && minor >= Number(engines![2]))).toBe(true);
    // @types/node is pinned to the Node major the code is written for.
    expect(pkg.devDependencies['@types/node']?.split('.')[0]).toBe(String(major));
  });

  it('copies etcd, etcdutl and etcdctl from the official etcd 3.5 image into the directory ETCD_BIN names', () => {
    const fromEtcd = instructions(finalStage, 'COPY').filter((c) => /etcd-development\/etcd:v3\.5\.\d+$/.test(stageOf(c.flags.from).image));
    expect(fromEtcd.length, 'a COPY --from=<official etcd image stage>').toBe(1);
    const { sources, dest } = copyPaths(fromEtcd[0]!);
    expect(sources).toEqual(expect.arrayContaining(['/usr/local/bin/etcd', '/usr/local/bin/etcdutl']));
    const etcdBin = finalEnv({}).get('ETCD_BIN');
    expect(etcdBin, 'ENV ETCD_BIN').toBeDefined();
    expect(dirname(etcdBin!)).toBe(dest.replace(/\/$/, ''));
    // The etcd version matches the one upstream etcd-backup-restore v0.42+ and etcd-wrapper build on.
    expect(stageOf(fromEtcd[0]!.flags.from!).image).toBe('gcr.io/etcd-development/etcd:v3.5.27');
  });

  it('runs as the non-root user 65532, as upstream distroless images and etcd-druid pods do', () => {
    const user = lastUser(finalStage);
    expect(user).toBe('65532:65532');
    const userLine = instructions(finalStage, 'USER').at(-1)!.line;
    const entrypoint = instructions(finalStage, 'ENTRYPOINT').at(-1)!;
    expect(userLine).toBeLessThan(entrypoint.line);
    // Nothing after USER runs as root again.
    expect(finalStage.instructions.filter((i) => i.line > userLine && (i.keyword === 'RUN' || i.keyword === 'USER'))).toEqual([]);
  });

  it('starts node on /app/bin/etcdbrctl, without development export conditions or setup scripts', () => {
    const entrypoints = instructions(finalStage, 'ENTRYPOINT');
    expect(entrypoints.length).toBe(1);
    expect(execForm(entrypoints[0]!.args)).toEqual(['node', '/app/bin/etcdbrctl']);
    expect(instructions(finalStage, 'CMD')).toEqual([]);
    const env = finalEnv({});
    expect(env.get('NODE_ENV')).toBe('production');
    expect(env.get('NODE_OPTIONS') ?? '').not.toMatch(/conditions|development/);
    const text = finalStage.instructions.map((i) => i.args).join('\n');
    expect(text).not.toMatch(/setup\.mjs|scripts\//);
  });

  it('installs and compiles nothing for the final stage, and leaves out npm, npx, corepack, yarn and the Node headers', () => {
    expect(instructions(finalStage, 'RUN'), 'the final stage runs nothing').toEqual([]);
    const commands = runCommands(runtimeBase!);
    // Only file housekeeping and the user's entry: no package manager, compiler or download can hide in a chain.
    for (const c of commands) {
      expect(c, 'runtime base RUN').toMatch(/^(rm|mkdir|chown|chmod|ln|groupadd|useradd) /);
      expect(c, 'runtime base RUN').not.toMatch(/[;|`]|\$\(/);
    }
    const removed = commands.filter((c) => c.startsWith('rm ')).join(' ');
    for (const p of ['/usr/local/lib/node_modules', '/usr/local/bin/npm', '/usr/local/bin/npx', '/usr/local/bin/corepack', '/usr/local/bin/yarn', '/usr/local/include/node']) {
      expect(removed, `the runtime base removes ${p}`).toContain(p);
    }
  });

  it('gives 65532 a passwd entry with home /home/nonroot and sets no HOME, so the runtime sets HOME per user as for the Go image', () => {
    const commands = runCommands(runtimeBase!);
    expect(commands).toContain('groupadd --gid 65532 nonroot');
    const useradd = commands.find((c) => c.startsWith('useradd '));
    expect(useradd).toBeDefined();
    expect(useradd).toMatch(/--uid 65532 /);
    expect(useradd).toMatch(/--gid 65532 /);
    expect(useradd).toMatch(/--home-dir \/home\/nonroot /);
    // A big uid and useradd's login records: a sparse /var/log/lastlog of gigabytes in some tar formats.
    expect(useradd).toMatch(/--no-log-init/);
    expect(useradd).toMatch(/ nonroot$/);
    // A HOME of the image's own would hold for every user: root (etcd-druid's runAsRoot, gardenadm) would look for
    // its Local store under /home/nonroot instead of /root.
    for (const stage of [runtimeBase!, finalStage]) {
      for (const env of instructions(stage, 'ENV')) expect(envPairs(env).map(([k]) => k)).not.toContain('HOME');
    }
  });

  it('fills /app only from the build stage: compiled code, manifests and production node_modules', () => {
    const buildStage = dockerfile.stages[0]!;
    const copies = instructions(finalStage, 'COPY');
    expect(copies.every((c) => c.flags.from !== undefined), 'no COPY from the build context into the final stage').toBe(true);
    const toApp = copies.filter((c) => stageOf(c.flags.from) === buildStage);
    const sources = toApp.flatMap((c) => copyPaths(c).sources).sort();
    expect(sources).toEqual(
      [
        '/app/bin',
        '/app/dist',
        '/app/node_modules',
        '/app/package.json',
        '/app/snapstore/dist',
        '/app/snapstore/package.json',
        '/app/malloc-trim/package.json',
        '/app/malloc-trim/index.cjs',
        '/app/malloc-trim/build/Release/malloc_trim.node',
      ].sort(),
    );
  });

  it('installs from the lock file, builds, then prunes dev dependencies in the build stage', () => {
    const build = dockerfile.stages[0]!;
    const commands = runCommands(build);
    const at = (re: RegExp) => commands.findIndex((c) => re.test(c));
    const ci = at(/^npm ci\b/);
    const compile = at(/^npm run build$/);
    const prune = at(/^npm prune\b.*--omit=dev/);
    expect([ci, compile, prune].every((i) => i >= 0), commands.join(' | ')).toBe(true);
    expect(ci < compile && compile < prune).toBe(true);
    // tsc -b tsconfig.build.json, then the bundled CLI bin/etcdbrctl loads (scripts/build.mjs).
    expect(pkg.scripts.build).toBe('node scripts/build.mjs');
    // The lock file and every workspace manifest are in place before npm ci.
    const ciLine = instructions(build, 'RUN').find((r) => /npm ci\b/.test(r.args))!.line;
    const copiedBefore = instructions(build, 'COPY')
      .filter((c) => c.line < ciLine)
      .flatMap((c) => copyPaths(c).sources);
    expect(copiedBefore).toEqual(
      expect.arrayContaining(['package.json', 'package-lock.json', 'snapstore/package.json', 'malloc-trim/package.json', 'malloc-trim/binding.gyp', 'malloc-trim/src']),
    );
  });

  it('keeps the build context to what the build stage copies', () => {
    const sources = dockerfile.stages
      .flatMap((s) => instructions(s, 'COPY'))
      .filter((c) => c.flags.from === undefined)
      .flatMap((c) => copyPaths(c).sources);
    for (const s of sources) {
      expect(existsSync(join(ROOT, s)), `COPY source ${s} exists`).toBe(true);
      expect(inBuildContext(dockerignore, s), `${s} is in the build context`).toBe(true);
      if (statSync(join(ROOT, s)).isDirectory()) {
        for (const f of readdirSync(join(ROOT, s), { recursive: true }) as string[]) {
          if (!f.endsWith('.tsbuildinfo')) expect(inBuildContext(dockerignore, `${s}/${f}`), `${s}/${f}`).toBe(true);
        }
      }
    }
    for (const out of ['node_modules', 'node_modules/vitest/package.json', 'dist/cli/main.js', 'snapstore/dist/index.js', '.git/HEAD', 'test/deploy/image-layout.test.ts', 'e2e', 'scripts/setup.mjs', '.local', 'tsconfig.build.tsbuildinfo', 'malloc-trim/build/Release/malloc_trim.node']) {
      expect(inBuildContext(dockerignore, out), `${out} stays out of the build context`).toBe(false);
    }
  });
});

// ------------------------------------------------------------------------------------------------
// Replay

let tmp: string;
/** The build stage's file system. */
let buildRoot: string;
/** The final stage's file system. */
let finalRoot: string;

function inRoot(root: string, p: string): string {
  return join(root, p);
}

async function copyTree(from: string, to: string): Promise<void> {
  mkdirSync(dirname(to), { recursive: true });
  // cp -a: symlinks stay symlinks (the workspace link in node_modules is relative) and modes are kept.
  await execFileAsync('cp', ['-a', from, to]);
}

/** Docker COPY: a directory's contents go into dest; a file goes to dest, or into it when dest ends in '/'. */
async function dockerCopy(from: string, destInRoot: string, destIsDir: boolean): Promise<void> {
  if (lstatSync(from).isDirectory()) {
    mkdirSync(destInRoot, { recursive: true });
    await execFileAsync('cp', ['-a', `${from}/.`, `${destInRoot}/`]);
    return;
  }
  const target = destIsDir ? join(destInRoot, from.split('/').at(-1)!) : destInRoot;
  mkdirSync(dirname(target), { recursive: true });
  await execFileAsync('cp', ['-a', from, target]);
}

async function replayBuildStage(stage: Stage): Promise<void> {
  let cwd = '/';
  for (const i of stage.instructions) {
    switch (i.keyword) {
      case 'WORKDIR':
        cwd = resolveInStage(cwd, i.args);
        mkdirSync(inRoot(buildRoot, cwd), { recursive: true });
        break;
      case 'COPY': {
        expect(i.flags.from, `line ${i.line}: the build stage copies from the context only`).toBeUndefined();
        const { sources, dest } = copyPaths(i);
        const destPath = resolveInStage(cwd, dest);
        for (const s of sources) await dockerCopy(join(ROOT, s), inRoot(buildRoot, destPath), dest.endsWith('/') || sources.length > 1);
        break;
      }
      case 'RUN':
        for (const command of i.args.split('&&').map((c) => c.trim())) await replayBuildCommand(command, inRoot(buildRoot, cwd));
        break;
      case 'ARG':
      case 'ENV':
        break;
      default:
        throw new Error(`line ${i.line}: the replay does not know ${i.keyword} in the build stage`);
    }
  }
}

async function replayBuildCommand(command: string, cwd: string): Promise<void> {
  if (/^npm ci\b/.test(command)) {
    // npm ci of the same package-lock.json: this checkout's node_modules (copied, never linked: npm rewrites
    // files such as node_modules/.package-lock.json in place).
    // Not node_modules/.cache: the test setup's etcd downloads and other tools' caches, no part of npm ci.
    for (const entry of readdirSync(join(ROOT, 'node_modules')).filter((e) => e !== '.cache')) {
      await copyTree(join(ROOT, 'node_modules', entry), join(cwd, 'node_modules', entry));
    }
    // npm ci compiles the malloc-trim addon in its workspace (its install script): the one npm ci built here.
    await copyTree(join(ROOT, 'malloc-trim', 'build'), join(cwd, 'malloc-trim', 'build'));
    return;
  }
  if (command === 'npm run build') {
    // For real, on what the COPY lines brought: the checkout's own dist/ would hide a file the build needs
    // that the build context leaves out (malloc-trim's type declarations once did).
    const built = await execFileAsync('npm', ['run', 'build'], { cwd, env: { ...process.env, npm_config_update_notifier: 'false' }, maxBuffer: 16 * 1024 * 1024 }).catch(
      (err: { stdout?: string; stderr?: string; message: string }) => ({ failed: `${err.message}\n${err.stdout ?? ''}${err.stderr ?? ''}` }),
    );
    expect('failed' in built ? built.failed : '', 'npm run build in the replayed build stage').toBe('');
    return;
  }
  if (/^npm prune\b/.test(command)) {
    const args = command.split(/\s+/).slice(1);
    await execFileAsync('npm', [...args, '--offline'], { cwd, env: { ...process.env, npm_config_update_notifier: 'false' }, maxBuffer: 16 * 1024 * 1024 });
    return;
  }
  throw new Error(`the replay does not know the build step ${JSON.stringify(command)}`);
}

/** The host's etcd binaries stand in for the official image's (discovery only needs the files; 3.4 has no etcdutl). */
async function hostEtcdFile(name: string): Promise<string | undefined> {
  const host = await findEtcdBinaries({ etcdBin: process.env.ETCD_BIN, path: process.env.PATH ?? '' }).catch(() => undefined);
  const map: Record<string, string | undefined> = { etcd: host?.etcd, etcdctl: host?.etcdctl, etcdutl: host?.etcdutl };
  return map[name];
}

async function replayFinalStage(stage: Stage): Promise<void> {
  let cwd = '/';
  for (const i of stage.instructions) {
    switch (i.keyword) {
      case 'WORKDIR':
        cwd = resolveInStage(cwd, i.args);
        mkdirSync(inRoot(finalRoot, cwd), { recursive: true });
        break;
      case 'COPY': {
        const from = stageOf(i.flags.from);
        const { sources, dest } = copyPaths(i);
        const destPath = resolveInStage(cwd, dest);
        const destIsDir = dest.endsWith('/') || sources.length > 1;
        for (const s of sources) {
          if (from === dockerfile.stages[0]) {
            await dockerCopy(inRoot(buildRoot, s), inRoot(finalRoot, destPath), destIsDir);
          } else if (from === runtimeBase) {
            // The Node image's tree is not here; what the runtime base stage does to it is.
            expect([s, destPath]).toEqual(['/', '/']);
            replayRuntimeBase(from);
          } else {
            const name = s.split('/').at(-1)!;
            const target = join(inRoot(finalRoot, destPath), name);
            mkdirSync(dirname(target), { recursive: true });
            const host = await hostEtcdFile(name);
            if (host !== undefined) copyFileSync(host, target);
            else writeFileSync(target, '#!/bin/sh\nexit 1\n'); // stand-in: only its presence is checked
            chmodSync(target, 0o755);
          }
        }
        break;
      }
      case 'RUN':
        for (const command of i.args.split('&&').map((c) => c.trim())) replayFinalCommand(command);
        break;
      case 'ARG':
      case 'ENV':
      case 'USER':
      case 'EXPOSE':
      case 'ENTRYPOINT':
        break;
      default:
        throw new Error(`line ${i.line}: the replay does not know ${i.keyword} in the final stage`);
    }
  }
}

/** The runtime base stage's RUN commands, into the final tree (its FROM image is not replayed). */
function replayRuntimeBase(stage: Stage): void {
  for (const i of stage.instructions) {
    if (i.keyword === 'RUN') for (const command of i.args.split('&&').map((c) => c.trim())) replayFinalCommand(command);
    else throw new Error(`line ${i.line}: the replay does not know ${i.keyword} in the runtime base stage`);
  }
}

function replayFinalCommand(command: string): void {
  const words = command.split(/\s+/);
  switch (words[0]) {
    case 'rm':
      // Removes parts of the base image, which the replay does not have; it must not touch what we copied.
      for (const p of words.slice(1).filter((w) => !w.startsWith('-'))) expect(p.startsWith('/app')).toBe(false);
      return;
    case 'mkdir':
      for (const p of words.slice(1).filter((w) => !w.startsWith('-'))) mkdirSync(inRoot(finalRoot, p), { recursive: true });
      return;
    case 'chown':
    case 'chmod':
    case 'groupadd':
    case 'useradd':
      return; // users, ownership and modes of the home directory: not observable without the image's users
    case 'ln': {
      expect(words.slice(0, 2)).toEqual(['ln', '-s']);
      const [target, link] = words.slice(2) as [string, string];
      mkdirSync(dirname(inRoot(finalRoot, link)), { recursive: true });
      // Inside the replay the link points into the final tree, as the absolute target does in the image.
      symlinkSync(inRoot(finalRoot, target), inRoot(finalRoot, link));
      return;
    }
    default:
      throw new Error(`the runtime image runs ${JSON.stringify(command)}, which the replay does not know (and an image should not need)`);
  }
}

/** The environment a container of the image starts with, paths moved into the replayed root. */
function containerEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    // node itself comes from the host; the image's own bin directory is searched first.
    PATH: [inRoot(finalRoot, '/usr/local/bin'), dirname(process.execPath)].join(':'),
  };
  for (const [k, v] of finalEnv({ GIT_SHA })) env[k] = v.startsWith('/') ? inRoot(finalRoot, v) : v;
  return env;
}

function runInImage(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const [command, ...rest] = execForm(instructions(finalStage, 'ENTRYPOINT')[0]!.args)!;
  expect(command).toBe('node');
  const mapped = rest.map((a) => (a.startsWith('/') ? inRoot(finalRoot, a) : a));
  const workdir = instructions(finalStage, 'WORKDIR').at(-1)!.args;
  const r = spawnSync(process.execPath, [...mapped, ...args], {
    cwd: inRoot(finalRoot, workdir),
    env: containerEnv(),
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('the final stage, replayed', () => {
  beforeAll(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'etcdbr-image-'));
    // Module resolution walks up from the replayed /app: nothing above it may hold a node_modules.
    for (let d = tmp; d !== dirname(d); d = dirname(d)) {
      expect(existsSync(join(dirname(d), 'node_modules')), `${dirname(d)}/node_modules would leak into the replay`).toBe(false);
    }
    buildRoot = join(tmp, 'build');
    finalRoot = join(tmp, 'final');
    await replayBuildStage(dockerfile.stages[0]!);
    await replayFinalStage(finalStage);
  }, 300_000);

  afterAll(async () => {
    if (tmp !== undefined) await rm(tmp, { recursive: true, force: true });
  });

  it('has only compiled code, manifests and production packages under /app', () => {
    const app = inRoot(finalRoot, '/app');
    expect(readdirSync(app).sort()).toEqual(['bin', 'dist', 'malloc-trim', 'node_modules', 'package.json', 'snapstore']);
    expect(readdirSync(join(app, 'snapstore')).sort()).toEqual(['dist', 'package.json']);
    expect(readdirSync(join(app, 'malloc-trim'), { recursive: true }).sort()).toEqual(
      ['build', 'build/Release', 'build/Release/malloc_trim.node', 'index.cjs', 'package.json'].sort(),
    );
    // If npm ever nests packages under the workspace, the Dockerfile has to copy them too.
    expect(existsSync(join(buildRoot, 'app', 'snapstore', 'node_modules'))).toBe(false);
    const missing: string[] = [];
    const leftover: string[] = [];
    for (const [key, entry] of Object.entries(lock.packages)) {
      if (!key.startsWith('node_modules/')) continue;
      const present = (() => {
        try {
          lstatSync(join(app, key));
          return true;
        } catch {
          return false;
        }
      })();
      if (entry.dev === true && present) leftover.push(key);
      if (entry.dev !== true && entry.optional !== true && entry.devOptional !== true && !present) missing.push(key);
    }
    expect(leftover, 'dev-only packages in the image').toEqual([]);
    expect(missing, 'production packages missing from the image').toEqual([]);
    for (const dev of Object.keys(pkg.devDependencies).filter((d) => lock.packages[`node_modules/${d}`]?.dev === true)) {
      expect(existsSync(join(app, 'node_modules', dev)), dev).toBe(false);
    }
    // The Node binary packages (optional, for npm scripts on an older Node) never reach the image.
    for (const nodeBin of Object.keys(pkg.optionalDependencies ?? {})) {
      expect(existsSync(join(app, 'node_modules', nodeBin)), nodeBin).toBe(false);
    }
    expect(Object.keys(pkg.optionalDependencies ?? {}).length).toBeGreaterThan(0);
  });

  it('links the workspace package to its compiled dist, and keeps the compiled zstd addon', () => {
    const app = inRoot(finalRoot, '/app');
    const link = join(app, 'node_modules', '@etcdbrctl', 'snapstore');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe('../../snapstore');
    const probe = spawnSync(process.execPath, ['--input-type=module', '-e', "process.stdout.write(import.meta.resolve('@etcdbrctl/snapstore'))"], {
      cwd: join(app, 'dist'),
      env: containerEnv(),
      encoding: 'utf8',
    });
    // --input-type=module resolves from the working directory.
    expect(probe.stderr).toBe('');
    expect(probe.stdout).toBe(pathToFileURL(realpathSync(join(app, 'snapstore', 'dist', 'index.js'))).href);
    expect(existsSync(join(app, 'node_modules', 'zstd-napi', 'build', 'Release', 'binding.node'))).toBe(true);
  });

  it('keeps the compiled malloc-trim addon, which loads and trims from the production tree', () => {
    const app = inRoot(finalRoot, '/app');
    expect(readlinkSync(join(app, 'node_modules', '@etcdbrctl', 'malloc-trim'))).toBe('../../malloc-trim');
    const probe = spawnSync(
      process.execPath,
      ['--input-type=module', '-e', "const { trim } = await import('@etcdbrctl/malloc-trim'); process.stdout.write(typeof trim())"],
      { cwd: join(app, 'dist'), env: containerEnv(), encoding: 'utf8' },
    );
    expect(probe.stderr).toBe('');
    expect(probe.stdout).toBe('boolean');
  });

  it('loads every package and module the compiled code imports, from the production tree alone', () => {
    const app = inRoot(finalRoot, '/app');
    const files = [join(app, 'dist'), join(app, 'snapstore', 'dist')].flatMap((d) =>
      (readdirSync(d, { recursive: true }) as string[]).filter((f) => f.endsWith('.js')).map((f) => join(d, f)),
    );
    const bare = new Set<string>();
    for (const f of files) {
      // Read from the syntax tree: an import-like phrase in a comment or string is not an import.
      for (const { specifier: spec } of moduleImports(f, readFileSync(f, 'utf8'))) {
        if (!spec.startsWith('.') && !spec.startsWith('/') && !spec.startsWith('node:')) bare.add(spec);
      }
    }
    expect(bare.has('prom-client')).toBe(true);
    // The command modules and the lazily loaded providers, plus every bare import, loaded from dist/.
    const modules = [
      ...readdirSync(join(app, 'dist', 'cli', 'commands')).filter((f) => f.endsWith('.js')).map((f) => `./cli/commands/${f}`),
      ...readdirSync(join(app, 'snapstore', 'dist', 'providers')).filter((f) => f.endsWith('.js')).map((f) => `../snapstore/dist/providers/${f}`),
      ...[...bare].sort(),
    ];
    const probeFile = join(app, 'dist', 'image-probe.mjs');
    writeFileSync(
      probeFile,
      `const failed = [];\nfor (const m of ${JSON.stringify(modules)}) {\n  try { await import(m); } catch (err) { failed.push(m + ': ' + err.message.split('\\n')[0]); }\n}\nprocess.stdout.write(JSON.stringify(failed));\nprocess.exit(0);\n`,
    );
    try {
      const r = spawnSync(process.execPath, [probeFile], { cwd: app, env: containerEnv(), encoding: 'utf8', timeout: 120_000 });
      expect(r.status, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout) as string[]).toEqual([]);
    } finally {
      // Keep the tree as the image has it for the other cases.
      rmSync(probeFile, { force: true });
    }
  });

  it('holds the bundled CLI and no TypeScript build info, so bin/etcdbrctl loads the bundle (its quick start)', () => {
    const app = inRoot(finalRoot, '/app');
    expect(existsSync(join(app, 'dist', 'etcdbrctl.js'))).toBe(true);
    const chunks = JSON.parse(readFileSync(join(app, 'dist', 'etcdbrctl.meta.json'), 'utf8')) as Record<string, string[]>;
    for (const chunk of Object.keys(chunks)) expect(existsSync(join(app, 'dist', chunk)), chunk).toBe(true);
    expect(readdirSync(app).filter((f) => f.endsWith('.tsbuildinfo'))).toEqual([]);
  });

  it('prints the version, with the Git SHA given as a build argument', () => {
    const r = runInImage(['--version']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(
      `etcdbrctl Version: ${pkg.version}\nGit SHA: ${GIT_SHA}\nNode Version: ${process.version}\nOS/Arch: ${process.platform}/${process.arch}\n`,
    );
  });

  it('shows the server help with the flags etcd-druid passes, also through the etcdbrctl link on PATH', () => {
    const r = runInImage(['server', '--help']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    for (const flag of ['--use-etcd-wrapper', '--enable-member-lease-renewal', '--enable-snapshot-lease-renewal', '--storage-provider', '--embedded-etcd-quota-bytes']) {
      expect(r.stdout).toContain(flag);
    }
    const link = inRoot(finalRoot, '/usr/local/bin/etcdbrctl');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    const viaLink = spawnSync(process.execPath, [link, 'server', '--help'], { cwd: inRoot(finalRoot, '/home/nonroot'), env: containerEnv(), encoding: 'utf8' });
    expect(viaLink.status, viaLink.stderr).toBe(0);
    expect(viaLink.stdout).toBe(r.stdout);
  });

  it('finds etcd and etcdutl where ETCD_BIN points, as the restore path needs', async () => {
    const env = containerEnv();
    const found = await findEtcdBinaries({ etcdBin: env.ETCD_BIN, path: env.PATH ?? '' });
    expect(found.etcd).toBe(inRoot(finalRoot, '/usr/local/bin/etcd'));
    expect(found.etcdutl).toBe(inRoot(finalRoot, '/usr/local/bin/etcdutl'));
    expect(found.etcdctl).toBe(inRoot(finalRoot, '/usr/local/bin/etcdctl'));
    expect(relative(finalRoot, found.etcd).startsWith('..')).toBe(false);
  });
});
