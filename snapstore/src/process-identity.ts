/**
 * Names one process among all the machine ever ran: its pid, its start time in clock ticks after boot
 * (`/proc/<pid>/stat`, field 22) and the boot (the start of `/proc/sys/kernel/random/boot_id`). A pid alone
 * comes back: a sidecar restarted in its container is often the same pid as the one that was killed, but never
 * started at the same tick of the same boot. No wall clock is involved, so no clock step can confuse it.
 * Linux only; elsewhere there is no identity and callers fall back to a file's age.
 */
import { readFile } from 'node:fs/promises';

export interface ProcessIdentity {
  pid: number;
  startTicks: number;
  /** The first 8 hex digits of the boot id. */
  boot: string;
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

let boot: Promise<string | undefined> | undefined;

/** This boot's id, shortened (read once), or undefined without /proc. */
function currentBoot(): Promise<string | undefined> {
  boot ??= readFile('/proc/sys/kernel/random/boot_id', 'utf8').then(
    (id) => id.replaceAll('-', '').slice(0, 8),
    () => undefined,
  );
  return boot;
}

let self: Promise<ProcessIdentity | undefined> | undefined;

/** This process's identity (read once), or undefined without /proc. */
export function currentProcessIdentity(): Promise<ProcessIdentity | undefined> {
  self ??= Promise.all([readStat(process.pid), currentBoot()]).then(([s, b]) =>
    s === undefined || b === undefined ? undefined : { pid: process.pid, startTicks: s.startTicks, boot: b },
  );
  return self;
}

/**
 * Whether the process `id` names still runs: it is of this boot, its pid exists, started at the same tick,
 * and is not a zombie (killed, waiting only for its parent to collect its exit status) or dead.
 */
export async function processIsRunning(id: ProcessIdentity): Promise<boolean> {
  if (id.boot !== (await currentBoot())) return false;
  const s = await readStat(id.pid);
  return s !== undefined && s.startTicks === id.startTicks && s.state !== 'Z' && s.state !== 'X';
}
