/**
 * Streaming S3 upload with a fixed set of part buffers (replaces @aws-sdk/lib-storage's `Upload`).
 *
 * lib-storage concatenates a fresh buffer for every part, so its memory is bounded only by when the
 * garbage collector gets round to the old ones (~80 MB above baseline for 1 GiB at 5 x 5 MiB). Here
 * one upload never holds more than `concurrency + 1` buffers of `partSize` (one being filled, the
 * rest in flight); input chunks are copied into them and they are reused part after part. While no
 * buffer is free the input is not read, so a slow store slows the producer (etcd's stream) down
 * instead of growing memory.
 *
 * Flow: fill the first buffer; an input that ends before it is full goes up as one PutObject.
 * Otherwise CreateMultipartUpload (sent when the first part is full, in parallel with reading the
 * second), UploadPart of exactly `partSize` bytes (the last one shorter), each retried on its own
 * with exponential backoff (upstream: after 1, 2, 4, 8, 16 s), then CompleteMultipartUpload with the
 * parts in order. Any failure or abort cancels the requests in flight, sends AbortMultipartUpload
 * (best effort; a failure there is logged) and rejects with an {@link UploadFailedError} that says
 * whether the input, the caller's signal or S3 caused it.
 */
import { Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  ChecksumAlgorithm,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  PutObjectCommand,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import type { CompletedPart, PutObjectCommandInput, S3Client, UploadPartCommandInput } from '@aws-sdk/client-s3';
import type { Logger } from '../logger.js';
import { InternalError, TimeoutError } from '../internal-errors.js';
import { abortReason, describeError } from './common.js';
import { PartBufferPool } from './part-buffers.js';
import type { IdleBuffers } from './part-buffers.js';

/** S3's limit on the number of parts of one multipart upload. */
export const MAX_PARTS = 10_000;

export interface PartRetryPolicy {
  /** Retries after the first attempt (upstream: 5). */
  retries: number;
  /** Delay before retry i (0-based) is `baseDelayMs * 2^i` (upstream: 1000, i.e. 1, 2, 4, 8, 16 s). */
  baseDelayMs: number;
  /** One attempt of one part may take this long (upstream `chunkUploadTimeout` = 180 s). */
  timeoutMs: number;
}

export const DEFAULT_PART_RETRY: PartRetryPolicy = { retries: 5, baseDelayMs: 1000, timeoutMs: 180_000 };

/** Server-side encryption with a customer key: sent with every request that writes object data. */
export interface WriteParams {
  SSECustomerAlgorithm?: string;
  SSECustomerKey?: string;
  SSECustomerKeyMD5?: string;
}

export interface StreamUploadOptions {
  client: S3Client;
  bucket: string;
  key: string;
  /** Size of every part but the last (>= 5 MiB for real S3). */
  partSize: number;
  /** UploadPart requests in flight at most (`--max-parallel-chunk-uploads`). */
  concurrency: number;
  writeParams?: WriteParams;
  /**
   * Send part and object bodies over https with `x-amz-content-sha256: UNSIGNED-PAYLOAD` instead of
   * their SHA-256 (plain-http requests keep the hash: there it is the body's only protection). TLS
   * protects the body in transit and S3 still checks the CRC32 checksum. Saves a SHA-256 pass over
   * every byte on the main thread (about 3.5 CPU s per GiB here), as aws-cli does.
   */
  unsignedPayload?: boolean;
  retry?: PartRetryPolicy;
  /** Aborting rejects the upload unless CompleteMultipartUpload (or the single PutObject) was already sent. */
  signal?: AbortSignal;
  logger: Logger;
  /** `s3://bucket/key`, for log messages. */
  where?: string;
  /** Part buffers left by earlier uploads of the same store, taken before allocating and refilled at the end. */
  idleBuffers?: IdleBuffers;
}

export interface StreamUploadResult {
  bytes: number;
  /** Parts of the multipart upload; 0 when the object went up as a single PutObject. */
  parts: number;
  /** Part buffers this upload allocated; never more than `concurrency + 1`. */
  buffersAllocated: number;
  /** Part (or PutObject) attempts that failed and were retried. */
  retries: number;
}

export type UploadFailureOrigin = 'input' | 'aborted' | 's3';

/** Why an upload failed; `cause` is the original error, `origin` where it came from. */
export class UploadFailedError extends InternalError {
  override readonly name = 'UploadFailedError';
  constructor(
    readonly origin: UploadFailureOrigin,
    override readonly cause: unknown,
  ) {
    super('E_UPLOAD_FAILED', describeError(cause), { cause });
  }
}

/** Uploads `input` to `bucket/key`; the object exists only if this resolves. */
export async function uploadStream(input: Readable, opts: StreamUploadOptions): Promise<StreamUploadResult> {
  const { client, bucket, key, partSize, logger } = opts;
  const concurrency = Math.max(1, Math.floor(opts.concurrency));
  const retry = opts.retry ?? DEFAULT_PART_RETRY;
  const writeParams = opts.writeParams ?? {};
  const where = opts.where ?? `s3://${bucket}/${key}`;
  const signal = opts.signal;

  // Cancels requests in flight and backoff sleeps once anything failed.
  const cancel = new AbortController();
  let failure: UploadFailedError | undefined;
  const fail = (origin: UploadFailureOrigin, err: unknown): void => {
    if (failure) return;
    failure = err instanceof UploadFailedError ? err : new UploadFailedError(origin, err);
    cancel.abort();
    // Unblocks a read that waits for input; no error argument, so the input's own error handlers see no error of ours.
    if (!input.destroyed) input.destroy();
  };
  const onAbort = (): void => fail('aborted', abortReason(signal as AbortSignal));
  if (signal?.aborted) onAbort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  const detachSignal = (): void => signal?.removeEventListener('abort', onAbort);

  const pool = new PartBufferPool(partSize, concurrency + 1, opts.idleBuffers);
  const inflight = new Set<Promise<void>>();
  const completed: CompletedPart[] = [];
  let retries = 0;
  let partNumber = 0;
  let bytes = 0;
  let uploadId: Promise<string> | undefined;

  const signed = <C extends UploadPartCommand | PutObjectCommand>(cmd: C): C =>
    withSlicedTlsBody(opts.unsignedPayload ? withUnsignedPayload(cmd) : cmd);

  const attempt = <T>(what: string, run: (s: AbortSignal) => Promise<T>): Promise<T> =>
    withRetry(what, retry, cancel.signal, logger, where, run, () => retries++);

  const checksumAlgorithm = async (): Promise<ChecksumAlgorithm | undefined> =>
    // As lib-storage does: declare CRC32 up front when the client adds checksums to every part, so
    // S3 can combine them; with when_required the parts carry none and neither does the upload.
    (await client.config.requestChecksumCalculation()) === 'WHEN_SUPPORTED' ? ChecksumAlgorithm.CRC32 : undefined;

  const createUpload = async (): Promise<string> => {
    const algorithm = await checksumAlgorithm();
    // Not cancellable: if it succeeds after a failure we still need its id to abort it.
    const out = await client.send(
      new CreateMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        ...writeParams,
        ...(algorithm ? { ChecksumAlgorithm: algorithm } : {}),
      }),
    );
    if (!out.UploadId) throw new InternalError('E_BAD_ANSWER', 'CreateMultipartUpload returned no UploadId');
    return out.UploadId;
  };

  const uploadPart = async (n: number, body: Buffer): Promise<void> => {
    const id = await (uploadId as Promise<string>);
    const input: UploadPartCommandInput = { Bucket: bucket, Key: key, UploadId: id, PartNumber: n, Body: body, ...writeParams };
    const out = await attempt(`part ${n}`, (s) => client.send(signed(new UploadPartCommand(input)), { abortSignal: s }));
    if (!out.ETag) throw new InternalError('E_BAD_ANSWER', `UploadPart ${n} returned no ETag`);
    completed[n - 1] = {
      PartNumber: n,
      ETag: out.ETag,
      ...(out.ChecksumCRC32 ? { ChecksumCRC32: out.ChecksumCRC32 } : {}),
      ...(out.ChecksumCRC32C ? { ChecksumCRC32C: out.ChecksumCRC32C } : {}),
      ...(out.ChecksumCRC64NVME ? { ChecksumCRC64NVME: out.ChecksumCRC64NVME } : {}),
      ...(out.ChecksumSHA1 ? { ChecksumSHA1: out.ChecksumSHA1 } : {}),
      ...(out.ChecksumSHA256 ? { ChecksumSHA256: out.ChecksumSHA256 } : {}),
    };
  };

  /** Starts uploading `body` (a view of `owner`) once a slot is free; `owner` returns to the pool when it settled. */
  const dispatch = async (body: Buffer, owner: Buffer): Promise<void> => {
    while (inflight.size >= concurrency && !failure) await Promise.race(inflight);
    if (failure) {
      pool.give(owner);
      return;
    }
    const n = ++partNumber;
    if (n > MAX_PARTS) {
      pool.give(owner);
      fail('s3', new InternalError('E_TOO_LARGE', `object exceeds ${MAX_PARTS} parts of ${partSize} bytes; raise --min-chunk-size`));
      return;
    }
    if (!uploadId) {
      uploadId = createUpload();
      uploadId.catch(() => undefined); // observed by every part and by the cleanup
    }
    const p: Promise<void> = uploadPart(n, body)
      .catch((err: unknown) => fail('s3', err))
      .finally(() => {
        inflight.delete(p);
        pool.give(owner);
      });
    inflight.add(p);
  };

  const settle = async (): Promise<void> => {
    while (inflight.size > 0) await Promise.race(inflight);
  };

  try {
    // undefined once handed to dispatch on a failure: dispatch has given it back already.
    let buf: Buffer | undefined = pool.take();
    let filled = 0;
    try {
      read: for await (const raw of input) {
        const chunk: Buffer = Buffer.isBuffer(raw) ? raw : Buffer.from(raw as Uint8Array);
        for (let off = 0; off < chunk.length;) {
          const n = chunk.copy(buf, filled, off);
          filled += n;
          off += n;
          bytes += n;
          if (filled === partSize) {
            await dispatch(buf, buf);
            filled = 0;
            if (failure) {
              buf = undefined;
              break read;
            }
            buf = pool.take();
          }
        }
        if (failure) break;
      }
    } catch (err) {
      fail('input', err); // a no-op when the read failed because we destroyed the input
    }

    if (!failure && partNumber === 0 && buf) {
      // Input ended within the first part: one PutObject. It is the commit, so the caller's signal no longer applies.
      detachSignal();
      const body = buf.subarray(0, filled);
      const algorithm = await checksumAlgorithm();
      try {
        const input: PutObjectCommandInput = {
          Bucket: bucket,
          Key: key,
          Body: body,
          ...writeParams,
          ...(algorithm ? { ChecksumAlgorithm: algorithm } : {}),
        };
        await attempt('object', (s) => client.send(signed(new PutObjectCommand(input)), { abortSignal: s }));
      } catch (err) {
        fail('s3', err);
        throw failure ?? err;
      } finally {
        pool.give(buf); // the request has ended either way
      }
      return { bytes, parts: 0, buffersAllocated: pool.allocated, retries };
    }

    if (buf && !failure && filled > 0) await dispatch(buf.subarray(0, filled), buf);
    else if (buf) pool.give(buf);
    await settle();

    if (!failure) {
      detachSignal(); // from here on the upload commits; an abort now comes too late
      try {
        await client.send(
          new CompleteMultipartUploadCommand({
            Bucket: bucket,
            Key: key,
            UploadId: await (uploadId as Promise<string>),
            MultipartUpload: { Parts: completed },
            ...writeParams,
          }),
        );
        return { bytes, parts: partNumber, buffersAllocated: pool.allocated, retries };
      } catch (err) {
        fail('s3', err);
      }
    }

    await settle();
    await abortUpload(client, bucket, key, uploadId, logger, where);
    throw failure as UploadFailedError;
  } finally {
    detachSignal();
    // Only buffers no request can still read may serve another upload; an unexpected throw with requests
    // in flight leaves them all to the garbage collector instead.
    if (inflight.size === 0) pool.release();
    else pool.abandon();
  }
}

