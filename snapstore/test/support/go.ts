/**
 * Builds and runs small Go programs of our own (under snapstore/test/go/) so tests can compare against Go's
 * real standard library. A missing Go toolchain is a test failure, not a skip: the compatibility claims
 * these tests make are only worth something when they actually ran.
 */
import { execFile, spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Directory of our Go test helpers (each subdirectory is one `package main` module). */
export const GO_HELPERS_DIR = fileURLToPath(new URL('../go/', import.meta.url));

export interface GoProgram {
  /** Path of the built binary. */
  readonly bin: string;
  /** Runs the binary with `stdin` and resolves with its stdout; rejects with stderr on a non-zero exit. */
  run(args: readonly string[], stdin?: Uint8Array): Promise<Buffer>;
  /** Removes the temp dir holding the binary. */
  cleanup(): Promise<void>;
}

/** Throws (so the calling test fails) with an install hint when `go` is not on PATH. */
export function requireGo(): string {
  const res = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (res.error !== undefined || res.status !== 0) {
    throw new Error(
      'the Go toolchain is required for the Go compatibility tests but `go` is not on PATH ' +
        '(install it: apt-get install -y golang-go)' +
        (res.error !== undefined ? `: ${res.error.message}` : `: ${res.stderr}`),
    );
  }
  return res.stdout.trim();
}

/**
 * Builds `<helpersDir>/<name>` (default `snapstore/test/go/<name>`) into a fresh temp dir. Uses only the
 * standard library, so no network.
 */
export async function buildGoProgram(name: string, helpersDir: string = GO_HELPERS_DIR): Promise<GoProgram> {
  requireGo();
  const dir = await mkdtemp(join(tmpdir(), `etcdbrctl-go-${name}-`));
  const bin = join(dir, name);
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    // Stdlib only: nothing may be fetched, and a caller's GOFLAGS must not change the build.
    GOFLAGS: '',
    GOPROXY: 'off',
    GOTOOLCHAIN: 'local',
    CGO_ENABLED: '0',
  };
  // The default GOCACHE lives under $HOME; give it a temp one when there is no usable home.
  if (process.env['HOME'] === undefined || process.env['HOME'] === '') env['GOCACHE'] = join(dir, 'gocache');
  try {
    await new Promise<void>((resolve, reject) => {
      execFile('go', ['build', '-o', bin, '.'], { cwd: join(helpersDir, name), env }, (err, _stdout, stderr) => {
        if (err) reject(new Error(`go build of ${name} failed: ${err.message}\n${stderr}`));
        else resolve();
      });
    });
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    bin,
    run: (args, stdin) => runBinary(bin, args, stdin),
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}

/**
 * `name` built on the first `run`, inside the test that runs it, so a missing Go toolchain fails each such
 * test with the install hint instead of failing a hook and leaving them skipped. `cleanup` removes the build.
 */
export function goProgramOnFirstRun(name: string): Pick<GoProgram, 'run' | 'cleanup'> {
  let built: Promise<GoProgram> | undefined;
  return {
    async run(args, stdin) {
      built ??= buildGoProgram(name);
      return (await built).run(args, stdin);
    },
    async cleanup() {
      await (await built?.catch(() => undefined))?.cleanup();
    },
  };
}

function runBinary(bin: string, args: readonly string[], stdin?: Uint8Array): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    child.on('error', reject);
    // The child may exit (e.g. on a decode error) before reading all of stdin; that is reported via the exit code.
    child.stdin.on('error', () => undefined);
    child.on('close', (code, signal) => {
      if (code === 0) resolve(Buffer.concat(out));
      else {
        const why = signal !== null ? `signal ${signal}` : `exit code ${code}`;
        reject(new Error(`${bin} ${args.join(' ')}: ${why}: ${Buffer.concat(err).toString('utf8').trim()}`));
      }
    });
    child.stdin.end(stdin ?? Buffer.alloc(0));
  });
}
