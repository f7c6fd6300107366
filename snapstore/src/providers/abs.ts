/**
 * Azure Blob Storage provider (upstream `pkg/snapstore/abs_snapstore.go`).
 *
 * A save streams the input into blocks of exactly `minChunkSize` bytes (upstream's fixed ABS chunk
 * size) through the multipart-upload engine (multipart-upload.ts), stages up to `maxParallelChunkUploads`
 * of them at once and commits the block list only when the input ended cleanly, so the blob appears whole
 * or not at all. Memory stays bounded at `maxParallelChunkUploads + 1` blocks, reused block after block
 * and lent between the overlapping saves of one store (part-buffers.ts); nothing is spooled to disk
 * (upstream writes a temp file first).
 */
import path from 'node:path';
import type { Readable } from 'node:stream';
import { ContainerClient, StorageSharedKeyCredential } from '@azure/storage-blob';
import type { BlockBlobClient, StoragePipelineOptions } from '@azure/storage-blob';
import type { AbsStoreConfig } from '../config.js';
import { SnapStoreError, isSnapStoreError } from '../errors.js';
import { InternalError } from '../internal-errors.js';
import type { Logger } from '../logger.js';
import { silentLogger } from '../logger.js';
import { listedObjectKey, listingPrefix, objectKey, tryParseSnapshotKey } from '../snapshot.js';
import { sortSnapshots } from '../snapshot-order.js';
import type { Snapshot } from '../snapshot.js';
import type { ByteRange, FetchOptions, ListOptions, SaveOptions, SnapStore } from '../store.js';
import { type StoreFailureCode, classifyStoreFailure, describeError, isAbortError, isNetworkError, saveFailed } from './common.js';
import { DEFAULT_FETCH_STALL_MS, guardedFetch } from './fetch-guard.js';
import { MemoryParts } from './memory-parts.js';
import { uploadInParts, type MultipartAdapter } from './multipart-upload.js';
import { IdleBuffers, PartBufferPool } from './part-buffers.js';
import { UploadFailedError } from './upload-failed.js';
import { NO_PART_RETRY } from './upload-retry.js';

/** Blob index tag that hides a snapshot from everything but garbage collection. */
export const ABS_EXCLUDE_TAG = 'x-etcd-snapshot-exclude';

const DEFAULT_DOMAIN = 'blob.core.windows.net';
/** Azure's limit of committed blocks per block blob. */
const MAX_BLOCKS = 50_000;
/** How long a failed save lets its in-flight block uploads finish before cancelling them. */
const STAGE_DRAIN_MS = 10_000;
/** Upstream `providerConnectionTimeout`: how long the container check at open may take. */
const OPEN_TIMEOUT_MS = 30_000;

export interface AbsRetryOptions {
  maxTries?: number;
  retryDelayInMs?: number;
  maxRetryDelayInMs?: number;
  /** Per try, until response headers arrive (a download body is not limited by it). */
  tryTimeoutInMs?: number;
}

/** Knobs that are not part of the store configuration; the factory uses the defaults. */
export interface AbsStoreOptions {
  /**
   * Defaults (the SDK's, plus a try timeout): 4 tries, waiting 0, 4 and 12 s between them (so an
   * unreachable endpoint is reported after about 16 s, like GCS), 180 s per try (upstream
   * `chunkUploadTimeout`).
   */
  retry?: AbsRetryOptions;
  /** Check at open that the container exists, as upstream does. Default true. */
  verifyContainer?: boolean;
  /** Where block buffers wait between saves; by default one save's worth per store. For tests. */
  idleBlocks?: IdleBuffers;
}

const DEFAULT_RETRY: Required<AbsRetryOptions> = {
  maxTries: 4,
  retryDelayInMs: 4_000,
  maxRetryDelayInMs: 120_000,
  tryTimeoutInMs: 180_000,
};

/**
 * The container URL: `https://<account>.<domain>/<container>`, or upstream's
 * `url.JoinPath(endpointOverride, container)`; for Azurite the override is the path-style account
 * endpoint `http://127.0.0.1:10000/devstoreaccount1`.
 */
