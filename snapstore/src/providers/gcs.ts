/**
 * Google Cloud Storage provider (upstream `pkg/snapstore/gcs_snapstore.go`).
 *
 * Upstream spools the snapshot to a temp file, uploads it as chunk objects `<name>/%010d` and
 * composes them. We stream instead: input that fits in one chunk goes up in a single multipart
 * request, anything larger through one resumable upload session in chunks of `minChunkSize`
 * (rounded up to GCS's 256 KiB granularity). Either way the object appears only when the last byte
 * is in; a failed or aborted save destroys the upload and cancels its session, so nothing is
 * finalized and no chunk objects exist to clean up. Chunk objects written by upstream are still
 * listed (as chunks), so the chunk garbage collection (upstream `GarbageCollectChunks`) can remove them.
 */
import { Readable, addAbortSignal } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { IdempotencyStrategy, Storage } from '@google-cloud/storage';
import type { Bucket, File, StorageOptions } from '@google-cloud/storage';
import type { GcsStoreConfig } from '../config.js';
import { SnapStoreError, isSnapStoreError } from '../errors.js';
import { InternalError } from '../internal-errors.js';
import type { Logger } from '../logger.js';
import { silentLogger } from '../logger.js';
import { listedObjectKey, listingPrefix, objectKey, tryParseSnapshotKey } from '../snapshot.js';
import { sortSnapshots } from '../snapshot-order.js';
import type { Snapshot } from '../snapshot.js';
import type { ByteRange, FetchOptions, ListOptions, SaveOptions, SnapStore } from '../store.js';
import { DEFAULT_FETCH_STALL_MS, guardedFetch } from './fetch-guard.js';
import {
  type StoreFailureCode,
  abortReason,
  classifyStoreFailure,
  describeError,
  isAbortError,
  isNetworkError,
  saveFailed,
} from './common.js';

/** Custom metadata key that hides a snapshot from everything but garbage collection. */
export const GCS_EXCLUDE_METADATA = 'x-etcd-snapshot-exclude';

/** Resumable upload chunks must be multiples of 256 KiB (except the last). */
const CHUNK_GRANULARITY = 256 * 1024;
const CONTENT_TYPE = 'application/octet-stream';

export interface GcsRetryOptions {
  /** Retries after the first attempt. */
  maxRetries?: number;
  /** Seconds. */
  maxRetryDelay?: number;
  /** Seconds for all attempts of one call. */
  totalTimeout?: number;
  retryDelayMultiplier?: number;
}

/** Knobs that are not part of the store configuration; the factory uses the defaults. */
export interface GcsStoreOptions {
  /**
   * Defaults (the library's): 3 retries with delays of about 2, 4 and 8 s (so an unreachable
   * endpoint is reported after about 15 s), at most 16 s apart and 600 s per call. Retried: 408,
   * 429, 5xx, connection resets and failed connections.
   */
  retry?: GcsRetryOptions;
  /** Per-request timeout in ms (default 180 s, upstream `chunkUploadTimeout`). */
  timeoutMs?: number;
}

/** The endpoint the client talks to: the override, the deprecated `storageAPIEndpoint` file, or GCS. */
export function gcsEndpoint(config: Pick<GcsStoreConfig, 'endpointOverride' | 'credentials'>): string | undefined {
  const e = config.endpointOverride || config.credentials?.storageAPIEndpoint?.trim() || undefined;
  return e?.replace(/\/+$/, '');
}

