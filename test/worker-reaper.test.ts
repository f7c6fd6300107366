/**
 * What a test starts ends with its test worker, also when the worker is SIGKILLed (test/support/reap-children.ts,
 * every worker's setup file, and its watchdog test/support/orphan-reaper.mjs). A stand-in worker, a Node
 * process with the setup file loaded, starts a process and a shell with two of its own, and is killed.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { cleanupAfterEach } from './support/cleanups.js';
import { isRunning, killIfRunning, liveDescendants } from './support/process-group.js';
import { waitFor } from './support/wait.js';

const cleanups = cleanupAfterEach();
const SETUP = fileURLToPath(new URL('./support/reap-children.ts', import.meta.url));

const WORKER = `
import { spawn } from 'node:child_process';
await import(${JSON.stringify(SETUP)});
spawn('sleep', ['1000'], { stdio: 'ignore' });
spawn('sh', ['-c', 'sleep 1000 & sleep 1000 & wait'], { stdio: 'ignore' });
process.stdout.write('started\\n');
setInterval(() => undefined, 1 << 30);
`;

describe('the test worker watchdog', () => {
  it('kills what a SIGKILLed worker started, with its descendants, and then ends', async () => {
    // Node 24 runs the TypeScript setup file as it is (type stripping).
    const worker = spawn(process.execPath, ['--input-type=module', '-e', WORKER], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
    let below: number[] = [];
    cleanups.push(async () => {
      killIfRunning(worker.pid!);
      for (const pid of below) killIfRunning(pid);
      await exited;
    });
    let out = '';
    worker.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    await waitFor(() => out.includes('started'), 'the worker to start its processes');
    // The watchdog, sleep, sh and the shell's two: five processes below the worker.
    below = await waitFor(async () => {
      const d = await liveDescendants(worker.pid!);
      return d.length === 5 ? d : undefined;
    }, 'the worker’s processes to run');

    worker.kill('SIGKILL');
    await exited;
    await waitFor(
      async () => (await Promise.all(below.map(isRunning))).every((r) => !r),
      'the watchdog to end what the worker left',
      10_000,
    );
    expect(await Promise.all(below.map(isRunning))).toEqual(below.map(() => false));
  });
});