export function absContainerUrl(config: Pick<AbsStoreConfig, 'container' | 'endpointOverride' | 'credentials'>): string {
  if (config.endpointOverride !== undefined && config.endpointOverride !== '') {
    let url: URL;
    try {
      url = new URL(config.endpointOverride);
    } catch (err) {
      throw new SnapStoreError('E_CONFIG', `ABS endpoint override ${JSON.stringify(config.endpointOverride)} is not a valid URL`, {
        cause: err,
      });
    }
    url.pathname = path.posix.join(url.pathname || '/', config.container);
    return url.toString();
  }
  const domain = config.credentials.domain || DEFAULT_DOMAIN;
  return `https://${config.credentials.storageAccount}.${domain}/${config.container}`;
}

export async function openAbsStore(config: AbsStoreConfig, options: AbsStoreOptions = {}): Promise<SnapStore> {
  const creds = config.credentials as Partial<AbsStoreConfig['credentials']> | undefined;
  if (!creds?.storageAccount || !creds.storageKey) {
    throw new SnapStoreError('E_CREDENTIALS', 'ABS credentials need both storageAccount and storageKey');
  }
  if (!config.container) throw new SnapStoreError('E_CONFIG', 'ABS container name is empty');
  const url = absContainerUrl(config);
  let credential: StorageSharedKeyCredential;
  try {
    credential = new StorageSharedKeyCredential(creds.storageAccount, creds.storageKey);
  } catch (err) {
    throw new SnapStoreError('E_CREDENTIALS', `ABS shared key for account ${creds.storageAccount} is unusable: ${describeError(err)}`, {
      cause: err,
    });
  }
  const pipelineOptions: StoragePipelineOptions = {
    retryOptions: { ...DEFAULT_RETRY, ...options.retry },
    userAgentOptions: { userAgentPrefix: 'etcdbrctl' },
  };
  const client = new ContainerClient(url, credential, pipelineOptions);
  const store = new AbsSnapStore(config, client, url, options.idleBlocks);
  if (options.verifyContainer ?? true) await store.verifyContainer();
  return store;
}

class AbsSnapStore implements SnapStore {
  readonly provider = 'ABS' as const;
  readonly prefix: string;
  private readonly logger: Logger;
  private readonly blockSize: number;
  private readonly parallel: number;
  /** One save's worth of block buffers, kept between saves (see IdleBuffers). */
  private readonly idleBlocks: IdleBuffers;
  private closed = false;

  constructor(
    private readonly config: AbsStoreConfig,
    private readonly client: ContainerClient,
    /** Names the endpoint in every message. */
    private readonly url: string,
    idleBlocks?: IdleBuffers,
  ) {
    this.prefix = config.prefix;
    this.logger = config.logger ?? silentLogger;
    this.blockSize = config.minChunkSize;
    this.parallel = Math.max(1, Math.floor(config.maxParallelChunkUploads));
    if (!Number.isSafeInteger(this.blockSize) || this.blockSize <= 0) {
      throw new SnapStoreError('E_CONFIG', `ABS block size (min chunk size) ${config.minChunkSize} is not a positive integer`);
    }
    this.idleBlocks = idleBlocks ?? new IdleBuffers(this.parallel + 1);
  }

  async verifyContainer(): Promise<void> {
    try {
      await this.client.getProperties({ abortSignal: AbortSignal.timeout(OPEN_TIMEOUT_MS) });
    } catch (err) {
      if (restCode(err) === 'ContainerNotFound') {
        throw new SnapStoreError('E_CONFIG', `container ${this.config.container} does not exist (${this.url})`, { cause: err });
      }
      if (isAbortError(err)) {
        throw new SnapStoreError('E_UNREACHABLE', `ABS container ${this.url} did not answer within ${OPEN_TIMEOUT_MS / 1000} s`, {
          cause: err,
        });
      }
      throw this.mapError(err, `container ${this.config.container}`, 'check');
    }
  }

  async list(options?: ListOptions): Promise<Snapshot[]> {
    this.assertOpen();
    const prefix = listingPrefix(this.prefix);
    const snaps: Snapshot[] = [];
    try {
      const items = this.client.listBlobsFlat({
        ...(prefix !== '' ? { prefix } : {}),
        includeMetadata: true,
        includeTags: true,
        includeImmutabilityPolicy: true,
      });
      for await (const item of items) {
        if (!options?.includeExcluded && item.tags?.[ABS_EXCLUDE_TAG] === 'true') {
          this.logger.info({ key: item.name }, `Ignoring snapshot due to the ${ABS_EXCLUDE_TAG} tag`);
          continue;
        }
        const snap = tryParseSnapshotKey(item.name, this.logger);
        if (!snap) continue;
        if (item.properties.contentLength !== undefined) snap.sizeBytes = item.properties.contentLength;
        const expiry = item.properties.immutabilityPolicyExpiresOn;
        if (expiry) snap.immutabilityExpiryTime = expiry;
        snaps.push(snap);
      }
    } catch (err) {
      throw this.mapError(err, `blobs under ${JSON.stringify(prefix)}`, 'list');
    }
    return sortSnapshots(snaps);
  }

