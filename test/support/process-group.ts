/** Which processes still run in a process group, or below a process: how a test checks that a killed command left nothing behind. */
import { readdir, readFile } from 'node:fs/promises';

interface ProcStat {
  pid: number;
  state: string;
  ppid: number;
  pgrp: number;
}

/** Every process in /proc with its state, parent and process group. */
async function processes(): Promise<ProcStat[]> {
  const found: ProcStat[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = await readFile(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // After the command name's closing parenthesis: state, ppid, pgrp, ...
    const [state = '', ppid, pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    found.push({ pid: Number(name), state, ppid: Number(ppid), pgrp: Number(pgrp) });
  }
  return found;
}

const live = (p: ProcStat): boolean => p.state !== 'Z' && p.state !== 'X';

/** The pids of the live (not zombie) processes whose process group is `pgid`. */
export async function liveProcessesInGroup(pgid: number): Promise<number[]> {
  return (await processes()).filter((p) => live(p) && p.pgrp === pgid).map((p) => p.pid);
}

/** The pids of the live processes below `pid` (children, their children, ...). */
export async function liveDescendants(pid: number): Promise<number[]> {
  const all = (await processes()).filter(live);
  const found: number[] = [];
  for (let parents = [pid]; parents.length > 0;) {
    const children = all.filter((p) => parents.includes(p.ppid)).map((p) => p.pid);
    found.push(...children);
    parents = children;
  }
  return found;
}

/** Whether `pid` still runs (a zombie does not). */
export async function isRunning(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** SIGKILLs every process of group `pgid`; a group already gone is fine. */
export function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, 'SIGKILL');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

/** SIGKILLs `pid` if it still runs. */
export function killIfRunning(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}
