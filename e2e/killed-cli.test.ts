/**
 * A SIGKILL of the process the user started ends the work, however the CLI was started (issue 39). On a Node
 * older than 22.12, bin/etcdbrctl used to run the command as a child on the project's Node 24: a SIGKILL
 * ended only the parent, a killed `restore` put the data dir in place 10 s after its caller saw exit 137, and
 * a killed `server` kept serving. The ways docs/development.md shows: `node bin/etcdbrctl` and `bin/etcdbrctl` with
 * the machine's own, older Node as `node` (where one exists), and the project's Node, as the image, `npm start`
 * and every npm script run it.
 *
 * `npm start` runs scripts/run-local.mjs under npm, which starts etcd and the server: a SIGKILL of npm itself
 * (npm cannot pass that on) must stop both, through the parent-death signal run-local asks the kernel for.
 *
 * Each command is started in a process group of its own (as a shell starts a job), so the test knows every
 * process it could have left; after the SIGKILL of the pid it started, none of them may still run. The group
 * is SIGKILLed after each test, passed or failed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readlink, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { freePort } from '../src/etcd/ports.js';
import { cleanupAfterEach } from '../test/support/cleanups.js';
import { startEtcdWithClient, type EtcdWithClient } from '../test/support/etcd.js';
import { openLocalStore } from '../test/support/local-store.js';
import { oldNode, oldSystemNode } from '../test/support/machine-node.js';
import { isRunning, killGroup, killIfRunning, liveDescendants, liveProcessesInGroup } from '../test/support/process-group.js';
import { waitFor } from '../test/support/wait.js';
import { baseSnapshot, writeSmallPutChain } from '../test/support/restore-chain.js';
import { BIN, localStoreFlags } from './support/sidecar.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const cleanups = cleanupAfterEach();

interface Way {
  name: string;
  /** The command line for `bin/etcdbrctl args`, and the environment it runs in. */
  start(args: string[]): { file: string; args: string[]; env: NodeJS.ProcessEnv };
}

const WAYS: Way[] = [
  {
    name: 'node bin/etcdbrctl, with the machine’s older Node as node',
    start: (args) => ({ file: oldNode(), args: [BIN, ...args], env: process.env }),
  },
  {
    name: 'bin/etcdbrctl, its #!/usr/bin/env node finding the machine’s older Node first',
    start: (args) => ({ file: BIN, args, env: { ...process.env, PATH: `${dirname(oldNode())}:${process.env.PATH ?? ''}` } }),
  },
  {
    name: 'node bin/etcdbrctl on the project’s Node (the image, npm start, npm scripts)',
    start: (args) => ({ file: process.execPath, args: [BIN, ...args], env: process.env }),
  },
];

interface Started {
  child: ChildProcess;
  pid: number;
  stderr(): string;
  /** Resolves with the signal that ended the process (null when it exited by itself) and its exit code. */
  exited: Promise<{ signal: NodeJS.Signals | null; code: number | null }>;
}

