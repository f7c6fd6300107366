/**
 * The one deadline and cancel rule of every network provider's `fetch`: the caller's signal ends the request
 * and the body at once (rejecting or erroring with the signal's reason), and a store that stops sending ends
 * them with E_UNREACHABLE naming the object and the store. A stall is time without a byte while the reader
 * is waiting, never the whole download's time (a large full snapshot takes long) nor time the reader itself
 * spends elsewhere (a slow disk, back-pressure): the clock runs only while the returned stream wants data.
 */
import { Readable, finished } from 'node:stream';
import { SnapStoreError } from '../errors.js';
import type { FetchOptions } from '../store.js';
import { abortReason } from './common.js';

/** Default stall deadline of a fetch: a minute without a byte while the reader waits (ours; see `StoreConfigBase`). */
export const DEFAULT_FETCH_STALL_MS = 60_000;

export interface FetchGuard {
  /** What is fetched, for messages: `fetch s3://bucket/key`. */
  what: string;
  /** The store, for messages: `the S3 endpoint http://…`. */
  store: string;
  /** No answer, or no byte while the reader waits, for this long ends the fetch. */
  stallMs: number;
}

/**
 * Runs `request` (the provider's own fetch, which must end its request when the signal it is given aborts)
 * under the caller's signal and the stall deadline, and wraps the body it returns so that both still hold
 * while it is read. Whatever `request` rejects with after either fired, the fetch rejects with the reason:
 * the caller's, or the stall's E_UNREACHABLE.
 */
export async function guardedFetch(
  request: (signal: AbortSignal) => Promise<Readable>,
  guard: FetchGuard,
  options: FetchOptions | undefined,
): Promise<Readable> {
  const caller = options?.signal;
  if (caller?.aborted) throw abortReason(caller);
  const stop = new AbortController();
  const onCallerAbort = (): void => stop.abort(abortReason(caller!));
  caller?.addEventListener('abort', onCallerAbort, { once: true });
  const release = (): void => caller?.removeEventListener('abort', onCallerAbort);
  const timer = setTimeout(() => stop.abort(stalled(guard, 'did not answer')), guard.stallMs);
  // A provider whose library takes no signal (ali-oss) cannot end its request: the race ends the wait, and a
  // body that still arrives is destroyed.
  let onStop: (() => void) | undefined;
  const stopped = new Promise<never>((_, reject) => {
    onStop = () => reject(stop.signal.reason as Error);
    stop.signal.addEventListener('abort', onStop, { once: true });
  });
  stopped.catch(() => undefined);
  const pending = request(stop.signal);
  let body: Readable;
  try {
    body = await Promise.race([pending, stopped]);
  } catch (err) {
    release();
    pending.then(
      (late) => late.destroy(),
      () => undefined,
    );
    throw stop.signal.aborted ? stop.signal.reason : err;
  } finally {
    clearTimeout(timer);
    stop.signal.removeEventListener('abort', onStop!);
  }
  return new StallGuardedBody(body, guard, stop.signal, release);
}

function stalled(guard: FetchGuard, how: string): SnapStoreError {
  return new SnapStoreError(
    'E_UNREACHABLE',
    `${guard.what}: ${guard.store} ${how} for ${formatMs(guard.stallMs)} (stalled), giving up on the download`,
  );
}

function formatMs(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms} ms`;
}

/**
 * The body as the caller reads it. The stall clock is armed when the reader asks for data and re-armed by
 * each chunk while it keeps asking; back-pressure disarms it. On a stall or the caller's abort the source is
 * destroyed (closing its socket) and this stream errors with the reason.
 */
class StallGuardedBody extends Readable {
  private timer: NodeJS.Timeout | undefined;
  private readonly onStop: () => void;

  constructor(
    private readonly source: Readable,
    private readonly guard: FetchGuard,
    private readonly stop: AbortSignal,
    private readonly release: () => void,
  ) {
    super();
    source.on('data', (chunk: Buffer | Uint8Array) => {
      if (this.push(chunk)) {
        this.timer?.refresh();
      } else {
        this.disarm();
        source.pause();
      }
    });
    source.once('end', () => {
      this.disarm();
      this.push(null);
    });
    // Errors and a close before the end (a cut connection) both end the body with that error.
    finished(source, (err) => {
      if (err) this.destroy(err);
    });
    this.onStop = () => this.destroy(stop.reason as Error);
    stop.addEventListener('abort', this.onStop, { once: true });
    source.pause();
  }

  override _read(): void {
    if (this.timer === undefined) {
      this.timer = setTimeout(() => this.destroy(stalled(this.guard, 'stopped sending')), this.guard.stallMs);
    } else {
      this.timer.refresh();
    }
    this.source.resume();
  }

  private disarm(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    this.disarm();
    this.stop.removeEventListener('abort', this.onStop);
    this.release();
    if (!this.source.destroyed) this.source.destroy();
    callback(err);
  }
}
