/**
 * Streaming S3 upload through part files (replaces @aws-sdk/lib-storage's `Upload`).
 *
 * Each part is written to a file in `spoolDir` as its bytes arrive (part-file.ts), its CRC32 and, where the
 * signature covers the body, its SHA-256 computed on the way; the file is then sent as the part's body, read
 * afresh for every attempt. At most `concurrency` parts are in flight and one more is being written; while
 * no slot is free the input is not read, so a slow store slows the producer (etcd's stream) down instead of
 * filling the disk. Part buffers in memory (lib-storage, and this module until 2026-11) held
 * `concurrency + 1` parts, 30 MiB at the default 5 in flight of 5 MiB: more than the pod's memory could spare.
 *
 * Flow: the first part is held in memory until it is full; an input that ends within it (a delta snapshot,
 * most copied objects) goes up from there as one PutObject and touches no disk. Otherwise CreateMultipartUpload
 * (sent when the first part is written, in parallel with writing the second), UploadPart of exactly
 * `partSize` bytes (the last one shorter), each retried on its own with exponential backoff (upstream: after
 * 1, 2, 4, 8, 16 s), then CompleteMultipartUpload with the parts in order. Any failure or abort cancels the
 * requests in flight, sends AbortMultipartUpload (best effort; a failure there is logged) and rejects with an
 * {@link UploadFailedError} that says whether the input, the caller's signal, the spool directory or S3 caused
 * it. No part file outlives the upload.
 */
import { createHash } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { crc32 } from 'node:zlib';
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
import { BodyBufferPool, PartFileBody } from './part-file-body.js';
import { PartFileWriter, STAGING_BYTES, crc32Base64, type PartFile } from './part-file.js';
import { spoolFilesFor } from '../spool-files.js';

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
  /**
   * Where parts wait for their upload (`--snapstore-temp-directory`, created when first needed, as upstream
   * creates it). Holds at most `concurrency + 1` part files of this upload at a time.
   */
  spoolDir: string;
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
}

export interface StreamUploadResult {
  bytes: number;
  /** Parts of the multipart upload; 0 when the object went up as a single PutObject. */
  parts: number;
  /** Part files on disk at once at most; never more than `concurrency + 1`. */
  maxPartFiles: number;
  /** Part (or PutObject) attempts that failed and were retried. */
  retries: number;
}

/** Where the upload failed: its input, the caller's signal, S3, or writing a part to the spool directory. */
export type UploadFailureOrigin = 'input' | 'aborted' | 's3' | 'spool';

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

/** Whether the client sends to a configured plain-http endpoint (AWS's own endpoints are https). */
async function endpointIsPlainHttp(client: S3Client): Promise<boolean> {
  const endpoint = (client.config as { endpoint?: () => Promise<{ protocol?: string }> }).endpoint;
  if (typeof endpoint !== 'function') return false;
  return (await endpoint()).protocol === 'http:';
}

