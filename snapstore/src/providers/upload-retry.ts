/**
 * Retries of one upload request (a part, or an object sent whole) above the SDK's or client's own quick
 * retries: they cover outages of seconds, as upstream's chunk retry does (after 1, 2, 4, 8, 16 s).
 */
import type { Logger } from '../logger.js';
import { TimeoutError } from '../internal-errors.js';
import { abortReason, describeError } from './common.js';

export interface PartRetryPolicy {
  /** Retries after the first attempt (upstream: 5). */
  retries: number;
  /** Delay before retry i (0-based) is `baseDelayMs * 2^i` (upstream: 1000, i.e. 1, 2, 4, 8, 16 s). */
  baseDelayMs: number;
  /**
   * One attempt may take this long (upstream `chunkUploadTimeout` = 180 s); unset where the client already
   * limits each request.
   */
  timeoutMs?: number;
}

/** Upstream's policy: 5 retries after 1, 2, 4, 8, 16 s, 180 s per attempt. */
export const DEFAULT_PART_RETRY: Required<PartRetryPolicy> = { retries: 5, baseDelayMs: 1000, timeoutMs: 180_000 };

/** No retries above the client's own (the Azure SDK retries every request itself). */
export const NO_PART_RETRY: PartRetryPolicy = { retries: 0, baseDelayMs: 0 };

export interface RetryContext {
  policy: PartRetryPolicy;
  /** Whether a failed attempt is worth another; a timed-out attempt is offered as a TimeoutError. */
  retryable: (err: unknown) => boolean;
  /** Aborts the attempt under way (its request is cancelled). */
  cancel: AbortSignal;
  /** Once aborted, no further attempt starts: the upload has already failed. */
  giveUp: AbortSignal;
  logger: Logger;
  /** The object, for log messages. */
  where: string;
  onRetry: () => void;
}

/**
 * Runs `run` until it succeeds, the retries are used up, the error is one that a retry cannot fix, or the
 * upload gave up. Each attempt gets its own signal: aborted by `cancel` and, when the policy has one, by
 * its timeout.
 */
export async function withRetry<T>(what: string, ctx: RetryContext, run: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const { policy, cancel, giveUp } = ctx;
  for (let i = 0; ; i++) {
    // A part that was waiting for the upload to begin when it failed never starts (ali-oss cannot cancel).
    if (giveUp.aborted) throw abortReason(giveUp);
    let timedOut = false;
    let caught: unknown;
    if (policy.timeoutMs === undefined) {
      // The client limits each request itself: the upload's signal is the attempt's.
      try {
        return await run(cancel);
      } catch (err) {
        caught = err;
      }
    } else {
      // One controller per attempt, released as soon as the attempt settles (AbortSignal.timeout would keep
      // a timer and the signal alive for the whole timeout, once per part).
      const attempt = new AbortController();
      const timer = setTimeout(() => {
        timedOut = true;
        attempt.abort();
      }, policy.timeoutMs);
      const propagate = (): void => attempt.abort(cancel.reason);
      if (cancel.aborted) propagate();
      else cancel.addEventListener('abort', propagate, { once: true });
      try {
        return await run(attempt.signal);
      } catch (err) {
        caught = err;
      } finally {
        clearTimeout(timer);
        cancel.removeEventListener('abort', propagate);
      }
    }
    if (cancel.aborted || giveUp.aborted) throw caught;
    const err = timedOut ? new TimeoutError(`upload of ${what} took longer than ${policy.timeoutMs} ms`, { cause: caught }) : caught;
    if (i >= policy.retries || !ctx.retryable(err)) throw err;
    const delay = policy.baseDelayMs * 2 ** i;
    ctx.onRetry();
    ctx.logger.warn({ err: describeError(err), key: ctx.where, attempt: i + 1, delayMs: delay }, `upload of ${what} failed; retrying`);
    await sleep(delay, giveUp, cancel);
    if (cancel.aborted || giveUp.aborted) throw err;
  }
}

/** Resolves after `ms`, or at once when either signal aborts. */
function sleep(ms: number, ...signals: AbortSignal[]): Promise<void> {
  return new Promise((resolve) => {
    if (signals.some((s) => s.aborted)) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      for (const s of signals) s.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    for (const s of signals) s.addEventListener('abort', done, { once: true });
  });
}