  async fetch(snap: Snapshot, range?: ByteRange, options?: FetchOptions): Promise<Readable> {
    this.assertOpen();
    const key = listedObjectKey(snap);
    const start = range?.start ?? 0;
    const count = range?.end !== undefined ? range.end - start + 1 : undefined;
    return guardedFetch(
      async (abortSignal) => {
        try {
          // The SDK resumes a broken body from where it stopped (same ETag) up to this many times.
          const res = await this.client.getBlobClient(key).download(start, count, { maxRetryRequests: 5, abortSignal });
          const body = res.readableStreamBody;
          if (!body) throw new InternalError('E_BAD_ANSWER', 'download returned no body');
          return body as Readable;
        } catch (err) {
          throw this.mapError(err, `blob ${key}`, 'fetch');
        }
      },
      {
        what: `fetch blob ${key}`,
        store: `the ABS container ${this.url}`,
        stallMs: this.config.fetchStallTimeoutMs ?? DEFAULT_FETCH_STALL_MS,
      },
      options,
    );
  }

  async save(snap: Snapshot, data: Readable, options?: SaveOptions): Promise<void> {
    this.assertOpen();
    const key = objectKey(this.prefix, snap);
    // Staged blocks in flight plus the one being filled; a block goes back once its request settled.
    const pool = new PartBufferPool(this.blockSize, this.parallel + 1, this.idleBlocks);
    try {
      await uploadInParts(data, this.blockCalls(this.client.getBlockBlobClient(key)), new MemoryParts(pool), {
        partSize: this.blockSize,
        concurrency: this.parallel,
        maxParts: MAX_BLOCKS,
        // The SDK retries every request itself (`retry` of AbsStoreOptions).
        retry: NO_PART_RETRY,
        // Cancelling a stage request whose body already reached the server does not undo it: on failure they
        // are first given time to finish, and only then is the uncommitted blob deleted.
        drainMs: STAGE_DRAIN_MS,
        ...(options?.signal ? { signal: options.signal } : {}),
        logger: this.logger,
        where: key,
      });
    } catch (err) {
      const cause = err instanceof UploadFailedError ? err.cause : err;
      throw saveFailed(this.mapSaveError(cause, key), `snapshot ${key} to ABS container ${this.url}`);
    }
  }

  /**
   * A blob's block calls: staged blocks named with upstream's IDs, committed as one block list only when
   * the input ended cleanly, so the blob appears whole or not at all. The upload is whether a committed blob
   * was under the key before.
   */
  private blockCalls(blob: BlockBlobClient): MultipartAdapter<Buffer, boolean, string> {
    return {
      begin: (signal) => this.exists(blob, signal),
      async putPart(_committedBefore, n, bytes, abortSignal) {
        const id = blockId(n);
        await blob.stageBlock(id, bytes, bytes.length, { abortSignal });
        return id;
      },
      async commit(_committedBefore, ids) {
        await blob.commitBlockList(ids, { blobHTTPHeaders: { blobContentType: 'application/octet-stream' } });
      },
      // Staged blocks of a blob that has no committed version form an invisible "uncommitted blob";
      // deleting it drops them at once instead of after Azure's 7 days. With a committed blob under
      // the key we must not delete: its uncommitted blocks go with the next commit or after 7 days.
      async discard(committedBefore) {
        if (committedBefore === false) await blob.delete().catch(() => undefined);
      },
      retryable: () => false,
    };
  }

  async delete(snap: Snapshot): Promise<void> {
    this.assertOpen();
    const key = listedObjectKey(snap);
    try {
      await this.client.getBlobClient(key).delete({ deleteSnapshots: 'include' });
    } catch (err) {
      throw this.mapError(err, `blob ${key}`, 'delete');
    }
  }

  async close(): Promise<void> {
    // The SDK holds no resources that need releasing beyond idle keep-alive sockets.
    this.closed = true;
  }

