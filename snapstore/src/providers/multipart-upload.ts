/**
 * The one multipart-upload engine of the package: S3, ABS, Swift and OSS saves all run through it, each
 * with an adapter that makes its wire calls ({@link MultipartAdapter}: begin, put a part, commit, discard,
 * and optionally put a small object whole) and a part storage (upload-parts.ts: buffers in memory, or
 * files in the snapstore temp directory).
 *
 * Flow: the input is cut into parts of exactly `partSize` bytes (the last one shorter). An input that ends
 * within the first part goes up as one request when the adapter can store an object whole (S3, Swift, OSS;
 * a delta snapshot, most copied objects). Otherwise the upload begins when the first part is ready (in
 * parallel with filling the second; at once for a store that cannot take an object whole, ABS), every part
 * is sent with the retry policy, and the commit names the parts in order. At most `concurrency` parts are
 * in flight and, where the part storage fills ahead (files on disk), one more is being filled or waits for
 * a slot; part buffers in memory are filled only while a slot is free. While the engine waits the input is
 * not read, so a slow store slows the producer (etcd's stream) down instead of filling memory or disk.
 *
 * The first failure wins: the input's, the caller's signal, a request's (after its retries) or the part
 * storage's. It stops the reading, cancels the requests in flight (at once, or after `drainMs`), has the
 * adapter discard what was uploaded (best effort) and rejects with an {@link UploadFailedError} that says
 * where it came from. Once the commit (or the whole object's request) is sent, the caller's signal no longer
 * applies: the object is then stored or not, and an abort comes too late to say which. Nothing is
 * committed unless this resolves, and no part outlives the upload.
 */
import type { Readable } from 'node:stream';
import type { Logger } from '../logger.js';
import { InternalError } from '../internal-errors.js';
import { abortReason, describeError } from './common.js';
import { UploadFailedError, type UploadFailureOrigin } from './upload-failed.js';
import { cutParts, type PartStorage, type SealedPart } from './upload-parts.js';
import { withRetry, type PartRetryPolicy, type RetryContext } from './upload-retry.js';

/**
 * One provider's wire calls. `P` is the part body its requests take (a buffer, a part file), `U` what
 * `begin` returns (an upload id), `R` what a part's request returns for the commit (an ETag).
 */
export interface MultipartAdapter<P, U, R> {
  /**
   * Starts the upload; called once, when the first part is ready (at the start without `putWhole`). Every
   * part request waits for it, and its failure fails the upload. The signal aborts when the upload fails;
   * an adapter that must learn the upload id to clean up ignores it.
   */
  begin(signal: AbortSignal): Promise<U>;
  /** Sends part `number` (1-based); one attempt, the engine retries. */
  putPart(upload: U, number: number, body: P, signal: AbortSignal): Promise<R>;
  /** Makes the object visible from the parts' receipts, in part order (none for an empty input). */
  commit(upload: U, receipts: R[]): Promise<void>;
  /**
   * Removes what a failed upload left, best effort: a failure here is logged, not thrown. `upload` is what
   * `begin` returned, undefined when it never ran or failed; `started` counts the parts whose request was
   * sent (or may have been).
   */
  discard(upload: U | undefined, started: number): Promise<void>;
  /** Stores an input that ended within the first part in one request (one attempt); without it, it is one part. */
  putWhole?(bytes: Buffer, signal: AbortSignal): Promise<void>;
  /** Whether a failed attempt of a request is worth another (a timed-out one comes as a TimeoutError). */
  retryable(err: unknown): boolean;
}

export interface MultipartUploadOptions {
  /** Size of every part but the last. */
  partSize: number;
  /** Part requests in flight at most (`--max-parallel-chunk-uploads`). */
  concurrency: number;
  /** The store's limit of parts per object; more fail the upload with E_TOO_LARGE. */
  maxParts?: number;
  retry: PartRetryPolicy;
  /**
   * On failure, how long requests in flight may still finish before they are cancelled (default 0: at once).
   * For stores where cancelling a request whose body already arrived does not undo it (ABS): its cleanup
   * then sees every part the store has.
   */
  drainMs?: number;
  /** Aborting rejects the upload unless its commit (or the whole object's request) was already sent. */
  signal?: AbortSignal;
  logger: Logger;
  /** The object (`s3://bucket/key`), for log messages. */
  where: string;
}

export interface MultipartUploadResult {
  bytes: number;
  /** Parts of the multipart upload; 0 when the object went up whole. */
  parts: number;
  /** Attempts that failed and were retried. */
  retries: number;
}

