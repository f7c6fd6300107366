// The watchdog of one test worker (test/support/reap-children.ts starts it): reads the pid of every process
// the worker starts, one per line on stdin, and when stdin ends, which happens however the worker ends (a
// SIGKILL, a crash, vitest tearing its workers down, or a normal exit), SIGKILLs each of those processes that
// still runs, with everything below it. A failed or killed run once left four Swift servers running.
//
// Plain JavaScript: it starts on a bare `node`, before and without vitest. Its own process group, so a
// terminal's Ctrl-C, which ends the worker, does not end it first. Never kills by name: a pid is killed only
// while it is the same process it was when it was reported (its start time in /proc).
import { readdirSync, readFileSync } from 'node:fs';

/** State, parent and start time of `pid` from /proc/<pid>/stat, or undefined once it is gone. */
function stat(pid) {
  let text;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // Fields after the command name's closing parenthesis: state (3), ppid (4), ... starttime (22).
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0], ppid: Number(fields[1]), startTicks: fields[19] };
}

const running = (s) => s !== undefined && s.state !== 'Z' && s.state !== 'X';

/** pid -> start ticks when reported. */
const watched = new Map();

let pending = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
  pending += chunk;
  const lines = pending.split('\n');
  pending = lines.pop() ?? '';
  for (const line of lines) {
    const pid = Number(line);
    const s = Number.isSafeInteger(pid) && pid > 0 ? stat(pid) : undefined;
    if (running(s)) watched.set(pid, s.startTicks);
  }
  // Forget the ones that ended, so a long worker's list stays short.
  for (const [pid, ticks] of watched) if (stat(pid)?.startTicks !== ticks) watched.delete(pid);
});
process.stdin.on('end', () => {
  const table = readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .map((name) => ({ pid: Number(name), s: stat(Number(name)) }))
    .filter((p) => running(p.s));
  const victims = [];
  for (const [pid, ticks] of watched) {
    if (stat(pid)?.startTicks !== ticks) continue;
    // The process and its descendants, found before any is killed (a killed parent's children move to init).
    for (let level = [pid]; level.length > 0; level = table.filter((p) => level.includes(p.s.ppid)).map((p) => p.pid)) {
      victims.push(...level);
    }
  }
  for (const pid of victims) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  if (victims.length > 0)
    process.stderr.write(`[orphan-reaper] the test worker ended; killed what it left running: ${victims.join(' ')}\n`);
  process.exit(0);
});
