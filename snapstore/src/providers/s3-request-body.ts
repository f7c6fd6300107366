/**
 * How an S3 part or object request gets its body and the hash its signature covers, set on the command's
 * middleware stack so that neither the SDK's signer nor its retries read the body more than once.
 */
import type { PutObjectCommand, UploadPartCommand } from '@aws-sdk/client-s3';
import { PartFileBody, type BodyBufferPool } from './part-file-body.js';
import type { PartFile } from './part-file.js';

/** A placeholder body: the request gets the part file's stream in `withFileBody`. */
export const EMPTY_BODY = Buffer.alloc(0);

/**
 * The payload hash the signature covers, preset so the signer never hashes the (placeholder) body: the
 * part's SHA-256 when one was computed, else UNSIGNED-PAYLOAD (https only, where TLS protects the body and
 * S3 checks its CRC32).
 */
export function withPayloadHash<C extends UploadPartCommand | PutObjectCommand>(cmd: C, sha256: string | undefined): C {
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
export function withFileBody<C extends UploadPartCommand | PutObjectCommand>(cmd: C, part: PartFile, buffers: BodyBufferPool): C {
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