  private async exists(blob: BlockBlobClient, abortSignal: AbortSignal): Promise<boolean> {
    try {
      await blob.getProperties({ abortSignal });
      return true;
    } catch (err) {
      if (restStatus(err) === 404) return false;
      throw err;
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new SnapStoreError('E_CONFIG', `ABS store ${this.url} is closed`);
  }

  /** Errors of a save that are about the store itself keep their code; the rest become E_SAVE_FAILED. */
  private mapSaveError(err: unknown, key: string): unknown {
    if (isAbortError(err) || isSnapStoreError(err)) return err;
    const status = restStatus(err);
    if (status === undefined && !isRestError(err)) return err; // the input stream failed
    const mapped = this.mapError(err, `blob ${key}`, 'save');
    const keep = mapped.code === 'E_UNREACHABLE' || mapped.code === 'E_CREDENTIALS' || mapped.code === 'E_IMMUTABLE';
    return keep || restCode(err) === 'ContainerNotFound' ? mapped : err;
  }

  private mapError(err: unknown, subject: string, op: string): SnapStoreError {
    if (isSnapStoreError(err)) return err;
    const status = restStatus(err);
    const code = restCode(err);
    const where = `${subject} in ABS container ${this.url}`;
    const detail = `${op} ${where} failed: ${firstLine(describeError(err))}`;
    if (status === undefined) {
      if (isAbortError(err)) return new SnapStoreError('E_UNREACHABLE', `${op} ${where} timed out or was aborted`, { cause: err });
      if (isNetworkError(err) || isRestError(err)) {
        return new SnapStoreError(
          'E_UNREACHABLE',
          `ABS endpoint ${this.url} is unreachable (${op} ${subject}): ${firstLine(describeError(err))}`,
          {
            cause: err,
          },
        );
      }
      return new SnapStoreError('E_UNREACHABLE', detail, { cause: err });
    }
    const vendorCode = code?.startsWith('BlobImmutable') ? 'BlobImmutable' : code;
    switch (classifyStoreFailure({ status, vendorCode }, ABS_VENDOR_CODES)) {
      case 'E_IMMUTABLE':
        return new SnapStoreError('E_IMMUTABLE', `${subject} is protected by an immutability policy (${code}): cannot ${op} it`, {
          cause: err,
        });
      case 'E_NOT_FOUND':
        return new SnapStoreError('E_NOT_FOUND', `${subject} not found in ABS container ${this.url}`, { cause: err });
      case 'E_CREDENTIALS':
        return new SnapStoreError(
          'E_CREDENTIALS',
          `ABS rejected the credentials of account ${this.config.credentials.storageAccount} (${code ?? status}): ${detail}`,
          { cause: err },
        );
      case 'E_UNREACHABLE':
        return new SnapStoreError('E_UNREACHABLE', `${detail} (HTTP ${status} after retries)`, { cause: err });
      case 'E_CONFIG':
        return code === 'ContainerNotFound'
          ? new SnapStoreError('E_CONFIG', `container ${this.config.container} does not exist (${this.url})`, { cause: err })
          : new SnapStoreError('E_CONFIG', `${detail} (HTTP ${status}${code ? ` ${code}` : ''})`, { cause: err });
    }
  }
}

/** Azure error codes that say more than their status (every `BlobImmutable…` code is folded into one). */
const ABS_VENDOR_CODES: ReadonlyMap<string, StoreFailureCode> = new Map<string, StoreFailureCode>([
  ['BlobImmutable', 'E_IMMUTABLE'],
  ['ContainerNotFound', 'E_CONFIG'],
]);

/** Upstream block IDs: base64 of the 1-based part number as `%010d`. */
export function blockId(partNumber: number): string {
  return Buffer.from(String(partNumber).padStart(10, '0')).toString('base64');
}

function isRestError(err: unknown): boolean {
  return err instanceof Error && err.name === 'RestError';
}

function restStatus(err: unknown): number | undefined {
  const s = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof s === 'number' ? s : undefined;
}

function restCode(err: unknown): string | undefined {
  const e = err as { code?: unknown; details?: { errorCode?: unknown } } | null;
  const c = e?.details?.errorCode ?? e?.code;
  return typeof c === 'string' ? c : undefined;
}

function firstLine(s: string): string {
  const i = s.indexOf('\n');
  return i < 0 ? s : s.slice(0, i);
}
