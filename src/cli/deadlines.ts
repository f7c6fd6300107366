/**
 * Deadlines of calls that upstream's flags do not cover, each with an environment variable for tests and for
 * operators whose setup is slow beyond the default.
 * - The restore's replay etcd is ours (upstream embeds etcd and has no flag for it): each call to it waits at
 *   most REPLAY_CALL_TIMEOUT_MS, so a stalled replay etcd fails the restore instead of hanging it.
 * - A store fetch (restore, copy, verify) whose store sends no byte for DEFAULT_FETCH_STALL_MS while it is read
 *   ends with E_UNREACHABLE instead of hanging: a stall deadline, not a limit on the whole download.
 */
import { DEFAULT_FETCH_STALL_MS } from '@etcdbrctl/snapstore';
import { formatGoDuration, parseGoDuration } from '../config/values.js';
import { REPLAY_CALL_TIMEOUT_MS } from '../restorer/replay-deadline.js';

/** Ours: the deadline of each call to the restore's replay etcd, as a Go duration (default 30s). */
export const REPLAY_CALL_TIMEOUT_ENV = 'ETCDBRCTL_REPLAY_CALL_TIMEOUT';

/** Ours: how long a store fetch may go without a byte while it is read, as a Go duration (default 1m). */
export const STORE_STALL_TIMEOUT_ENV = 'ETCDBRCTL_STORE_STALL_TIMEOUT';

type Env = Readonly<Record<string, string | undefined>>;

/** The replay call deadline from the environment; an unusable value keeps the default and says why. */
export function replayCallTimeout(env: Env): { ms: number; problem?: string } {
  return durationFromEnv(env, REPLAY_CALL_TIMEOUT_ENV, REPLAY_CALL_TIMEOUT_MS);
}

/** The store fetch stall deadline from the environment; an unusable value keeps the default and says why. */
export function storeStallTimeout(env: Env): { ms: number; problem?: string } {
  return durationFromEnv(env, STORE_STALL_TIMEOUT_ENV, DEFAULT_FETCH_STALL_MS);
}

function durationFromEnv(env: Env, name: string, defaultMs: number): { ms: number; problem?: string } {
  const raw = env[name];
  if (raw === undefined || raw === '') return { ms: defaultMs };
  let ms: number;
  try {
    ms = parseGoDuration(raw);
  } catch {
    ms = 0;
  }
  if (ms > 0) return { ms };
  return {
    ms: defaultMs,
    problem: `${name}=${JSON.stringify(raw)} is not a positive duration such as 30s: using ${formatGoDuration(defaultMs)}`,
  };
}
