/**
 * Streaming upload of one OSS object through ali-oss, with bounded memory.
 *
 * Upstream spools the snapshot to a temp file and splits it into parts of `max(minChunkSize, size/9999)`.
 * We stream instead, as the S3 provider does: parts of `partSize` (`--min-chunk-size`) are cut from the
 * input into at most `concurrency + 1` reused buffers (one filling, the rest in flight), so a slow store
 * slows the producer down instead of growing memory. Input that ends inside the first part goes up as
 * one PutObject. Otherwise InitiateMultipartUpload (when the first part is full), UploadPart per part
 * with upstream's retries (after 1, 2, 4, 8, 16 s), CompleteMultipartUpload with the parts in order.
 * Any failure or abort waits for the parts in flight (ali-oss cannot cancel a request) and sends
 * AbortMultipartUpload, so nothing is committed and no parts are left.
 */
import type { Readable } from 'node:stream';
import { addAbortSignal } from 'node:stream';
import { SnapStoreError } from '../errors.js';
import type { Logger } from '../logger.js';
import { abortReason, describeError } from './common.js';
import type { OssApi } from './oss-client.js';
import { ossErrorInfo } from './oss-client.js';
import { PartBufferPool } from './part-buffers.js';
import type { IdleBuffers } from './part-buffers.js';

/** OSS's limit on the parts of one multipart upload. */
export const OSS_MAX_PARTS = 10_000;

export interface OssUploadOptions {
  client: OssApi;
  key: string;
  partSize: number;
  concurrency: number;
  /** Retries of one part after its first attempt (upstream: 5). */
  partRetries: number;
  /** Delay before retry i is `retryBaseDelayMs * 2^i` (upstream: 1000). */
  retryBaseDelayMs: number;
  signal?: AbortSignal;
  logger: Logger;
  idle?: IdleBuffers;
}

export interface OssUploadResult {
  bytes: number;
  /** 0 when the object went up as one PutObject. */
  parts: number;
}

/** Boxed so that whatever a part threw is told apart from "no failure yet". */
type Failure = { error: unknown };

export async function uploadOssObject(data: Readable, opts: OssUploadOptions): Promise<OssUploadResult> {
  const { client, key, logger } = opts;
  const concurrency = Math.max(1, Math.floor(opts.concurrency));
  const cancel = new AbortController();
  const onAbort = (): void => cancel.abort(opts.signal ? abortReason(opts.signal) : undefined);
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  const pool = new PartBufferPool(opts.partSize, concurrency + 1, opts.idle);
  const inFlight = new Set<Promise<void>>();
  const etags: { number: number; etag: string }[] = [];
  let uploadId: Promise<string> | undefined;
  let failure: Failure | undefined;
  let parts = 0;
  let bytes = 0;
  const stop = (): never => {
    throw failure ? failure.error : abortReason(cancel.signal);
  };

  const dispatch = async (buf: Buffer, length: number): Promise<void> => {
    const number = ++parts;
    if (number > OSS_MAX_PARTS) {
      throw new SnapStoreError(
        'E_SAVE_FAILED',
        `${key} needs more than ${OSS_MAX_PARTS} parts of ${opts.partSize} bytes; raise --min-chunk-size`,
      );
    }
    // The upload is initiated once there is more than one part's worth of data, in parallel with reading on.
    uploadId ??= client.initMultipartUpload(key).then((r) => r.uploadId);
    const p = uploadId
      .then((id) => uploadPart(client, key, id, number, buf.subarray(0, length), opts, cancel.signal))
      .then((etag) => void etags.push({ number, etag }))
      .catch((err: unknown) => {
        failure ??= { error: err };
        cancel.abort(err);
      })
      .finally(() => {
        pool.give(buf);
        inFlight.delete(p);
      });
    inFlight.add(p);
    while (inFlight.size >= concurrency) await Promise.race(inFlight);
  };

  try {
    if (opts.signal?.aborted) throw abortReason(opts.signal);
    // A stalled input must not keep the upload waiting once it is aborted or a part failed.
    addAbortSignal(cancel.signal, data);
    let buf = pool.take();
    let filled = 0;
    for await (const piece of data.iterator({ destroyOnReturn: true })) {
      if (cancel.signal.aborted) stop();
      const chunk = toBuffer(piece);
      bytes += chunk.length;
      let offset = 0;
      while (offset < chunk.length) {
        const n = chunk.copy(buf, filled, offset);
        filled += n;
        offset += n;
        if (filled === buf.length) {
          await dispatch(buf, filled);
          if (cancel.signal.aborted) stop();
          buf = pool.take();
          filled = 0;
        }
      }
    }
    if (parts === 0) {
      await client.put(key, buf.subarray(0, filled));
      pool.give(buf);
      return { bytes, parts: 0 };
    }
    if (filled > 0) await dispatch(buf, filled);
    else pool.give(buf);
    await Promise.all(inFlight);
    if (failure !== undefined || cancel.signal.aborted) stop();
    await client.completeMultipartUpload(
      key,
      await (uploadId as Promise<string>),
      etags.sort((a, b) => a.number - b.number),
    );
    return { bytes, parts };
  } catch (err) {
    cancel.abort(err);
    if (!data.destroyed) data.destroy();
    await Promise.allSettled([...inFlight]);
    if (uploadId !== undefined) {
      const id = await uploadId.catch(() => undefined);
      if (id !== undefined) {
        await client
          .abortMultipartUpload(key, id)
          .catch((e: unknown) => logger.warn({ key, uploadId: id, err: describeError(e) }, 'could not abort the OSS multipart upload'));
      }
    }
    throw opts.signal?.aborted ? abortReason(opts.signal) : failure !== undefined && isAbortLike(err) ? failure.error : err;
  } finally {
    opts.signal?.removeEventListener('abort', onAbort);
    pool.release();
  }
}

function isAbortLike(err: unknown): boolean {
  return err instanceof Error && err.name === 'AbortError';
}

/** One part with upstream's retries on network errors and 5xx answers; returns its ETag. */
async function uploadPart(
  client: OssApi,
  key: string,
  uploadId: string,
  number: number,
  body: Buffer,
  opts: OssUploadOptions,
  signal: AbortSignal,
): Promise<string> {
  for (let attempt = 0; ; attempt++) {
    if (signal.aborted) throw abortReason(signal);
    try {
      return (await client.uploadPart(key, uploadId, number, body, 0, body.length)).etag;
    } catch (err) {
      const { status } = ossErrorInfo(err);
      const retryable = !signal.aborted && (status === 0 || status >= 500 || status === 429);
      if (!retryable || attempt >= opts.partRetries) throw err;
      const delay = opts.retryBaseDelayMs * 2 ** attempt;
      opts.logger.warn({ key, part: number, attempt: attempt + 1, err: describeError(err) }, `part upload failed; retrying in ${delay} ms`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, delay);
        signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
      });
    }
  }
}

function toBuffer(piece: unknown): Buffer {
  if (Buffer.isBuffer(piece)) return piece;
  if (piece instanceof Uint8Array) return Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength);
  if (typeof piece === 'string') return Buffer.from(piece);
  throw new SnapStoreError('E_SAVE_FAILED', `snapshot stream yielded ${typeof piece}, expected bytes`);
}