/** Uploads `input` through `adapter`, its parts kept by `storage`; the object exists only if this resolves. */
export async function uploadInParts<P, U, R>(
  input: Readable,
  adapter: MultipartAdapter<P, U, R>,
  storage: PartStorage<P>,
  opts: MultipartUploadOptions,
): Promise<MultipartUploadResult> {
  const { partSize, signal, logger } = opts;
  const concurrency = Math.max(1, Math.floor(opts.concurrency));
  // `stop` ends reading, retries and backoff once anything failed; `cancel` the requests in flight.
  const stop = new AbortController();
  const cancel = new AbortController();
  let failure: UploadFailedError | undefined;
  const fail = (origin: UploadFailureOrigin, err: unknown): void => {
    if (failure) return;
    failure = err instanceof UploadFailedError ? err : new UploadFailedError(origin, err);
    stop.abort();
    if (!opts.drainMs) cancel.abort();
    // Unblocks a read that waits for input; no error argument, so the input's own error handlers see no error of ours.
    if (!input.destroyed) input.destroy();
  };
  const onAbort = (): void => fail('aborted', abortReason(signal as AbortSignal));
  if (signal?.aborted) onAbort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  const detachSignal = (): void => signal?.removeEventListener('abort', onAbort);

  let retries = 0;
  const retry: RetryContext = {
    policy: opts.retry,
    retryable: (err) => adapter.retryable(err),
    cancel: cancel.signal,
    giveUp: stop.signal,
    logger,
    where: opts.where,
    onRetry: () => retries++,
  };
  const inflight = new Set<Promise<void>>();
  const receipts: R[] = [];
  let begun: Promise<U> | undefined;
  let started = 0;
  let bytes = 0;
  const begin = (): Promise<U> => {
    if (!begun) {
      begun = adapter.begin(stop.signal);
      // Every part waits for it, so its failure is the upload's; the cleanup sees it too.
      begun.catch((err: unknown) => fail('store', err));
    }
    return begun;
  };

  /** Starts sending a part once a slot is free; the part is released when its request has settled. */
  const dispatch = async (part: SealedPart<P>): Promise<void> => {
    await slotFree();
    const n = started + 1;
    if (!failure && opts.maxParts !== undefined && n > opts.maxParts) {
      fail(
        'store',
        new InternalError('E_TOO_LARGE', `object needs more than ${opts.maxParts} parts of ${partSize} bytes; raise --min-chunk-size`),
      );
    }
    if (failure) {
      await part.release();
      return;
    }
    started = n;
    const upload = begin();
    const p: Promise<void> = upload
      .then((u) => withRetry(`part ${n}`, retry, (s) => adapter.putPart(u, n, part.body, s)))
      .then((receipt) => void (receipts[n - 1] = receipt))
      .catch((err: unknown) => fail('store', err))
      .finally(async () => {
        await part.release();
        inflight.delete(p);
      });
    inflight.add(p);
  };
  /** Waits until every part has been sent; on a failure the cleanup's drain waits for the rest instead. */
  const settle = async (): Promise<void> => {
    while (inflight.size > 0 && !failure) await Promise.race(inflight);
  };
  const slotFree = async (): Promise<void> => {
    while (inflight.size >= concurrency && !failure) await Promise.race(inflight);
  };

  try {
    // A store that cannot take an object whole always begins an upload: at once, while the first part fills.
    if (!failure && adapter.putWhole === undefined) void begin();
    if (!failure) {
      try {
        for await (const item of cutParts(input, partSize, storage, adapter.putWhole !== undefined)) {
          if (failure) {
            if (item.part) await item.part.release();
            else item.whole.release();
            break;
          }
          if (item.whole) {
            // The input ended within the first part: one request. It is the commit, so the caller's signal no longer applies.
            detachSignal();
            const whole = item.whole;
            bytes = whole.bytes.length;
            const putWhole = adapter.putWhole as NonNullable<typeof adapter.putWhole>;
            try {
              await withRetry('object', retry, (s) => putWhole.call(adapter, whole.bytes, s));
            } catch (err) {
              fail('store', err);
            } finally {
              whole.release();
            }
            if (!failure) return { bytes, parts: 0, retries };
            break;
          }
          bytes += item.part.size;
          await dispatch(item.part);
          // Reading on fills the next part: not before a slot is free, unless the storage fills ahead.
          if (!storage.fillsAhead) await slotFree();
          if (failure) break;
        }
      } catch (err) {
        fail('input', err); // a no-op when the read failed because we destroyed the input
      }
    }
    await settle();

    if (!failure) {
      detachSignal(); // from here on the upload commits; an abort now comes too late
      try {
        await adapter.commit(await begin(), receipts);
        return { bytes, parts: started, retries };
      } catch (err) {
        fail('store', err);
      }
    }

    await drain(inflight, opts.drainMs ?? 0, cancel);
    const upload = begun ? await begun.catch(() => undefined) : undefined;
    await adapter
      .discard(upload, started)
      .catch((err: unknown) => logger.warn({ err: describeError(err), key: opts.where }, 'cleanup of the failed upload failed'));
    throw failure as UploadFailedError;
  } finally {
    detachSignal();
    storage.close();
  }
}

/** Gives the requests in flight `ms` to finish, then cancels the rest and waits until every one has settled. */
async function drain(inflight: Set<Promise<void>>, ms: number, cancel: AbortController): Promise<void> {
  if (ms > 0 && inflight.size > 0) {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.allSettled(inflight), new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
    clearTimeout(timer);
  }
  cancel.abort();
  await Promise.allSettled(inflight);
}