/** Uploads `input` to `bucket/key`; the object exists only if this resolves. */
export async function uploadStream(input: Readable, opts: StreamUploadOptions): Promise<StreamUploadResult> {
  const { client, bucket, key, partSize, logger, spoolDir } = opts;
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

  const inflight = new Set<Promise<void>>();
  const bodyBuffers = new BodyBufferPool();
  const completed: CompletedPart[] = [];
  let retries = 0;
  let partNumber = 0;
  let bytes = 0;
  let files = 0;
  let maxPartFiles = 0;
  let uploadId: Promise<string> | undefined;

  const checksumAlgorithm = async (): Promise<ChecksumAlgorithm | undefined> =>
    // As lib-storage does: declare CRC32 up front when the client adds checksums to every part, so
    // S3 can combine them; with when_required the parts carry none and neither does the upload.
    (await client.config.requestChecksumCalculation()) === 'WHEN_SUPPORTED' ? ChecksumAlgorithm.CRC32 : undefined;
  const algorithm = await checksumAlgorithm();
  // The signature covers the body's SHA-256 over plain http always, and over https unless unsignedPayload.
  const signBody = !opts.unsignedPayload || (await endpointIsPlainHttp(client));

  const attempt = <T>(what: string, run: (s: AbortSignal) => Promise<T>): Promise<T> =>
    withRetry(what, retry, cancel.signal, logger, where, run, () => retries++);

  const createUpload = async (): Promise<string> => {
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

  const spoolError = (err: unknown): InternalError =>
    new InternalError('E_SPOOL', `cannot write an upload part to the snapstore temp directory ${spoolDir}: ${describeError(err)}`, {
      cause: err,
    });

  // One staging buffer for the whole upload (only one part is written at a time), made when the first file is.
  let staging: Buffer | undefined;
  // Named so that an initialization can tell this process's parts from a killed one's (spool-files.ts).
  let spoolReady: Promise<(part: number) => string> | undefined;
  let fileSeq = 0;
  const openPart = async (): Promise<PartFileWriter> => {
    spoolReady ??= mkdir(spoolDir, { recursive: true }).then(() => spoolFilesFor(spoolDir));
    const spoolFile = await spoolReady;
    staging ??= Buffer.allocUnsafe(STAGING_BYTES);
    const w = await PartFileWriter.create(spoolFile(++fileSeq), staging, {
      crc32: algorithm === ChecksumAlgorithm.CRC32,
      sha256: signBody,
    });
    maxPartFiles = Math.max(maxPartFiles, ++files);
    return w;
  };
  const removePart = async (path: string): Promise<void> => {
    files--;
    await rm(path, { force: true }).catch((err: unknown) =>
      logger.warn({ err: describeError(err), file: path }, 'could not remove a part file after its upload'),
    );
  };

  const uploadPart = async (n: number, part: PartFile): Promise<void> => {
    const id = await (uploadId as Promise<string>);
    const req: UploadPartCommandInput = {
      Bucket: bucket,
      Key: key,
      UploadId: id,
      PartNumber: n,
      Body: EMPTY_BODY, // the file, opened afresh for every attempt by withFileBody
      ContentLength: part.size,
      ...(part.crc32 ? { ChecksumCRC32: part.crc32 } : {}),
      ...writeParams,
    };
    const out = await attempt(`part ${n}`, (s) =>
      client.send(withFileBody(withPayloadHash(new UploadPartCommand(req), part.sha256), part, bodyBuffers), { abortSignal: s }),
    );
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

  /** Starts uploading a written part once a slot is free; its file goes when the part has settled. */
  const dispatch = async (part: PartFile): Promise<void> => {
    while (inflight.size >= concurrency && !failure) await Promise.race(inflight);
    const n = ++partNumber;
    if (!failure && n > MAX_PARTS) {
      fail('s3', new InternalError('E_TOO_LARGE', `object exceeds ${MAX_PARTS} parts of ${partSize} bytes; raise --min-chunk-size`));
    }
    if (failure) {
      await removePart(part.path);
      return;
    }
    if (!uploadId) {
      uploadId = createUpload();
      uploadId.catch(() => undefined); // observed by every part and by the cleanup
    }
    const p: Promise<void> = uploadPart(n, part)
      .catch((err: unknown) => fail('s3', err))
      .finally(async () => {
        await removePart(part.path);
        inflight.delete(p);
      });
    inflight.add(p);
  };

  const settle = async (): Promise<void> => {
    while (inflight.size > 0) await Promise.race(inflight);
  };

  /** The part being written; undefined once it was sealed or discarded. */
  let writer: PartFileWriter | undefined;
  /** Sends the part being written once it is full and opens the next one; false when that failed. */
  const rollOver = async (): Promise<boolean> => {
    const w = writer as PartFileWriter;
    if (w.bytes < partSize) return true;
    let part: PartFile;
    try {
      part = await w.finish();
    } catch (err) {
      fail('spool', spoolError(err));
      return false;
    }
    writer = undefined;
    await dispatch(part);
    if (failure) return false;
    try {
      writer = await openPart();
    } catch (err) {
      fail('spool', spoolError(err));
      return false;
    }
    return true;
  };

  // The first part waits in memory while it may still be the whole object: a delta snapshot, or most objects
  // a copy sends, goes up as one PutObject and touches no disk. Copies: the producer may reuse its chunks.
  let head: Buffer[] | undefined = [];
  let headBytes = 0;
  try {
    try {
      read: for await (const raw of input) {
        if (failure) break;
        const chunk: Buffer = Buffer.isBuffer(raw) ? raw : Buffer.from(raw as Uint8Array);
        for (let off = 0; off < chunk.length;) {
          if (head) {
            const n = Math.min(partSize - headBytes, chunk.length - off);
            head.push(Buffer.from(chunk.subarray(off, off + n)));
            headBytes += n;
            off += n;
            bytes += n;
            if (headBytes < partSize) continue;
            // Larger than one part: from here on the object goes through part files, its first part included.
            const first = head;
            head = undefined;
            try {
              writer = await openPart();
              for (const c of first) await writer.append(c);
            } catch (err) {
              fail('spool', spoolError(err));
              break read;
            }
          } else {
            const w = writer as PartFileWriter;
            const n = Math.min(partSize - w.bytes, chunk.length - off);
            try {
              await w.append(off === 0 && n === chunk.length ? chunk : chunk.subarray(off, off + n));
            } catch (err) {
              fail('spool', spoolError(err));
              break read;
            }
            off += n;
            bytes += n;
          }
          if (!(await rollOver())) break read;
        }
      }
    } catch (err) {
      fail('input', err); // a no-op when the read failed because we destroyed the input
    }

    if (!failure && head) {
      // Input ended within the first part: one PutObject. It is the commit, so the caller's signal no longer applies.
      detachSignal();
      const body = Buffer.concat(head, headBytes);
      head = undefined;
      const req: PutObjectCommandInput = {
        Bucket: bucket,
        Key: key,
        Body: body,
        ContentLength: body.length,
        ...(algorithm === ChecksumAlgorithm.CRC32 ? { ChecksumCRC32: crc32Base64(crc32(body)) } : {}),
        ...writeParams,
      };
      const sha256 = signBody ? createHash('sha256').update(body).digest('hex') : undefined;
      try {
        await attempt('object', (s) => client.send(withPayloadHash(new PutObjectCommand(req), sha256), { abortSignal: s }));
      } catch (err) {
        fail('s3', err);
        throw failure ?? err;
      }
      return { bytes, parts: 0, maxPartFiles, retries };
    }

    let last: PartFile | undefined;
    if (writer && !failure) {
      try {
        last = await writer.finish();
        writer = undefined;
      } catch (err) {
        fail('spool', spoolError(err));
      }
    }

    if (last && !failure && last.size > 0) await dispatch(last);
    else if (last) await removePart(last.path);
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
        return { bytes, parts: partNumber, maxPartFiles, retries };
      } catch (err) {
        fail('s3', err);
      }
    }

    await settle();
    await abortUpload(client, bucket, key, uploadId, logger, where);
    throw failure as UploadFailedError;
  } finally {
    detachSignal();
    bodyBuffers.release();
    if (writer) {
      files--;
      await writer.discard();
    }
  }
}

