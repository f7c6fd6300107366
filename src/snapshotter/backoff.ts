import { EtcdbrError } from '../errors.js';
/**
 * Upstream's ExponentialBackoff (pkg/backoff/exponentialbackoff.go), used by the leader's probe loop to wait
 * before restarting the snapshotter after a failed Run.
 *
 * Sequence: the wait starts at 1 s and each call multiplies it first, so the first call yields 1 s × multiplier.
 * The threshold check happens before the increment (`attempt > attemptLimit`), so attemptLimit + 1 calls are
 * multiplicative and only then is the threshold returned, forever, until reset. Defaults (2, 6, 128 s):
 * 2, 4, 8, 16, 32, 64, 128 (computed), 128 (threshold), 128, …  With limit 3 and threshold 6 s (upstream's
 * unit test): 2, 4, 8, 16, 6, 6, … — the threshold is not a cap, it can be below the previous wait.
 */

export interface ExponentialBackoffOptions {
  /** `--backoff-multiplier`, default 2. */
  multiplier?: number;
  /** `--backoff-attempt-limit`, default 6. */
  attemptLimit?: number;
  /** `--backoff-threshold-time` in milliseconds, default 128 s. */
  thresholdMs?: number;
}

export const DEFAULT_BACKOFF_MULTIPLIER = 2;
export const DEFAULT_BACKOFF_ATTEMPT_LIMIT = 6;
export const DEFAULT_BACKOFF_THRESHOLD_MS = 128_000;

const MINIMUM_BACKOFF_NS = 1_000_000_000n;
const NS_PER_MS = 1_000_000n;

export class ExponentialBackoff {
  /** Upstream's exported `Start`: set when a snapshotter Run failed; the probe loop waits only while it is set. */
  active = false;
  readonly multiplier: number;
  readonly attemptLimit: number;
  readonly thresholdMs: number;
  private attempt = 0;
  // Kept as int64 nanoseconds like Go's time.Duration, so huge limits wrap exactly as upstream's would.
  private currentNs = MINIMUM_BACKOFF_NS;

  constructor(opts: ExponentialBackoffOptions = {}) {
    this.multiplier = opts.multiplier ?? DEFAULT_BACKOFF_MULTIPLIER;
    this.attemptLimit = opts.attemptLimit ?? DEFAULT_BACKOFF_ATTEMPT_LIMIT;
    this.thresholdMs = opts.thresholdMs ?? DEFAULT_BACKOFF_THRESHOLD_MS;
    for (const [name, v] of [
      ['multiplier', this.multiplier],
      ['attemptLimit', this.attemptLimit],
    ] as const) {
      if (!Number.isSafeInteger(v) || v < 0)
        throw new EtcdbrError('E_INVALID_INPUT', `backoff ${name} must be a non-negative integer, got ${v}`);
    }
  }

  /** Marks that a Run failed: the next probe-loop iteration waits `next()` before restarting. */
  start(): void {
    this.active = true;
  }

  /** Upstream GetNextBackoffTime: the wait in milliseconds (0 if int64 overflow made it negative, as Go's timer would fire at once). */
  next(): number {
    if (this.attempt > this.attemptLimit) return this.thresholdMs;
    this.attempt++;
    this.currentNs = BigInt.asIntN(64, this.currentNs * BigInt(this.multiplier));
    const ms = Number(this.currentNs) / Number(NS_PER_MS);
    return ms > 0 ? ms : 0;
  }

  /** Upstream ResetExponentialBackoff: inactive, 1 s base, attempt 0. */
  reset(): void {
    this.active = false;
    this.currentNs = MINIMUM_BACKOFF_NS;
    this.attempt = 0;
  }

  /** Number of multiplicative steps taken since the last reset. */
  get attempts(): number {
    return this.attempt;
  }
}
