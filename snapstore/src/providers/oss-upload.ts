/**
 * Streaming upload of one OSS object through ali-oss: the OSS calls of the multipart-upload engine
 * (multipart-upload.ts), with the parts in memory (memory-parts.ts).
 *
 * Upstream spools the snapshot to a temp file and splits it into parts of `max(minChunkSize, size/9999)`.
 * We stream instead, as the other providers do: parts of `partSize` (`--min-chunk-size`) are cut from the
 * input into at most `concurrency + 1` reused buffers, so a slow store slows the producer down instead of
 * growing memory. Input that ends inside the first part goes up as one PutObject. Otherwise
 * InitiateMultipartUpload (when the first part is full), UploadPart per part with upstream's retries (after
 * 1, 2, 4, 8, 16 s), CompleteMultipartUpload with the parts in order. Any failure or abort waits for the
 * parts in flight (ali-oss cannot cancel a request) and sends AbortMultipartUpload, so nothing is
 * committed and no parts are left.
 */
import type { Readable } from 'node:stream';
import type { Logger } from '../logger.js';
import { describeError } from './common.js';
import { MemoryParts } from './memory-parts.js';
import { uploadInParts, type MultipartAdapter } from './multipart-upload.js';
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

/** Uploads `data` to `key`; the object exists only if this resolves. Rejects with an UploadFailedError. */
export async function uploadOssObject(data: Readable, opts: OssUploadOptions): Promise<OssUploadResult> {
  const concurrency = Math.max(1, Math.floor(opts.concurrency));
  const pool = new PartBufferPool(opts.partSize, concurrency + 1, opts.idle);
  const { bytes, parts } = await uploadInParts(data, ossCalls(opts.client, opts.key, opts.logger), new MemoryParts(pool), {
    partSize: opts.partSize,
    concurrency,
    maxParts: OSS_MAX_PARTS,
    retry: { retries: opts.partRetries, baseDelayMs: opts.retryBaseDelayMs },
    ...(opts.signal ? { signal: opts.signal } : {}),
    logger: opts.logger,
    where: opts.key,
  });
  return { bytes, parts };
}

/** The OSS requests of one upload; ali-oss takes no signal, so a request under way is waited for. */
function ossCalls(client: OssApi, key: string, logger: Logger): MultipartAdapter<Buffer, string, { number: number; etag: string }> {
  return {
    begin: async () => (await client.initMultipartUpload(key)).uploadId,
    putPart: async (uploadId, number, body) => ({
      number,
      etag: (await client.uploadPart(key, uploadId, number, body, 0, body.length)).etag,
    }),
    commit: async (uploadId, parts) => void (await client.completeMultipartUpload(key, uploadId, parts)),
    discard: async (uploadId) => {
      if (uploadId === undefined) return;
      await client
        .abortMultipartUpload(key, uploadId)
        .catch((e: unknown) => logger.warn({ key, uploadId, err: describeError(e) }, 'could not abort the OSS multipart upload'));
    },
    putWhole: async (body) => void (await client.put(key, body)),
    // Upstream's retries on network errors and 5xx answers.
    retryable: (err) => {
      const { status } = ossErrorInfo(err);
      return status === 0 || status >= 500 || status === 429;
    },
  };
}
