/** `bin/etcdbrctl` as a child process of a test, with its output collected and a kill on the test's cleanup. */
import { spawn, type ChildProcess } from 'node:child_process';
import { BIN } from './sidecar.js';

export interface CliExit {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Starts `bin/etcdbrctl args`; `cleanups` (run by the test's afterEach) kills it if the test ends first. */
export function startCli(
  args: string[],
  env: NodeJS.ProcessEnv,
  cleanups: Array<() => Promise<unknown>>,
): { child: ChildProcess; exited: Promise<CliExit> } {
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = new Promise<CliExit>((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  return { child, exited };
}

/** Runs `bin/etcdbrctl args` to its end; a command still running after 2 minutes is killed (a hang fails the test). */
export async function runCli(args: string[], env: NodeJS.ProcessEnv, cleanups: Array<() => Promise<unknown>>): Promise<CliExit> {
  const { child, exited } = startCli(args, env, cleanups);
  const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
  try {
    return await exited;
  } finally {
    clearTimeout(timer);
  }
}
