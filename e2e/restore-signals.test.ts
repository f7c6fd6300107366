/**
 * `etcdbrctl restore` as a process, stopped mid-replay: by a stalled replay etcd (SIGSTOP, the restore's
 * per-call deadline ends it) and by a terminal's Ctrl-C (SIGINT to the whole process group, while the replay
 * etcd is stalled so the replay cannot finish first). Either way the restore ends with a clear error, the
 * data dir as it was (absent), no `<data-dir>.part`, and the replay etcd gone.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { REPLAY_CALL_TIMEOUT_ENV } from '../src/cli/deadlines.js';
import { startEtcdWithClient, type EtcdWithClient } from '../test/support/etcd.js';
import { openLocalStore } from '../test/support/local-store.js';
import { baseSnapshot, writeSmallPutChain } from '../test/support/restore-chain.js';
import { BIN, localStoreFlags, waitFor } from './support/sidecar.js';

interface Exit {
  code: number | null;
  stderr: string;
}

interface Restore {
  child: ChildProcess;
  exited: Promise<Exit>;
  stderr: () => string;
}

const started: ChildProcess[] = [];
const stalled: number[] = [];
afterEach(async () => {
  // A failed test still ends what it started: the CLI, and a replay etcd it left stopped.
  for (const pid of stalled.splice(0)) signalIfAlive(pid, 'SIGKILL');
  for (const child of started.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

function signalIfAlive(pid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    return false;
  }
}

/** The parent pid of `pid`, from /proc (undefined once it is gone). */
async function parentOf(pid: number): Promise<number | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return undefined;
  }
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

describe('etcdbrctl restore stopped mid-replay', () => {
  let env: EtcdWithClient;
  let store: SnapStore;

  beforeAll(async () => {
    env = await startEtcdWithClient('etcdbr-e2e-restore-signals-');
    store = await openLocalStore(join(env.dir, 'store'), env.dir);
    await env.client.put('/before/base').value('1');
    const base = await baseSnapshot(env.client, store);
    // Long enough that the replay is still going when the test stalls its etcd.
    await writeSmallPutChain(store, base, { revisions: 20_000, perDelta: 1_000, keySpace: 500, valueBytes: 16, compression: undefined });
  }, 120_000);

  afterAll(async () => {
    await store?.close();
    await env?.cleanup();
  });

  function startRestore(dataDir: string, extraEnv: NodeJS.ProcessEnv, group: boolean): Restore {
    const child = spawn(
      process.execPath,
      [
        BIN,
        'restore',
        ...localStoreFlags(join(env.dir, 'store'), env.dir),
        `--data-dir=${dataDir}`,
        '--delta-replay=online',
        '--initial-cluster=default=http://127.0.0.1:2380',
        '--initial-advertise-peer-urls=http://127.0.0.1:2380',
        `--restoration-temp-snapshots-dir=${join(env.dir, 'restore-tmp')}`,
      ],
      // `detached`: its own process group, as a shell gives a job, so the test can signal the group as a terminal does.
      { env: { ...process.env, ...extraEnv }, stdio: ['ignore', 'ignore', 'pipe'], detached: group },
    );
    started.push(child);
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const exited = new Promise<Exit>((resolve) => child.once('close', (code) => resolve({ code, stderr })));
    return { child, exited, stderr: () => stderr };
  }

  /** Waits for the restore's replay etcd (a child of the restore) and stops it with SIGSTOP; returns its pid. */
  async function stallReplayEtcd(restore: Restore): Promise<number> {
    const line = await waitFor(
      () =>
        restore
          .stderr()
          .split('\n')
          .find((l) => l.includes('"replay etcd started"')),
      'the replay etcd to start',
      60_000,
    );
    const pid = (JSON.parse(line) as { pid: number }).pid;
    expect(await parentOf(pid)).toBe(restore.child.pid);
    process.kill(pid, 'SIGSTOP');
    stalled.push(pid);
    return pid;
  }

  async function expectLeftAsItWas(dataDir: string, etcdPid: number): Promise<void> {
    expect(await exists(dataDir)).toBe(false);
    expect(await exists(`${dataDir}.part`)).toBe(false);
    // The restore stopped its replay etcd (continued, then terminated), even though it was stopped.
    expect(signalIfAlive(etcdPid, 0)).toBe(false);
  }

  it('a replay etcd that stalls ends the restore at the call deadline with a clear error', async () => {
    const dataDir = join(env.dir, 'stalled.etcd');
    await rm(dataDir, { recursive: true, force: true });
    const restore = startRestore(dataDir, { [REPLAY_CALL_TIMEOUT_ENV]: '2s' }, false);
    const pid = await stallReplayEtcd(restore);
    const exit = await restore.exited;
    expect(exit.code).toBe(1);
    expect(exit.stderr).toMatch(
      /Error: the replay etcd did not (commit revision \d+|answer \(.+\)) within 2000 ms \(stalled or overloaded\): stopping the restore/,
    );
    await expectLeftAsItWas(dataDir, pid);
  }, 120_000);

  it("a terminal's Ctrl-C mid-replay ends the restore at once, saying it was interrupted, not blaming etcd", async () => {
    const dataDir = join(env.dir, 'interrupted.etcd');
    await rm(dataDir, { recursive: true, force: true });
    // A deadline far beyond the test's timeout: only the signal can end this restore in time.
    const restore = startRestore(dataDir, { [REPLAY_CALL_TIMEOUT_ENV]: '1h' }, true);
    const pid = await stallReplayEtcd(restore);
    process.kill(-restore.child.pid!, 'SIGINT');
    const exit = await restore.exited;
    expect(exit.code).toBe(1);
    expect(exit.stderr).toContain(
      'Error: etcdbrctl restore was interrupted (received SIGINT) before it finished; the data dir was left as it was',
    );
    expect(exit.stderr).not.toContain('cannot reach etcd');
    expect(exit.stderr).not.toContain('Successfully restored');
    await expectLeftAsItWas(dataDir, pid);
  }, 120_000);
});
