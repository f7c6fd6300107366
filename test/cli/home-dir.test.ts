/**
 * Where a relative Local `--store-container` lives, through the real process (as uid 0 on these machines,
 * the user Gardener's gardenadm runs `etcdbrctl initialize` as, with its buckets under /root): under $HOME,
 * read as the Go tool reads it (os.UserHomeDir: $HOME, else an error), never the working directory and never
 * the password database's home directory. Without HOME (or with an empty one) the command fails naming HOME
 * and the flag, and creates nothing; an absolute container needs no HOME.
 */
import { spawn } from 'node:child_process';
import { cpSync, existsSync, readdirSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { cleanupAfterEach } from '../support/cleanups.js';
import { UPSTREAM_V023 } from '../support/fixtures.js';

const bin = fileURLToPath(new URL('../../bin/etcdbrctl', import.meta.url));
const cleanups = cleanupAfterEach();

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `bin/etcdbrctl` with exactly `env` (HOME only when given), in `cwd`; killed if the test ends first. */
function etcdbrctl(args: string[], env: NodeJS.ProcessEnv, cwd: string): Promise<Ran> {
  const child = spawn(process.execPath, [bin, ...args], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = new Promise<Ran>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited.catch(() => undefined);
  });
  return exited;
}

/** This process's environment without HOME, plus `extra`. */
function envWithoutHome(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  delete env['HOME'];
  return env;
}

const uid = process.getuid?.();
/** A container name no other test or user has, so that a look into the real home directory proves something. */
const bucket = `etcdbr-home-test-${process.pid}-${Date.now()}`;

/** A temp dir with `home/<bucket>` holding a store the Go tool wrote, and an empty working directory `cwd`. */
async function layout(): Promise<{ home: string; cwd: string; dir: string }> {
  const dir = await cleanups.tempDir('etcdbr-home-dir-');
  const home = join(dir, 'home');
  const cwd = join(dir, 'cwd');
  cpSync(join(UPSTREAM_V023, 'gzip', 'snapstore'), join(home, bucket), { recursive: true });
  await mkdir(cwd);
  return { home, cwd, dir };
}

const FULL = 'v2/Full-00000000-00000301-1795219404.gz';

describe(`a relative Local --store-container, as uid ${uid ?? 'n/a'} (${userInfo().username}, passwd home ${userInfo().homedir})`, () => {
  it('lives under $HOME, not under the working directory', async () => {
    const { home, cwd } = await layout();
    const r = await etcdbrctl(['ls', '--storage-provider=Local', `--store-container=${bucket}`], { ...process.env, HOME: home }, cwd);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(FULL);
    expect(r.stdout.split('\n').filter((l) => l.startsWith('Incr ')).length).toBe(4);
    expect(readdirSync(cwd)).toEqual([]);
  });

  it('initialize restores from $HOME/<container> into an empty data dir (a fresh member would lose the backups)', async () => {
    const { home, cwd, dir } = await layout();
    const dataDir = join(dir, 'data', 'new.etcd');
    const r = await etcdbrctl(
      [
        'initialize',
        '--storage-provider=Local',
        `--store-container=${bucket}`,
        `--data-dir=${dataDir}`,
        `--restoration-temp-snapshots-dir=${join(dir, 'restoration.temp')}`,
        `--snapstore-temp-directory=${join(dir, 'temp')}`,
      ],
      { ...process.env, HOME: home },
      cwd,
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/"outcome":"restored"/);
    expect(existsSync(join(dataDir, 'member', 'snap', 'db'))).toBe(true);
  });

  it.each([
    ['not set', envWithoutHome()],
    ['empty', envWithoutHome({ HOME: '' })],
  ])('fails when HOME is %s, as Go does, naming HOME and the flag, and touches no home directory', async (_, env) => {
    const { cwd, dir } = await layout();
    const dataDir = join(dir, 'data', 'new.etcd');
    for (const args of [
      ['ls', '--storage-provider=Local', `--store-container=${bucket}`],
      [
        'initialize',
        '--storage-provider=Local',
        `--store-container=${bucket}`,
        `--data-dir=${dataDir}`,
        `--snapstore-temp-directory=${join(dir, 'temp')}`,
      ],
    ]) {
      const r = await etcdbrctl(args, env, cwd);
      expect(r.code, args[0]).toBe(1);
      expect(r.stderr.trim().split('\n').at(-1)).toBe(
        `Error: --store-container "${bucket}" is relative to the home directory, but HOME is not set or empty: set HOME (the Go etcdbrctl fails without it too), or give an absolute --store-container`,
      );
    }
    // Not the working directory, not the password database's home (/root for uid 0), no data dir.
    expect(readdirSync(cwd)).toEqual([]);
    expect(existsSync(join(userInfo().homedir, bucket))).toBe(false);
    expect(existsSync(dataDir)).toBe(false);
    // The variable counts as the flag does.
    const viaEnv = await etcdbrctl(['ls', '--storage-provider=Local'], { ...env, STORAGE_CONTAINER: bucket }, cwd);
    expect(viaEnv.code).toBe(1);
    expect(viaEnv.stderr).toContain(`Error: STORAGE_CONTAINER "${bucket}" is relative to the home directory, but HOME is not set or empty`);
  });

  it('needs no HOME for an absolute container (our difference: Go joins even that under $HOME)', async () => {
    const { home, cwd } = await layout();
    const r = await etcdbrctl(['ls', '--storage-provider=Local', `--store-container=${join(home, bucket)}`], envWithoutHome(), cwd);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(FULL);
  });
});
