import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { oldNode } from '../support/machine-node.js';
import { waitFor } from '../support/wait.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = fileURLToPath(new URL('../../bin/etcdbrctl', import.meta.url));

function etcdbrctl(...args: string[]) {
  return spawnSync(bin, args, { cwd: root, encoding: 'utf8', timeout: 30_000 });
}

describe('bin/etcdbrctl (built)', () => {
  it('on a Node older than 22.12 runs on the project Node in node_modules', () => {
    const r = spawnSync(oldNode(), [bin, '--version'], { cwd: root, encoding: 'utf8', timeout: 30_000 });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(
      `Node Version: ${spawnSync(join(root, 'node_modules/.bin/node'), ['--version'], { encoding: 'utf8' }).stdout.trim()}`,
    );
    // An exit code and stdout pass through unchanged.
    const bad = spawnSync(oldNode(), [bin, 'snapshot', '--bogus'], { cwd: root, encoding: 'utf8', timeout: 30_000 });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toBe("Error: unknown flag: --bogus\nRun 'etcdbrctl snapshot --help' for usage.\n");
  });

  it('on an old Node without the execve addon exits, saying how to run it', () => {
    // A tree with the project's Node in node_modules but no @etcdbrctl/malloc-trim: the switch is impossible.
    const tree = mkdtempSync(join(tmpdir(), 'etcdbr-bin-noaddon-'));
    try {
      mkdirSync(join(tree, 'bin'));
      mkdirSync(join(tree, 'node_modules', '.bin'), { recursive: true });
      copyFileSync(bin, join(tree, 'bin', 'etcdbrctl'));
      symlinkSync(join(root, 'node_modules', '.bin', 'node'), join(tree, 'node_modules', '.bin', 'node'));
      const r = spawnSync(oldNode(), [join(tree, 'bin', 'etcdbrctl'), '--version'], { cwd: tree, encoding: 'utf8', timeout: 30_000 });
      expect(r.status).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(/^etcdbrctl needs Node\.js 22\.12 or newer .* is v\d+\S*\. The Node\.js 24 in node_modules can run it \(/);
      expect(r.stderr).toContain('the addon that switches to it is not built (MODULE_NOT_FOUND): run "npm ci"');
    } finally {
      rmSync(tree, { recursive: true, force: true });
    }
  });

  it('on an old Node without a project Node says which Node it needs', () => {
    const r = spawnSync(oldNode(), [bin, '--version'], {
      cwd: root,
      encoding: 'utf8',
      timeout: 30_000,
      env: { ...process.env, ETCDBRCTL_REEXEC: '1' },
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^etcdbrctl needs Node\.js 22\.12 or newer .* is v\d+/);
  });

  it('--version prints the version block and exits 0', () => {
    const r = etcdbrctl('--version');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^etcdbrctl Version: \d+\.\d+\.\d+\nGit SHA: \S+\nNode Version: v\d+\.\d+\.\d+\nOS\/Arch: \w+\/\w+\n$/);
  });

  it('snapshot --bogus fails with exit code 1 and the unknown flag', () => {
    const r = etcdbrctl('snapshot', '--bogus');
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe("Error: unknown flag: --bogus\nRun 'etcdbrctl snapshot --help' for usage.\n");
  });

  it('compact on an empty store does nothing and exits 0', () => {
    const dir = mkdtempSync(join(tmpdir(), 'etcdbr-bin-compact-'));
    try {
      const r = etcdbrctl('compact', '--storage-provider=Local', `--store-container=${dir}`, `--data-dir=${join(dir, 'compaction.etcd')}`);
      expect(r.status).toBe(0);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain('No base snapshot found. Will do nothing.');
      expect(readdirSync(dir)).toEqual(['v2']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    ['server', 8192, ['server', '--endpoints=http://127.0.0.1:1', '--server-port=0']],
    ['--version', 65536, ['--version']],
  ])("%s: Node's pool for small Buffers in slabs of %i bytes (8 KiB in long-lived commands)", async (_what, expected, args) => {
    const dir = mkdtempSync(join(tmpdir(), 'etcdbr-pool-size-'));
    const out = join(dir, 'pool-size');
    const probe = fileURLToPath(new URL('./support/pool-size-probe.mjs', import.meta.url));
    const env = { ...process.env, NODE_OPTIONS: `--import=${probe}`, POOL_SIZE_PROBE_OUT: out };
    // Nothing answers on port 1: the sidecar serves HTTP and keeps waiting for etcd until it is stopped.
    const child = spawn(bin, args, { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    try {
      if (args[0] === 'server') {
        // Stopped once it serves, so that it ends as it does in a pod.
        await waitFor(() => output.includes('HTTP server listening'), 'the server to serve HTTP');
        child.kill('SIGTERM');
      }
      await exited;
      const probed = JSON.parse(readFileSync(out, 'utf8')) as { poolSize: number; mark: unknown };
      expect(probed.poolSize).toBe(expected);
      // The mark src/speed-first.ts switches back from for a restore in the sidecar: long-lived commands only.
      expect(probed.mark).toEqual(expected === 8192 ? { memoryFirstPoolSize: 8192, speedFirstPoolSize: 65536 } : null);
    } finally {
      child.kill('SIGKILL');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    [undefined, '2'],
    ['4', '4'],
  ])('server with MALLOC_ARENA_MAX=%s runs, in the same process, with %s', async (given, expected) => {
    const env: NodeJS.ProcessEnv = { ...process.env, ETCDBRCTL_TEST_MARK: '1' };
    delete env['MALLOC_ARENA_MAX'];
    if (given !== undefined) env['MALLOC_ARENA_MAX'] = given;
    // Nothing answers on port 1: the sidecar starts its HTTP server and keeps waiting for etcd.
    const child = spawn(bin, ['server', '--endpoints=http://127.0.0.1:1', '--server-port=0', '--log-level=0'], {
      cwd: root,
      env,
      stdio: 'ignore',
    });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    try {
      // Read together, once the process is Node running our script: the kernel starts the shebang's
      // /usr/bin/env first (which has the variables, then execs node), and while an exec replaces the process
      // image both files read empty (CI once read cmdline '' right after environ matched under env).
      const seen = await waitFor(() => {
        const cmdline = readFileSync(`/proc/${child.pid}/cmdline`, 'latin1').split('\0');
        const vars = readFileSync(`/proc/${child.pid}/environ`, 'latin1').split('\0');
        const runsScript = cmdline.some((arg) => arg.endsWith('bin/etcdbrctl')) && !cmdline[0]?.endsWith('/env');
        // The exec'd process has the variable; until then the first start runs without it.
        const marked = vars.includes('ETCDBRCTL_TEST_MARK=1') && vars.some((v) => v.startsWith('MALLOC_ARENA_MAX='));
        return runsScript && marked ? { cmdline, vars } : undefined;
      }, 'the server process to run our script with MALLOC_ARENA_MAX');
      expect(seen.vars).toContain(`MALLOC_ARENA_MAX=${expected}`);
      expect(seen.cmdline).toContain('server');
    } finally {
      child.kill('SIGKILL');
      await exited;
    }
  });
});
