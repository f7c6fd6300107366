/**
 * How a restore's online replay writes revisions into the replay etcd it started: one unconditional
 * transaction per source revision, strictly one after another (etcd gives each the next revision, and
 * concurrent calls would be applied in any order). Each goes through the etcd client's one transport with the
 * restore's stop signal and the per-call deadline, so a stalled etcd fails the replay instead of hanging it,
 * and a refusal reaches the operator in etcd's own words.
 */
import { asError, EtcdbrError } from '../errors.js';
import { isEtcdError, type LocalEtcdClient, type ReplayOp } from '../etcd/index.js';
import { REPLAY_CALL_TIMEOUT_MS } from './replay-deadline.js';

export type { ReplayOp } from '../etcd/index.js';
export { REPLAY_CALL_TIMEOUT_MS } from './replay-deadline.js';

export interface ReplayTxnsOptions {
  /** Ends the pending call and every later one with its reason (the restore's stop signal). */
  signal?: AbortSignal | undefined;
  /** The deadline of each call (default REPLAY_CALL_TIMEOUT_MS): a stalled etcd fails the replay, never hangs it. */
  callTimeoutMs?: number | undefined;
}

export interface ReplayTxns {
  /**
   * Commits one revision's operations as one transaction and resolves with the revision etcd gave it
   * (`expectedRevision` when the replay is in step). Calls must not overlap.
   */
  commit(ops: readonly ReplayOp[], expectedRevision: number): Promise<number>;
  close(): Promise<void>;
}

export function openReplayTxns(client: LocalEtcdClient, opts: ReplayTxnsOptions = {}): ReplayTxns {
  const signal = opts.signal;
  const timeoutMs = opts.callTimeoutMs ?? REPLAY_CALL_TIMEOUT_MS;
  const settings = { timeoutMs, ...(signal ? { signal } : {}) };
  return {
    async commit(ops, expectedRevision) {
      try {
        return await client.txn(ops, settings);
      } catch (err) {
        // A stop reports as the stop (the signal's reason), not as the call's cancellation.
        if (signal?.aborted) throw asError(signal.reason);
        if (isEtcdError(err, 'E_ETCD_TIMEOUT')) {
          throw new EtcdbrError(
            'E_UNAVAILABLE',
            `the replay etcd did not commit revision ${expectedRevision} within ${timeoutMs} ms (stalled or overloaded): stopping the restore`,
            { cause: err },
          );
        }
        throw err;
      }
    },
    close: () => Promise.resolve(),
  };
}

/**
 * `work` bounded by `signal` and a deadline, for calls that take no signal: the call itself may go on in
 * the background, but the replay stops waiting for it (and stops the etcd it talks to). Give the call's own
 * gRPC deadline more time than `timeoutMs` (twice): this bound is the one that reports, in the replay's words.
 */
export async function bounded<T>(work: Promise<T>, what: string, signal: AbortSignal | undefined, timeoutMs: number): Promise<T> {
  signal?.throwIfAborted();
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const stop = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new EtcdbrError(
            'E_UNAVAILABLE',
            `the replay etcd did not answer (${what}) within ${timeoutMs} ms (stalled or overloaded): stopping the restore`,
          ),
        ),
      timeoutMs,
    );
    onAbort = () => reject(asError(signal?.reason));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
  work.catch(() => undefined);
  try {
    return await Promise.race([work, stop]);
  } finally {
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  }
}
