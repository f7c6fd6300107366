/**
 * Every process a test starts ends with the test worker that started it, however the worker ends (vitest's
 * `setupFiles`). A test stops what it starts in its own cleanup; that cleanup does not run when the worker is
 * killed (vitest tearing down a worker that timed out, a runner stopped with SIGKILL, the OOM killer), and the
 * processes then ran on: four Swift servers (swift-aio.ts) outlived a failed run.
 *
 * child_process.spawn is wrapped (and the ES module bindings synced, so `import { spawn }` gets the wrapper):
 * the pid of each process started is handed to a watchdog of this worker (orphan-reaper.mjs), started with
 * the first such process. The watchdog reads the worker's end as the end of its stdin pipe and then SIGKILLs
 * the processes still running, with their descendants. `execFile`, `exec` and `fork` are not wrapped (Node
 * calls its own spawn inside them): the tests run only short commands through them.
 */
import childProcess, { type ChildProcess } from 'node:child_process';
import { syncBuiltinESMExports } from 'node:module';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';

const REAPER = fileURLToPath(new URL('./orphan-reaper.mjs', import.meta.url));
const WRAPPED = Symbol.for('etcdbrctl.reap-children');

type Spawn = typeof childProcess.spawn;

function install(): void {
  const spawn = childProcess.spawn;
  if ((spawn as Spawn & { [WRAPPED]?: true })[WRAPPED]) return; // a second test file in the same worker
  let reaper: ChildProcess | undefined;
  const watch = (pid: number): void => {
    if (reaper === undefined) {
      // Its own process group (a Ctrl-C must not end it before the worker), and nothing of it keeps the
      // worker alive: the pipe closes when the worker exits, which is what the watchdog waits for.
      reaper = spawn(process.execPath, [REAPER], { stdio: ['pipe', 'ignore', 'inherit'], detached: true });
      reaper.unref();
      // stdin: 'pipe' makes it a net.Socket, which can be unref'd.
      (reaper.stdin as Socket).unref();
      reaper.stdin?.on('error', () => undefined); // a watchdog gone first: nothing to report to
    }
    reaper.stdin?.write(`${pid}\n`);
  };
  const wrapped = function (this: unknown, ...args: Parameters<Spawn>): ChildProcess {
    const child = (spawn as (...a: Parameters<Spawn>) => ChildProcess).apply(this, args);
    if (child.pid !== undefined) watch(child.pid);
    return child;
  } as Spawn;
  Object.defineProperty(wrapped, WRAPPED, { value: true });
  childProcess.spawn = wrapped;
  syncBuiltinESMExports();
}

install();
