/**
 * `npm run bench` (scripts/bench.mjs) runs each bench in a process group of its own, so that what a bench
 * started (etcd, emulators, sidecars) never outlives it: the leftovers of a bench that ended without its
 * cleanup are killed when it ends, and a signal that stops the runner reaches the bench's whole group. Before,
 * a footprint bench killed by a `timeout` left its etcd, s3rver and sidecar running. The benches here are
 * written into a temp dir (ETCDBR_BENCH_SOURCES): each starts a child that would run forever and records
 * its pid.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from '../support/wait.js';

const BENCH = fileURLToPath(new URL('../../scripts/bench.mjs', import.meta.url));

/**
 * Starts a child that runs until killed, writes its own pid and the child's to PID_FILE, then exits (MODE=exit)
 * or waits.
 */
const BENCH_SOURCE = `
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 60_000)'], { stdio: 'ignore' });
writeFileSync(process.env.PID_FILE, process.pid + ' ' + child.pid);
if (process.env.MODE === 'exit') process.exit(0);
setInterval(() => {}, 60_000);
`;

/** Whether `pid` runs: a zombie (killed, not yet reaped by whoever adopted it) counts as ended. */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

describe('bench runner', () => {
  let dir: string;
  let runner: ChildProcess | undefined;
  /** The bench's pid and its child's, once the bench wrote them. */
  let pids: number[] = [];

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'bench-runner-'));
    await writeFile(join(dir, 'leftover.bench.ts'), BENCH_SOURCE);
  });

  afterEach(async () => {
    // Whatever the runner failed to stop (the checks below fail first) is stopped here.
    runner?.kill('SIGKILL');
    for (const pid of pids) if (running(pid)) process.kill(pid, 'SIGKILL');
    runner = undefined;
    pids = [];
    await rm(dir, { recursive: true, force: true });
  });

  const start = (mode: 'exit' | 'wait'): { exited: Promise<number | null> } => {
    runner = spawn(process.execPath, [BENCH, 'leftover'], {
      env: { ...process.env, ETCDBR_BENCH_SOURCES: dir, PID_FILE: join(dir, 'pid'), MODE: mode },
      stdio: 'ignore',
    });
    const proc = runner;
    return { exited: new Promise((resolve) => proc.on('exit', (code) => resolve(code))) };
  };
  /** Waits for the bench to start its child and returns the child's pid. */
  const childPid = async (): Promise<number> => {
    pids = await waitFor(async () => {
      const found = (await readFile(join(dir, 'pid'), 'utf8')).split(' ').map(Number);
      return found.length === 2 ? found : undefined;
    }, 'the bench to start its child');
    return pids[1] as number;
  };

  it('kills what a bench left running when the bench ends', async () => {
    const { exited } = start('exit');
    const child = await childPid();
    expect(await exited).toBe(0);
    await waitFor(() => !running(child), `the bench's child (pid ${child}) to be killed`);
  });

  it('passes a SIGTERM on to the bench and its children, and ends with 143', async () => {
    const { exited } = start('wait');
    const child = await childPid();
    expect(running(child)).toBe(true);
    runner!.kill('SIGTERM');
    expect(await exited).toBe(143);
    await waitFor(() => pids.every((pid) => !running(pid)), `the bench and its child (pids ${pids.join(', ')}) to end`);
  });
});