/**
 * The SigV4 signer takes a preset x-amz-content-sha256 header as the payload hash instead of hashing
 * the body; set before the signing step, and only on requests that really go out over https (the
 * endpoint may also come from the SDK's own configuration, e.g. AWS_ENDPOINT_URL).
 */
function withUnsignedPayload<C extends UploadPartCommand | PutObjectCommand>(cmd: C): C {
  (cmd.middlewareStack as { add(mw: unknown, opts: { step: 'build'; name: string }): void }).add(
    (next: (args: { request: unknown }) => Promise<unknown>) => async (args: { request: unknown }) => {
      const req = args.request as { protocol?: string; headers?: Record<string, string> };
      if (req.protocol === 'https:' && req.headers) req.headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
      return next(args);
    },
    { step: 'build', name: 'etcdbrUnsignedPayload' },
  );
  return cmd;
}

/**
 * Slices a TLS body is written in: TLS then holds at most about this much ciphertext per request
 * (measured here: 64 KiB to 1 MiB all save ~33 MB at 5 x 5 MiB; smaller slices cost time).
 */
const TLS_SLICE = 512 * 1024;

/**
 * Over https a Buffer body is encrypted in one go into the TLS socket's buffer, a second copy of every
 * part in flight (~25 MB more RSS at 5 x 5 MiB). Handing the SDK a stream of slices instead lets TLS
 * encrypt as the socket drains. Done per attempt, after the SDK's retry and signing steps, on a copy of
 * the request: a retry starts from the intact Buffer, and checksum and Content-Length were computed from
 * it in the build step.
 */
