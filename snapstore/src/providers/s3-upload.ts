/**
 * Streaming S3 upload through part files (replaces @aws-sdk/lib-storage's `Upload`): the S3 calls of the
 * multipart-upload engine (multipart-upload.ts), with the parts in the snapstore temp directory
 * (spooled-parts.ts).
 *
 * Each part is written to a file as its bytes arrive, its CRC32 and, where the signature covers the body,
 * its SHA-256 computed on the way; the file is then sent as the part's body, read afresh for every attempt
 * (s3-request-body.ts). An input that ends within the first part goes up from memory as one PutObject and
 * touches no disk. Otherwise CreateMultipartUpload (sent when the first part is written, in parallel with
 * writing the second), UploadPart of exactly `partSize` bytes (the last one shorter), each retried on its
 * own with exponential backoff (upstream: after 1, 2, 4, 8, 16 s), then CompleteMultipartUpload with the
 * parts in order. Any failure or abort cancels the requests in flight, sends AbortMultipartUpload (best
 * effort; a failure there is logged) and rejects with an {@link UploadFailedError} that says whether the
 * input, the caller's signal, the spool directory or S3 caused it. No part file outlives the upload.
 */
import { createHash } from 'node:crypto';
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
import { InternalError } from '../internal-errors.js';
import { describeError } from './common.js';
import { uploadInParts, type MultipartAdapter } from './multipart-upload.js';
import { BodyBufferPool } from './part-file-body.js';
import { crc32Base64, type PartFile } from './part-file.js';
import { EMPTY_BODY, withFileBody, withPayloadHash } from './s3-request-body.js';
import { SpooledParts } from './spooled-parts.js';
import { DEFAULT_PART_RETRY, type PartRetryPolicy } from './upload-retry.js';

export { DEFAULT_PART_RETRY, type PartRetryPolicy } from './upload-retry.js';
export { UploadFailedError, type UploadFailureOrigin } from './upload-failed.js';

/** S3's limit on the number of parts of one multipart upload. */
export const MAX_PARTS = 10_000;

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

/** Uploads `input` to `bucket/key`; the object exists only if this resolves. */
export async function uploadStream(input: Readable, opts: StreamUploadOptions): Promise<StreamUploadResult> {
  const { client, logger } = opts;
  const where = opts.where ?? `s3://${opts.bucket}/${opts.key}`;
  // As lib-storage does: declare CRC32 up front when the client adds checksums to every part, so
  // S3 can combine them; with when_required the parts carry none and neither does the upload.
  const crc = (await client.config.requestChecksumCalculation()) === 'WHEN_SUPPORTED';
  // The signature covers the body's SHA-256 over plain http always, and over https unless unsignedPayload.
  const signBody = !opts.unsignedPayload || (await endpointIsPlainHttp(client));
  const parts = new SpooledParts(opts.spoolDir, { crc32: crc, sha256: signBody }, logger);
  const bodyBuffers = new BodyBufferPool();
  try {
    const r = await uploadInParts(input, s3Calls(opts, where, crc, signBody, bodyBuffers), parts, {
      partSize: opts.partSize,
      concurrency: opts.concurrency,
      maxParts: MAX_PARTS,
      retry: opts.retry ?? DEFAULT_PART_RETRY,
      logger,
      where,
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return { ...r, maxPartFiles: parts.maxFiles };
  } finally {
    bodyBuffers.release();
  }
}

/** Whether the client sends to a configured plain-http endpoint (AWS's own endpoints are https). */
async function endpointIsPlainHttp(client: S3Client): Promise<boolean> {
  const endpoint = (client.config as { endpoint?: () => Promise<{ protocol?: string }> }).endpoint;
  if (typeof endpoint !== 'function') return false;
  return (await endpoint()).protocol === 'http:';
}

/** The S3 requests of one upload: parts are part files, the upload is its UploadId. */
function s3Calls(
  opts: StreamUploadOptions,
  where: string,
  crc: boolean,
  signBody: boolean,
  bodyBuffers: BodyBufferPool,
): MultipartAdapter<PartFile, string, CompletedPart> {
  const { client, logger } = opts;
  const target = { Bucket: opts.bucket, Key: opts.key };
  const writeParams = opts.writeParams ?? {};
  return {
    // Not cancellable: if it succeeds after a failure we still need its id to abort it.
    async begin() {
      const out = await client.send(
        new CreateMultipartUploadCommand({ ...target, ...writeParams, ...(crc ? { ChecksumAlgorithm: ChecksumAlgorithm.CRC32 } : {}) }),
      );
      if (!out.UploadId) throw new InternalError('E_BAD_ANSWER', 'CreateMultipartUpload returned no UploadId');
      return out.UploadId;
    },

    async putPart(uploadId, n, part, abortSignal) {
      const req: UploadPartCommandInput = {
        ...target,
        UploadId: uploadId,
        PartNumber: n,
        Body: EMPTY_BODY, // the file, opened afresh for every attempt by withFileBody
        ContentLength: part.size,
        ...(part.crc32 ? { ChecksumCRC32: part.crc32 } : {}),
        ...writeParams,
      };
      const out = await client.send(withFileBody(withPayloadHash(new UploadPartCommand(req), part.sha256), part, bodyBuffers), {
        abortSignal,
      });
      if (!out.ETag) throw new InternalError('E_BAD_ANSWER', `UploadPart ${n} returned no ETag`);
      return {
        PartNumber: n,
        ETag: out.ETag,
        ...(out.ChecksumCRC32 ? { ChecksumCRC32: out.ChecksumCRC32 } : {}),
        ...(out.ChecksumCRC32C ? { ChecksumCRC32C: out.ChecksumCRC32C } : {}),
        ...(out.ChecksumCRC64NVME ? { ChecksumCRC64NVME: out.ChecksumCRC64NVME } : {}),
        ...(out.ChecksumSHA1 ? { ChecksumSHA1: out.ChecksumSHA1 } : {}),
        ...(out.ChecksumSHA256 ? { ChecksumSHA256: out.ChecksumSHA256 } : {}),
      };
    },

    async commit(uploadId, completed) {
      await client.send(
        new CompleteMultipartUploadCommand({ ...target, UploadId: uploadId, MultipartUpload: { Parts: completed }, ...writeParams }),
      );
    },

    /** Best effort: a failure here leaves parts behind (until a lifecycle rule removes them) and is logged, not thrown. */
    async discard(uploadId) {
      if (uploadId === undefined) return; // never created
      try {
        await client.send(new AbortMultipartUploadCommand({ ...target, UploadId: uploadId }));
      } catch (err) {
        logger.warn(
          { err: describeError(err), key: where, uploadId },
          'cleanup of the failed multipart upload failed; parts may remain until the bucket lifecycle rule for incomplete uploads removes them',
        );
      }
    },

    async putWhole(body, abortSignal) {
      const req: PutObjectCommandInput = {
        ...target,
        Body: body,
        ContentLength: body.length,
        ...(crc ? { ChecksumCRC32: crc32Base64(crc32(body)) } : {}),
        ...writeParams,
      };
      const sha256 = signBody ? createHash('sha256').update(body).digest('hex') : undefined;
      await client.send(withPayloadHash(new PutObjectCommand(req), sha256), { abortSignal });
    },

    retryable,
  };
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