export async function openGcsStore(config: GcsStoreConfig, options: GcsStoreOptions = {}): Promise<SnapStore> {
  if (!config.container) throw new SnapStoreError('E_CONFIG', 'GCS bucket name is empty');
  const endpoint = gcsEndpoint(config);
  if (endpoint !== undefined) {
    try {
      const u = new URL(endpoint);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new InternalError('E_BAD_INPUT', `unsupported scheme ${u.protocol}`);
    } catch (err) {
      throw new SnapStoreError('E_CONFIG', `GCS endpoint ${JSON.stringify(endpoint)} is not a valid http(s) URL`, { cause: err });
    }
  }
  // Upstream: an http:// endpoint is an emulator (fake-gcs-server) and is used without authentication.
  const emulator = endpoint?.startsWith('http://') ?? false;
  const creds = config.credentials;
  const projectId = creds?.projectId ?? stringField(creds?.json, 'project_id') ?? stringField(creds?.json, 'quota_project_id');
  const storageOptions: StorageOptions = {
    ...(endpoint !== undefined ? { apiEndpoint: endpoint, useAuthWithCustomEndpoint: !emulator } : {}),
    ...(projectId !== undefined ? { projectId } : {}),
    ...(!emulator && creds?.json ? { credentials: creds.json } : {}),
    ...(!emulator && !creds?.json && creds?.keyFile ? { keyFilename: creds.keyFile } : {}),
    retryOptions: {
      // The library reads `maxRetries: 0` as "use the default (3)"; only autoRetry turns retries off.
      autoRetry: (options.retry?.maxRetries ?? 3) > 0,
      maxRetries: options.retry?.maxRetries ?? 3,
      maxRetryDelay: options.retry?.maxRetryDelay ?? 16,
      totalTimeout: options.retry?.totalTimeout ?? 600,
      retryDelayMultiplier: options.retry?.retryDelayMultiplier ?? 2,
      // Saving a whole object and deleting one are safe to repeat for us, so retry them too.
      idempotencyStrategy: IdempotencyStrategy.RetryAlways,
    },
    timeout: options.timeoutMs ?? 180_000,
    userAgent: 'etcdbrctl',
  };
  let storage: Storage;
  try {
    storage = new Storage(storageOptions);
  } catch (err) {
    throw new SnapStoreError('E_CREDENTIALS', `GCS client could not be created: ${describeError(err)}`, { cause: err });
  }
  return new GcsSnapStore(config, storage, endpoint ?? 'https://storage.googleapis.com');
}

function stringField(obj: Record<string, unknown> | undefined, key: string): string | undefined {
  const v = obj?.[key];
  return typeof v === 'string' && v !== '' ? v : undefined;
}

class GcsSnapStore implements SnapStore {
  readonly provider = 'GCS' as const;
  readonly prefix: string;
  private readonly logger: Logger;
  private readonly bucket: Bucket;
  private readonly chunkSize: number;
  /** Names bucket and endpoint in every message. */
  private readonly where: string;
  private readonly stallMs: number;
  private closed = false;

  constructor(
    config: GcsStoreConfig,
    private readonly storage: Storage,
    endpoint: string,
  ) {
    this.prefix = config.prefix;
    this.logger = config.logger ?? silentLogger;
    this.bucket = storage.bucket(config.container);
    if (!Number.isSafeInteger(config.minChunkSize) || config.minChunkSize <= 0) {
      throw new SnapStoreError('E_CONFIG', `GCS chunk size (min chunk size) ${config.minChunkSize} is not a positive integer`);
    }
    this.chunkSize = Math.ceil(config.minChunkSize / CHUNK_GRANULARITY) * CHUNK_GRANULARITY;
    this.where = `GCS bucket ${config.container} at ${endpoint}`;
    this.stallMs = config.fetchStallTimeoutMs ?? DEFAULT_FETCH_STALL_MS;
  }