function withSlicedTlsBody<C extends UploadPartCommand | PutObjectCommand>(cmd: C): C {
  (cmd.middlewareStack as { add(mw: unknown, opts: { step: 'finalizeRequest'; priority: 'low'; name: string }): void }).add(
    (next: (args: { request: unknown }) => Promise<unknown>) => async (args: { request: unknown }) => {
      const req = args.request as { protocol?: string; body?: unknown };
      if (req.protocol !== 'https:' || !Buffer.isBuffer(req.body) || req.body.length <= TLS_SLICE) return next(args);
      return next({ ...args, request: { ...req, body: sliced(req.body) } });
    },
    { step: 'finalizeRequest', priority: 'low', name: 'etcdbrSlicedTlsBody' },
  );
  return cmd;
}

function sliced(buf: Buffer): Readable {
  let offset = 0;
  return new Readable({
    highWaterMark: TLS_SLICE,
    read() {
      if (offset >= buf.length) {
        this.push(null);
        return;
      }
      const end = Math.min(offset + TLS_SLICE, buf.length);
      this.push(buf.subarray(offset, end));
      offset = end;
    },
  });
}

/** Best effort: a failure here leaves parts behind (until a lifecycle rule removes them) and is logged, not thrown. */
async function abortUpload(
  client: S3Client,
  bucket: string,
  key: string,
  uploadId: Promise<string> | undefined,
  logger: Logger,
  where: string,
): Promise<void> {
  if (!uploadId) return;
  let id: string;
  try {
    id = await uploadId;
  } catch {
    return; // never created
  }
  try {
    await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: id }));
  } catch (err) {
    logger.warn(
      { err: describeError(err), key: where, uploadId: id },
      'cleanup of the failed multipart upload failed; parts may remain until the bucket lifecycle rule for incomplete uploads removes them',
    );
  }
}