/** Starts `bin/etcdbrctl args` the given way, in a process group of its own that the test's cleanup kills. */
function startCli(way: Way, args: string[]): Started {
  const { file, args: argv, env } = way.start(args);
  const child = spawn(file, argv, { env, stdio: ['ignore', 'ignore', 'pipe'], detached: true });
  const pid = child.pid!;
  const exited = new Promise<{ signal: NodeJS.Signals | null; code: number | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  cleanups.push(async () => {
    killGroup(pid);
    await exited;
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return { child, pid, stderr: () => stderr, exited };
}

/** SIGKILLs the pid the test started, and checks that nothing of its process group runs on. */
async function killAndExpectNothingLeft(cli: Started): Promise<void> {
  process.kill(cli.pid, 'SIGKILL');
  const end = await cli.exited;
  expect(end, cli.stderr()).toEqual({ code: null, signal: 'SIGKILL' });
  expect(await liveProcessesInGroup(cli.pid), 'processes of the killed command still running').toEqual([]);
}

/** The executable a process runs now (a switch to the project's Node keeps the pid and changes this). */
const executableOf = (pid: number): Promise<string> => readlink(`/proc/${pid}/exe`);

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

describe('a SIGKILL of the started CLI ends its work', () => {
  let env: EtcdWithClient;
  let store: SnapStore;
  const storeDir = () => join(env.dir, 'store');

  beforeAll(async () => {
    env = await startEtcdWithClient('etcdbr-e2e-killed-cli-');
    store = await openLocalStore(storeDir(), env.dir);
    await env.client.put('/before/base').value('1');
    const base = await baseSnapshot(env.client, store);
    // Enough deltas that the offline replay is still going when the test stops the restore.
    await writeSmallPutChain(store, base, { revisions: 20_000, perDelta: 1_000, keySpace: 500, valueBytes: 16, compression: undefined });
  }, 120_000);

  afterAll(async () => {
    await store?.close();
    await env?.cleanup();
  });

  for (const way of WAYS) {
    it(`restore, killed mid-replay: ${way.name}; the data dir never appears`, async () => {
      const dataDir = join(env.dir, `restored-${WAYS.indexOf(way)}.etcd`);
      await rm(dataDir, { recursive: true, force: true });
      const cli = startCli(way, [
        'restore',
        ...localStoreFlags(storeDir(), join(env.dir, 'tmp')),
        `--data-dir=${dataDir}`,
        '--delta-replay=offline',
        '--initial-cluster=default=http://127.0.0.1:2380',
        '--initial-advertise-peer-urls=http://127.0.0.1:2380',
        `--restoration-temp-snapshots-dir=${join(env.dir, 'restore-tmp')}`,
      ]);
      // The base is in place (etcd's restore tool has exited) and the deltas are being written. SIGSTOP pins
      // that moment: whatever process printed it stops there, unless it is not the one the test started.
      await waitFor(
        () => cli.stderr().includes('"base snapshot restored"') || cli.child.exitCode !== null,
        'the restore to restore its base snapshot',
        60_000,
      );
      expect(cli.child.exitCode, `the restore ended before the test could stop it:\n${cli.stderr()}`).toBeNull();
      process.kill(cli.pid, 'SIGSTOP');
      const executable = await executableOf(cli.pid);
      await killAndExpectNothingLeft(cli);
      // Nothing is left that could put it in place later.
      expect(await exists(dataDir)).toBe(false);
      // The pid the test started was running the project's Node itself.
      expect(executable).toBe(await executableOf(process.pid));
    }, 120_000);

    it(`server, killed while serving: ${way.name}; nothing serves any more`, async () => {
      const port = await freePort();
      const cli = startCli(way, [
        'server',
        `--server-port=${port}`,
        '--endpoints=http://127.0.0.1:1',
        ...localStoreFlags(join(env.dir, 'server-store'), join(env.dir, 'tmp')),
        `--data-dir=${join(env.dir, 'server.etcd')}`,
      ]);
      await waitFor(
        async () => (cli.child.exitCode !== null ? 'exited' : (await fetch(`http://127.0.0.1:${port}/healthz`)).status),
        'the server to listen',
      );
      expect(cli.child.exitCode, cli.stderr()).toBeNull();
      const executable = await executableOf(cli.pid);
      await killAndExpectNothingLeft(cli);
      await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
      expect(executable).toBe(await executableOf(process.pid));
    }, 60_000);
  }
});

describe('npm start, its npm SIGKILLed', () => {
  it('stops etcd and the server: the kernel tells run-local that npm is gone', async () => {
    const dir = await cleanups.tempDir('etcdbr-e2e-npm-start-');
    // npm on the machine's older Node where there is one; its scripts run on the project's Node either way.
    const machineNode = oldSystemNode();
    const PATH = machineNode === undefined ? process.env.PATH : `${dirname(machineNode)}:${process.env.PATH ?? ''}`;
    const npm = spawn('npm', ['start'], {
      cwd: ROOT,
      env: { ...process.env, PATH, ETCDBR_LOCAL_DIR: dir, INIT_CWD: ROOT },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const pid = npm.pid!;
    const exited = new Promise<void>((resolve) => npm.once('exit', () => resolve()));
    // etcd runs in a process group of its own (a terminal's Ctrl-C must not reach it): killed by pid.
    let below: number[] = [];
    cleanups.push(async () => {
      killGroup(pid);
      for (const p of below) killIfRunning(p);
      await exited;
    });
    let out = '';
    npm.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    npm.stderr.resume();
    const url = await waitFor(() => /^etcdbrctl server +(http:\/\/127\.0\.0\.1:\d+)/m.exec(out)?.[1], 'the banner of npm start', 120_000);
    await waitFor(async () => (await fetch(`${url}/healthz`)).status, 'the server to listen', 60_000);
    // npm's script is `exec node scripts/run-local.mjs`: run-local, etcd and the server, and no shell between.
    below = await liveDescendants(pid);
    expect(below.length, `processes under npm: ${below.join(' ')}`).toBe(3);

    process.kill(pid, 'SIGKILL');
    await exited;
    await waitFor(
      async () => (await Promise.all(below.map(isRunning))).every((running) => !running),
      'run-local to stop etcd and the server once npm is gone',
      60_000,
    );
    expect(await liveProcessesInGroup(pid)).toEqual([]);
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
  }, 240_000);
});