  async list(options?: ListOptions): Promise<Snapshot[]> {
    this.assertOpen();
    const prefix = listingPrefix(this.prefix);
    let files: File[];
    try {
      [files] = await this.bucket.getFiles({ ...(prefix !== '' ? { prefix } : {}), autoPaginate: true });
    } catch (err) {
      throw this.mapError(err, `objects under ${JSON.stringify(prefix)}`, 'list');
    }
    const snaps: Snapshot[] = [];
    for (const f of files) {
      const md = f.metadata;
      if (!options?.includeExcluded && md.metadata?.[GCS_EXCLUDE_METADATA] === 'true') {
        this.logger.info({ key: f.name }, `Ignoring snapshot due to the ${GCS_EXCLUDE_METADATA} metadata`);
        continue;
      }
      const snap = tryParseSnapshotKey(f.name, this.logger);
      if (!snap) continue;
      const size = Number(md.size);
      if (md.size !== undefined && Number.isFinite(size)) snap.sizeBytes = size;
      if (md.retentionExpirationTime) {
        const t = new Date(md.retentionExpirationTime);
        if (!Number.isNaN(t.getTime())) snap.immutabilityExpiryTime = t;
      }
      snaps.push(snap);
    }
    return sortSnapshots(snaps);
  }

  async fetch(snap: Snapshot, range?: ByteRange, options?: FetchOptions): Promise<Readable> {
    this.assertOpen();
    const key = listedObjectKey(snap);
    return guardedFetch(
      async (signal) => {
        const stream = this.bucket.file(key).createReadStream({
          // The payload carries its own hashes; JS CRC32C would cap downloads near 100 MB/s.
          validation: false,
          decompress: false,
          ...(range ? { start: range.start, ...(range.end !== undefined ? { end: range.end } : {}) } : {}),
        });
        try {
          await responseArrived(stream, signal);
        } catch (err) {
          if (signal.aborted) {
            abandonBeforeResponse(stream);
            throw signal.reason as Error;
          }
          stream.destroy();
          throw this.mapError(err, `object ${key}`, 'fetch');
        }
        return stream;
      },
      { what: `fetch object ${key}`, store: this.where, stallMs: this.stallMs },
      options,
    );
  }

