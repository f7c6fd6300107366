/**
 * Deadlines of calls that upstream's flags do not cover. The restore's replay etcd is ours (upstream embeds
 * etcd and has no flag for it): each call to it waits at most REPLAY_CALL_TIMEOUT_MS, so a stalled replay
 * etcd fails the restore instead of hanging it. The variable is for tests and for operators whose replay
 * etcd is slow beyond that (a huge transaction on a slow disk).
 */
import { formatGoDuration, parseGoDuration } from '../config/values.js';
import { REPLAY_CALL_TIMEOUT_MS } from '../etcd/replay-txns.js';

/** Ours: the deadline of each call to the restore's replay etcd, as a Go duration (default 30s). */
export const REPLAY_CALL_TIMEOUT_ENV = 'ETCDBRCTL_REPLAY_CALL_TIMEOUT';

/** The replay call deadline from the environment; an unusable value keeps the default and says why. */
export function replayCallTimeout(env: Readonly<Record<string, string | undefined>>): { ms: number; problem?: string } {
  const raw = env[REPLAY_CALL_TIMEOUT_ENV];
  if (raw === undefined || raw === '') return { ms: REPLAY_CALL_TIMEOUT_MS };
  let ms: number;
  try {
    ms = parseGoDuration(raw);
  } catch {
    ms = 0;
  }
  if (ms > 0) return { ms };
  return {
    ms: REPLAY_CALL_TIMEOUT_MS,
    problem: `${REPLAY_CALL_TIMEOUT_ENV}=${JSON.stringify(raw)} is not a positive duration such as 30s: using ${formatGoDuration(REPLAY_CALL_TIMEOUT_MS)}`,
  };
}
