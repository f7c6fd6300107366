/**
 * Names one process for as long as the machine runs: its pid and its start time in clock ticks after boot
 * (`/proc/<pid>/stat`, field 22). A pid alone comes back: a sidecar restarted in its container is often the
 * same pid as the one that was killed, but never started at the same tick. Linux only; elsewhere there is no
 * identity and callers fall back to a file's age.
 */
import { readFile } from 'node:fs/promises';

export interface ProcessIdentity {
  pid: number;
  startTicks: number;
}

/** State and start time from `/proc/<pid>/stat`, or undefined when the process is gone (or there is no /proc). */
async function readStat(pid: number): Promise<{ state: string; startTicks: number } | undefined> {
  let text: string;
  try {
    text = await readFile(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may hold spaces or ')': the fields after the last ')'
  // start at field 3, the state; field 22, the start time, is the 20th of them.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const startTicks = Number(fields[19]);
  const state = fields[0];
  if (state === undefined || !Number.isSafeInteger(startTicks)) return undefined;
  return { state, startTicks };
}

let self: Promise<ProcessIdentity | undefined> | undefined;

/** This process's identity (read once), or undefined without /proc. */
export function currentProcessIdentity(): Promise<ProcessIdentity | undefined> {
  self ??= readStat(process.pid).then((s) => (s === undefined ? undefined : { pid: process.pid, startTicks: s.startTicks }));
  return self;
}

/**
 * Whether the process `id` names still runs: its pid exists, started at the same tick, and is not a zombie
 * (killed, waiting only for its parent to collect its exit status) or dead.
 */
export async function processIsRunning(id: ProcessIdentity): Promise<boolean> {
  const s = await readStat(id.pid);
  return s !== undefined && s.startTicks === id.startTicks && s.state !== 'Z' && s.state !== 'X';
}