  async save(snap: Snapshot, data: Readable, options?: SaveOptions): Promise<void> {
    this.assertOpen();
    const key = objectKey(this.prefix, snap);
    const what = `snapshot ${key} to ${this.where}`;
    const signal = options?.signal;
    const file = this.bucket.file(key);
    let sessionUri: string | undefined;
    let uploadError: unknown;
    let inputError: unknown;
    data.once('error', (e: unknown) => {
      inputError = e;
    });
    // Destroys the input on the caller's abort or an upload failure, so a stalled input cannot
    // keep the pipeline (and this save) waiting.
    const inner = new AbortController();
    const onAbort = (): void => inner.abort(signal ? abortReason(signal) : undefined);
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      if (signal?.aborted) throw abortReason(signal);
      addAbortSignal(inner.signal, data);
      const source = data[Symbol.asyncIterator]() as AsyncIterator<unknown>;
      const head = await readHead(source, this.chunkSize);
      if (head.ended) {
        // One request for small objects (most delta snapshots); it is all-or-nothing by itself.
        await file.save(head.bytes, { resumable: false, validation: false, metadata: { contentType: CONTENT_TYPE } });
        return;
      }
      // The session is opened first so that its URI is known before any byte goes out; the library
      // may otherwise still open it and send a buffered chunk after the stream was destroyed.
      [sessionUri] = await file.createResumableUpload({ metadata: { contentType: CONTENT_TYPE } });
      if (signal?.aborted) throw abortReason(signal);
      const upload = file.createWriteStream({
        uri: sessionUri,
        offset: 0,
        resumable: true,
        chunkSize: this.chunkSize,
        validation: false,
        metadata: { contentType: CONTENT_TYPE },
      });
      // Stays attached: a destroyed upload can still emit late errors, which must not go unhandled.
      upload.on('error', (e: unknown) => {
        uploadError ??= e;
        inner.abort();
      });
      // Once this resolves the object is finalized; a late abort can no longer undo it.
      await pipeline(Readable.from(prepend(head.bytes, source)), upload, { signal: inner.signal });
    } catch (err) {
      inner.abort();
      data.destroy();
      if (sessionUri !== undefined) await this.cancelSession(sessionUri);
      // Our own abort after an upload failure hides the failure; report that instead.
      const cause = signal?.aborted ? abortReason(signal) : isAbortError(err) && uploadError !== undefined ? uploadError : err;
      throw saveFailed(this.mapSaveError(cause, key, inputError), what);
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  async delete(snap: Snapshot): Promise<void> {
    this.assertOpen();
    const key = listedObjectKey(snap);
    try {
      await this.bucket.file(key).delete();
    } catch (err) {
      throw this.mapError(err, `object ${key}`, 'delete');
    }
  }

  async close(): Promise<void> {
    // The client keeps no connections that need closing beyond idle keep-alive sockets.
    this.closed = true;
  }

  /**
   * Ends an unfinished resumable session (documented: DELETE on the session URI, answered 499).
   * Unfinalized sessions are never visible and expire after a week anyway; this just ends them now.
   */
  private async cancelSession(uri: string): Promise<void> {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 10_000);
      try {
        this.storage.request({ method: 'DELETE', uri }, () => {
          clearTimeout(timer);
          resolve();
        });
      } catch {
        clearTimeout(timer);
        resolve();
      }
    });
  }

  private assertOpen(): void {
    if (this.closed) throw new SnapStoreError('E_CONFIG', `${this.where}: store is closed`);
  }

  /** Errors of a save that are about the store itself keep their code; the rest become E_SAVE_FAILED. */
  private mapSaveError(err: unknown, key: string, inputError: unknown): unknown {
    if (err === inputError || isAbortError(err) || isSnapStoreError(err)) return err;
    const mapped = this.mapError(err, `object ${key}`, 'save');
    return mapped.code === 'E_UNREACHABLE' || mapped.code === 'E_CREDENTIALS' || mapped.code === 'E_IMMUTABLE' ? mapped : err;
  }

  private mapError(err: unknown, subject: string, op: string): SnapStoreError {
    if (isSnapStoreError(err)) return err;
    const status = httpStatus(err);
    const message = firstLine(describeError(err));
    const detail = `${op} ${subject} in ${this.where} failed: ${message}`;
    if (status === undefined) {
      if (isNetworkError(err) || isAbortError(err)) {
        return new SnapStoreError('E_UNREACHABLE', `${this.where} is unreachable (${op} ${subject}): ${message}`, { cause: err });
      }
      if (AUTH_MESSAGE.test(message)) {
        return new SnapStoreError('E_CREDENTIALS', `GCS credentials are unusable (${op} ${subject} in ${this.where}): ${message}`, {
          cause: err,
        });
      }
      return new SnapStoreError('E_UNREACHABLE', detail, { cause: err });
    }
    // The JSON API's error reasons are generic (`forbidden`, `notFound`), so the message tells retention and a
    // missing bucket apart.
    const vendorCode =
      (status === 403 || status === 412) && RETENTION_MESSAGE.test(message)
        ? 'retention'
        : status === 404 && /bucket/i.test(message) && !/object/i.test(message)
          ? 'noSuchBucket'
          : undefined;
    switch (classifyStoreFailure({ status, vendorCode }, GCS_VENDOR_CODES)) {
      case 'E_IMMUTABLE':
        return new SnapStoreError('E_IMMUTABLE', `${subject} in ${this.where} is protected by retention or a hold: ${message}`, {
          cause: err,
        });
      case 'E_NOT_FOUND':
        return new SnapStoreError('E_NOT_FOUND', `${subject} not found in ${this.where}`, { cause: err });
      case 'E_CREDENTIALS':
        return new SnapStoreError('E_CREDENTIALS', `GCS rejected the credentials (HTTP ${status}): ${detail}`, { cause: err });
      case 'E_UNREACHABLE':
        return new SnapStoreError('E_UNREACHABLE', `${detail} (HTTP ${status} after retries)`, { cause: err });
      case 'E_CONFIG':
        return new SnapStoreError(
          'E_CONFIG',
          `${detail} (${vendorCode === 'noSuchBucket' ? 'the bucket does not exist' : `HTTP ${status}`})`,
          {
            cause: err,
          },
        );
    }
  }
}