/**
 * Runs `run` until it succeeds, `policy.retries` retries are used up, the error is one that a retry
 * cannot fix, or `cancelled` aborts. Each attempt gets its own timeout. This sits above the SDK's
 * own quick retries (maxAttempts) and covers outages of seconds, as upstream's chunk retry does.
 */
async function withRetry<T>(
  what: string,
  policy: PartRetryPolicy,
  cancelled: AbortSignal,
  logger: Logger,
  where: string,
  run: (signal: AbortSignal) => Promise<T>,
  onRetry: () => void,
): Promise<T> {
  for (let i = 0; ; i++) {
    // One controller per attempt, released as soon as the attempt settles (AbortSignal.timeout would keep
    // a timer and the signal alive for the whole timeout, once per part).
    const attempt = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      attempt.abort();
    }, policy.timeoutMs);
    const propagate = (): void => attempt.abort(cancelled.reason);
    cancelled.addEventListener('abort', propagate, { once: true });
    let caught: unknown;
    try {
      return await run(attempt.signal);
    } catch (err) {
      caught = err;
    } finally {
      clearTimeout(timer);
      cancelled.removeEventListener('abort', propagate);
    }
    if (cancelled.aborted) throw caught;
    const err = timedOut ? timeoutError(what, policy.timeoutMs, caught) : caught;
    if (i >= policy.retries || !retryable(err)) throw err;
    const delay = policy.baseDelayMs * 2 ** i;
    onRetry();
    logger.warn({ err: describeError(err), key: where, attempt: i + 1, delayMs: delay }, `upload of ${what} failed; retrying`);
    await sleep(delay, cancelled);
    if (cancelled.aborted) throw err;
  }
}

function timeoutError(what: string, ms: number, cause: unknown): TimeoutError {
  return new TimeoutError(`upload of ${what} took longer than ${ms} ms`, { cause });
}

/** 4xx answers that describe a passing condition; every other 4xx (denied, no such upload, bad request) is final. */
const TRANSIENT_4XX = new Set([
  'RequestTimeout',
  'RequestTimeTooSkewed',
  'ExpiredToken',
  'TokenRefreshRequired',
  'BadDigest',
  'IncompleteBody',
  'XAmzContentSHA256Mismatch',
  'SlowDown',
]);

function retryable(err: unknown): boolean {
  const status = httpStatus(err);
  if (status === undefined || status < 400 || status >= 500) return true;
  return status === 408 || status === 429 || TRANSIENT_4XX.has(errorName(err));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** The S3 error code (`Code` of the XML answer) or the error's name. */
export function errorName(err: unknown): string {
  if (err && typeof err === 'object') {
    const e = err as { name?: unknown; Code?: unknown };
    if (typeof e.Code === 'string') return e.Code;
    if (typeof e.name === 'string') return e.name;
  }
  return '';
}

export function httpStatus(err: unknown): number | undefined {
  const s = (err as { $metadata?: { httpStatusCode?: unknown } } | undefined)?.$metadata?.httpStatusCode;
  return typeof s === 'number' ? s : undefined;
}
