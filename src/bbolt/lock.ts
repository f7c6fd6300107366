/**
 * Is another process holding bbolt's file lock on a db file?
 *
 * etcd opens its backend with bbolt, which takes an exclusive flock(2) on the file for as long as it runs.
 * Upstream's validator opens the file with bbolt itself and reports FailToOpenBoltDBError when it cannot get
 * the (shared) lock within 120 s. Node has no flock, so instead this reads the kernel's lock table,
 * /proc/locks, and looks for a FLOCK WRITE lock on the file's device and inode.
 *
 * Limits, by design of /proc/locks: Linux only; and since Linux 4.9 a process only sees locks held by
 * processes in its own PID namespace. A sidecar in its own container (no shared process namespace) therefore
 * does not see etcd's lock and gets `false`; the validator then reads the file without waiting, which is what
 * bbolt's read-only mode would also do once etcd has stopped.
 */
import { readFile, stat } from 'node:fs/promises';

export interface LockHolder {
  pid: number;
  /** The /proc/locks line, for messages. */
  line: string;
}

/**
 * The process holding an exclusive flock on `path`, or undefined when none is visible (no lock, not Linux,
 * /proc unreadable, or the holder is in another PID namespace).
 */
export async function findFlockHolder(path: string, procLocks = '/proc/locks'): Promise<LockHolder | undefined> {
  let table: string;
  let st;
  try {
    st = await stat(path, { bigint: true });
    table = await readFile(procLocks, 'utf8');
  } catch {
    return undefined;
  }
  const { major, minor } = splitDev(st.dev);
  const ino = st.ino;
  for (const line of table.split('\n')) {
    // "3: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters are listed as "3: -> FLOCK ..." and hold nothing.
    const f = line.trim().split(/\s+/);
    if (f.length < 6 || f[1] === '->') continue;
    if (f[1] !== 'FLOCK' || f[3] !== 'WRITE') continue;
    const m = /^([0-9a-f]+):([0-9a-f]+):(\d+)$/i.exec(f[5]!);
    if (!m) continue;
    if (BigInt(m[3]!) !== ino || Number.parseInt(m[1]!, 16) !== major || Number.parseInt(m[2]!, 16) !== minor) continue;
    const pid = Number(f[4]);
    if (pid === process.pid) continue;
    return { pid, line: line.trim() };
  }
  return undefined;
}

/** glibc's dev_t encoding (what libuv's stat reports) split into major and minor numbers. */
function splitDev(dev: bigint): { major: number; minor: number } {
  const major = Number(((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn));
  const minor = Number((dev & 0xffn) | ((dev >> 12n) & ~0xffn));
  return { major, minor };
}

/**
 * Waits until no visible process holds the lock on `path`, polling every `pollMs`; false if it is still
 * held after `timeoutMs` (upstream's bbolt open timeout is 120 s).
 */
export async function waitForFlockRelease(path: string, timeoutMs: number, pollMs = 500): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (!(await findFlockHolder(path))) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, Math.min(pollMs, Math.max(0, deadline - Date.now()))));
  }
}