const GCS_VENDOR_CODES: ReadonlyMap<string, StoreFailureCode> = new Map<string, StoreFailureCode>([
  ['retention', 'E_IMMUTABLE'],
  ['noSuchBucket', 'E_CONFIG'],
]);

/** GCS's messages for deletes or overwrites refused by a retention policy, object retention or hold. */
const RETENTION_MESSAGE = /retention policy|object retention|active (temporary|event-based) hold/i;
/** google-auth-library failures that are about the credentials, not the network. */
const AUTH_MESSAGE = /credential|client_email|private_key|invalid_grant|unauthori[sz]ed|access token|token/i;

/** HTTP status of an ApiError (`code`) or a GaxiosError (`response.status`, `status`). */
function httpStatus(err: unknown): number | undefined {
  const e = err as { code?: unknown; status?: unknown; response?: { status?: unknown } } | null;
  for (const c of [e?.code, e?.response?.status, e?.status]) {
    if (typeof c === 'number' && c >= 100 && c < 600) return c;
  }
  return undefined;
}

function firstLine(s: string): string {
  const i = s.indexOf('\n');
  return i < 0 ? s : s.slice(0, i);
}

/**
 * Starts a read stream from the library and waits until the server answered, so that a missing
 * object rejects `fetch` itself instead of erroring the returned stream later. The library sends
 * the request on the first read and turns error statuses into a stream error after the response.
 * The signal ends the wait (the stream is then the caller's to abandon).
 */
function responseArrived(stream: Readable, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const cleanup = (): void => {
      stream.off('response', onResponse);
      stream.off('error', onError);
      signal.removeEventListener('abort', onAbort);
    };
    const onError = (err: unknown): void => {
      cleanup();
      reject(err);
    };
    const onAbort = (): void => onError(signal.reason);
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    const onResponse = (res: { statusCode?: number; status?: number }): void => {
      const status = res.statusCode ?? res.status ?? 200;
      // Error statuses are followed by an 'error' event carrying the API error.
      if (status < 300) {
        cleanup();
        resolve();
      }
    };
    stream.on('response', onResponse);
    stream.on('error', onError);
    // Triggers the request without consuming data.
    stream.read(0);
  });
}

/**
 * Lets go of a library read stream whose answer has not arrived. Destroying it now is what the library cannot
 * take: when the answer comes it pipes the response into the destroyed stream, and that throws out of its
 * response handler (ERR_STREAM_UNABLE_TO_PIPE) as an unhandled rejection, which ends the process. It has no way
 * to cancel its request either, so the stream is destroyed just after the answer is wired into it (closing the
 * connection), or ends with the request's own error or timeout; errors until then are swallowed here.
 */
function abandonBeforeResponse(stream: Readable): void {
  stream.on('error', () => undefined);
  stream.once('response', () => process.nextTick(() => stream.destroy()));
}

/** Reads from `source` until `limit` bytes are collected or it ends. */
async function readHead(source: AsyncIterator<unknown>, limit: number): Promise<{ bytes: Buffer; ended: boolean }> {
  const pieces: Buffer[] = [];
  let size = 0;
  while (size < limit) {
    const next = await source.next();
    if (next.done) return { bytes: Buffer.concat(pieces, size), ended: true };
    const piece = toBuffer(next.value);
    pieces.push(piece);
    size += piece.length;
  }
  return { bytes: Buffer.concat(pieces, size), ended: false };
}

async function* prepend(head: Buffer, rest: AsyncIterator<unknown>): AsyncGenerator<Buffer> {
  if (head.length > 0) yield head;
  for (;;) {
    const next = await rest.next();
    if (next.done) return;
    yield toBuffer(next.value);
  }
}

function toBuffer(piece: unknown): Buffer {
  if (Buffer.isBuffer(piece)) return piece;
  if (piece instanceof Uint8Array) return Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength);
  if (typeof piece === 'string') return Buffer.from(piece);
  throw new InternalError('E_BAD_INPUT', `snapshot stream yielded ${typeof piece}, expected bytes`);
}