/** A placeholder body: the request gets the part file's stream in `withFileBody`. */
const EMPTY_BODY = Buffer.alloc(0);

/**
 * The payload hash the signature covers, preset so the signer never hashes the (placeholder) body: the
 * part's SHA-256 when one was computed, else UNSIGNED-PAYLOAD (https only, where TLS protects the body and
 * S3 checks its CRC32).
 */
function withPayloadHash<C extends UploadPartCommand | PutObjectCommand>(cmd: C, sha256: string | undefined): C {
  (cmd.middlewareStack as { add(mw: unknown, opts: { step: 'build'; name: string }): void }).add(
    (next: (args: { request: unknown }) => Promise<unknown>) => async (args: { request: unknown }) => {
      const req = args.request as { headers?: Record<string, string> };
      if (req.headers) req.headers['x-amz-content-sha256'] = sha256 ?? 'UNSIGNED-PAYLOAD';
      return next(args);
    },
    { step: 'build', name: 'etcdbrPayloadHash' },
  );
  return cmd;
}

/**
 * Sends the part file as the body, opened afresh for every attempt: after the SDK's retry and signing steps,
 * on a copy of the request, so a retry (the SDK's own included) reads the file from its start. A stream an
 * attempt left unread is closed when the attempt ends. The body reads the file into buffers of the upload's
 * pool, each reused once the request has written it (part-file-body.ts).
 */
function withFileBody<C extends UploadPartCommand | PutObjectCommand>(cmd: C, part: PartFile, buffers: BodyBufferPool): C {
  (cmd.middlewareStack as { add(mw: unknown, opts: { step: 'finalizeRequest'; priority: 'low'; name: string }): void }).add(
    (next: (args: { request: unknown }) => Promise<unknown>) => async (args: { request: unknown }) => {
      const body = new PartFileBody(part.path, part.size, buffers);
      try {
        return await next({ ...args, request: { ...(args.request as object), body } });
      } finally {
        body.destroy();
      }
    },
    { step: 'finalizeRequest', priority: 'low', name: 'etcdbrFileBody' },
  );
  return cmd;
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
