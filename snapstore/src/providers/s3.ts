/**
 * S3 provider (upstream `pkg/snapstore/s3_snapstore.go`) on @aws-sdk/client-s3.
 *
 * Save streams into a multipart upload through our own uploader (spooled-parts.ts): parts of `minChunkSize`,
 * written to files in `--snapstore-temp-directory` as they arrive and sent from there,
 * `maxParallelChunkUploads` in flight. So memory stays small and fixed whatever the snapshot size, and the
 * disk holds at most that many + 1 parts (upstream holds a temp copy of the whole snapshot). With 10,000
 * parts the largest object is 10,000 x minChunkSize (>= 48.8 GiB at 5 MiB), far above etcd's 8 GiB quota.
 * The client and its settings (endpoint, TLS, credentials, SSE-C) are made in s3-client.ts.
 */
import { Readable } from 'node:stream';
import {
  DeleteObjectCommand,
  GetBucketVersioningCommand,
  GetObjectCommand,
  GetObjectLockConfigurationCommand,
  GetObjectTaggingCommand,
  HeadObjectCommand,
  ListObjectVersionsCommand,
  ListObjectsV2Command,
} from '@aws-sdk/client-s3';
import type { ObjectVersion, S3Client } from '@aws-sdk/client-s3';
import type { S3StoreConfig } from '../config.js';
import { SnapStoreError } from '../errors.js';
import { InternalError } from '../internal-errors.js';
import type { Logger } from '../logger.js';
import { silentLogger } from '../logger.js';
import { listedObjectKey, listingPrefix, objectKey, tryParseSnapshotKey } from '../snapshot.js';
import { sortSnapshots } from '../snapshot-order.js';
import type { Snapshot } from '../snapshot.js';
import type { ByteRange, FetchOptions, ListOptions, SaveOptions, SnapStore } from '../store.js';
import { type StoreFailureCode, abortReason, classifyStoreFailure, describeError, isNetworkError, saveFailed } from './common.js';
import { DEFAULT_FETCH_STALL_MS, guardedFetch } from './fetch-guard.js';
import { DEFAULT_PART_RETRY, UploadFailedError, errorName, httpStatus, uploadStream } from './s3-upload.js';
import type { PartRetryPolicy } from './s3-upload.js';
import { connectS3, type S3Tuning, type Ssec } from './s3-client.js';

export type { S3Tuning } from './s3-client.js';

/** Tag (S3) that hides a snapshot version from listings unless `includeExcluded` (upstream). */
export const EXCLUDE_TAG = 'x-etcd-snapshot-exclude';

/** S3's smallest allowed part (except the last). */
const S3_MIN_PART_SIZE = 5 * 1024 * 1024;

/** Parallel GetObjectTagging calls while listing a versioned bucket. */
const TAGGING_CONCURRENCY = 8;

/**
 * Opens an S3 store. `provider` is the name the store reports (ECS and OCS are S3 underneath, and
 * credential rotation looks up their own files by that name).
 */
export async function openS3Store(config: S3StoreConfig, tuning: S3Tuning = {}, provider: 'S3' | 'ECS' | 'OCS' = 'S3'): Promise<SnapStore> {
  if (!config.container) throw new SnapStoreError('E_CONFIG', 'S3 store needs a bucket name (--store-container)');
  const { client, where, ssec } = await connectS3(config, tuning);
  const partRetry: PartRetryPolicy = {
    retries: tuning.partRetries ?? DEFAULT_PART_RETRY.retries,
    baseDelayMs: tuning.partRetryBaseDelayMs ?? DEFAULT_PART_RETRY.baseDelayMs,
    timeoutMs: tuning.partTimeoutMs ?? DEFAULT_PART_RETRY.timeoutMs,
  };
  return new S3SnapStore(config, client, where, ssec, partRetry, provider);
}

class S3SnapStore implements SnapStore {
  readonly prefix: string;
  private readonly bucket: string;
  private readonly logger: Logger;
  private readonly partSize: number;
  /** `--snapstore-temp-directory`: where parts wait for their upload. */
  private readonly tempDir: string;
  private readonly queueSize: number;
  private warnedVersioning = false;
  private readonly stallMs: number;

  constructor(
    config: S3StoreConfig,
    private readonly client: S3Client,
    private readonly endpoint: string,
    private readonly ssec: Ssec | undefined,
    private readonly partRetry: PartRetryPolicy,
    readonly provider: 'S3' | 'ECS' | 'OCS',
  ) {
    this.prefix = config.prefix;
    this.bucket = config.container;
    this.logger = config.logger ?? silentLogger;
    this.partSize = Math.max(config.minChunkSize, S3_MIN_PART_SIZE);
    this.tempDir = config.tempDir;
    this.queueSize = Math.max(1, config.maxParallelChunkUploads);
    this.stallMs = config.fetchStallTimeoutMs ?? DEFAULT_FETCH_STALL_MS;
  }

  private where(key: string): string {
    return `s3://${this.bucket}/${key}`;
  }

  async list(options?: ListOptions): Promise<Snapshot[]> {
    const base = listingPrefix(this.prefix).replace(/^\/+|\/+$/g, '');
    // Trailing '/' so that `a/b` does not also match `a/b2/...` (upstream quirk we fix).
    const prefix = base === '' || base === '.' ? '' : `${base}/`;
    const where = this.where(prefix);
    try {
      if (await this.versioningEnabled(where)) return await this.listVersions(prefix, options?.includeExcluded ?? false);
      const snaps: Snapshot[] = [];
      let token: string | undefined;
      do {
        const page = await this.client.send(
          new ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, ...(token ? { ContinuationToken: token } : {}) }),
        );
        for (const o of page.Contents ?? []) {
          if (!o.Key) continue;
          const snap = tryParseSnapshotKey(o.Key, this.logger);
          if (!snap) continue;
          if (o.Size !== undefined) snap.sizeBytes = o.Size;
          snaps.push(snap);
        }
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
      return sortSnapshots(snaps);
    } catch (err) {
      throw this.mapError(err, 'list', where);
    }
  }

  /**
   * Versioned bucket (S3 object lock needs versioning): every version is listed; per key the oldest
   * version is the snapshot (later ones would be overwrites), delete markers do not hide it, and an
   * exclusion tag on that version hides it unless asked for.
   */
  private async listVersions(prefix: string, includeExcluded: boolean): Promise<Snapshot[]> {
    const retentionDays = await this.defaultRetentionDays();
    const oldest = new Map<string, ObjectVersion>();
    let keyMarker: string | undefined;
    let versionMarker: string | undefined;
    do {
      const page = await this.client.send(
        new ListObjectVersionsCommand({
          Bucket: this.bucket,
          Prefix: prefix,
          ...(keyMarker ? { KeyMarker: keyMarker } : {}),
          ...(versionMarker ? { VersionIdMarker: versionMarker } : {}),
        }),
      );
      for (const v of page.Versions ?? []) {
        if (!v.Key) continue;
        const seen = oldest.get(v.Key);
        if (!seen || (v.LastModified?.getTime() ?? 0) < (seen.LastModified?.getTime() ?? 0)) oldest.set(v.Key, v);
      }
      if (!page.IsTruncated) break;
      keyMarker = page.NextKeyMarker;
      versionMarker = page.NextVersionIdMarker;
    } while (keyMarker);

    const candidates: Snapshot[] = [];
    for (const [key, v] of oldest) {
      const snap = tryParseSnapshotKey(key, this.logger);
      if (!snap) continue;
      if (v.VersionId && v.VersionId !== 'null') snap.versionId = v.VersionId;
      if (v.Size !== undefined) snap.sizeBytes = v.Size;
      if (retentionDays > 0) snap.immutabilityExpiryTime = new Date(snap.createdOn.getTime() + retentionDays * 86_400_000);
      candidates.push(snap);
    }
    if (includeExcluded) return sortSnapshots(candidates);

    const keep: boolean[] = new Array<boolean>(candidates.length).fill(true);
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < candidates.length) {
        const i = next++;
        const s = candidates[i] as Snapshot;
        const tags = await this.client.send(
          new GetObjectTaggingCommand({
            Bucket: this.bucket,
            Key: listedObjectKey(s),
            ...(s.versionId ? { VersionId: s.versionId } : {}),
          }),
        );
        if ((tags.TagSet ?? []).some((t) => t.Key === EXCLUDE_TAG && t.Value === 'true')) keep[i] = false;
      }
    };
    await Promise.all(Array.from({ length: Math.min(TAGGING_CONCURRENCY, candidates.length) }, worker));
    return sortSnapshots(candidates.filter((_, i) => keep[i]));
  }

  /**
   * S3-compatible stores without the versioning API (NotImplemented, MethodNotAllowed) or a policy
   * without s3:GetBucketVersioning are treated as unversioned, with one warning.
   */
  private async versioningEnabled(where: string): Promise<boolean> {
    try {
      const out = await this.client.send(new GetBucketVersioningCommand({ Bucket: this.bucket }));
      return out.Status === 'Enabled';
    } catch (err) {
      const name = errorName(err);
      if (name === 'NotImplemented' || name === 'MethodNotAllowed' || name === 'AccessDenied') {
        if (!this.warnedVersioning) {
          this.warnedVersioning = true;
          this.logger.warn(
            { bucket: this.bucket, err: describeError(err) },
            `cannot read bucket versioning of ${where}; listing it as unversioned`,
          );
        }
        return false;
      }
      throw err;
    }
  }

  /** Default object-lock retention of the bucket in days; 0 when there is none. */
  private async defaultRetentionDays(): Promise<number> {
    try {
      const out = await this.client.send(new GetObjectLockConfigurationCommand({ Bucket: this.bucket }));
      const r = out.ObjectLockConfiguration?.Rule?.DefaultRetention;
      if (r?.Days) return r.Days;
      if (r?.Years) return r.Years * 365;
      return 0;
    } catch (err) {
      const name = errorName(err);
      if (name === 'ObjectLockConfigurationNotFoundError' || name === 'NotImplemented' || name === 'MethodNotAllowed') return 0;
      throw err;
    }
  }

  async fetch(snap: Snapshot, range?: ByteRange, options?: FetchOptions): Promise<Readable> {
    const key = listedObjectKey(snap);
    const where = this.where(key);
    return guardedFetch(
      async (abortSignal) => {
        try {
          const out = await this.client.send(
            new GetObjectCommand({
              Bucket: this.bucket,
              Key: key,
              ...(snap.versionId ? { VersionId: snap.versionId } : {}),
              ...(range ? { Range: `bytes=${range.start}-${range.end ?? ''}` } : {}),
              ...this.ssec,
            }),
            { abortSignal },
          );
          const body = out.Body;
          if (body instanceof Readable) return body;
          if (body && typeof (body as { transformToWebStream?: unknown }).transformToWebStream === 'function') {
            return Readable.fromWeb((body as { transformToWebStream(): import('node:stream/web').ReadableStream }).transformToWebStream());
          }
          throw new InternalError('E_BAD_ANSWER', 'GetObject returned no body');
        } catch (err) {
          throw this.mapError(err, 'fetch', where);
        }
      },
      { what: `fetch ${where}`, store: `the S3 endpoint ${this.endpoint}`, stallMs: this.stallMs },
      options,
    );
  }

  async save(snap: Snapshot, data: Readable, options?: SaveOptions): Promise<void> {
    const key = objectKey(this.prefix, snap);
    const where = this.where(key);
    const what = `snapshot ${where}`;
    const signal = options?.signal;
    if (signal?.aborted) {
      data.destroy();
      throw saveFailed(abortReason(signal), what);
    }
    try {
      const r = await uploadStream(data, {
        client: this.client,
        bucket: this.bucket,
        key,
        partSize: this.partSize,
        concurrency: this.queueSize,
        // Parts wait for their upload as files, not buffers (spooled-parts.ts): an uncompressed full snapshot fills
        // all of them as fast as etcd sends, and 6 x 5 MiB in memory took it past the pod's 128 MiB.
        spoolDir: this.tempDir,
        writeParams: this.ssec ?? {},
        unsignedPayload: true, // applied to https requests only; plain http keeps the signed body hash
        retry: this.partRetry,
        logger: this.logger,
        where,
        ...(signal ? { signal } : {}),
      });
      this.logger.debug({ key: where, bytes: r.bytes, parts: r.parts, retries: r.retries }, 'snapshot uploaded');
    } catch (err) {
      if (!data.destroyed) data.destroy();
      // Input and abort errors are the caller's story; S3's answers are classified like every other call.
      if (err instanceof UploadFailedError && err.origin !== 'store') throw saveFailed(err.cause, what);
      const cause = err instanceof UploadFailedError ? err.cause : err;
      throw saveFailed(this.mapError(cause, 'save', where, true), what);
    }
  }

  async delete(snap: Snapshot): Promise<void> {
    const key = listedObjectKey(snap);
    const where = this.where(key);
    const version = snap.versionId ? { VersionId: snap.versionId } : {};
    try {
      // DeleteObject succeeds on missing keys; the contract wants E_NOT_FOUND.
      await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key, ...version, ...this.ssec }));
    } catch (err) {
      throw this.mapError(err, 'delete', where);
    }
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key, ...version }));
    } catch (err) {
      if (snap.versionId && errorName(err) === 'AccessDenied') {
        const until = snap.immutabilityExpiryTime ? ` until ${snap.immutabilityExpiryTime.toISOString()}` : '';
        throw new SnapStoreError('E_IMMUTABLE', `cannot delete ${where} (version ${snap.versionId}): protected by object lock${until}`, {
          cause: err,
        });
      }
      throw this.mapError(err, 'delete', where);
    }
  }

  async close(): Promise<void> {
    this.client.destroy();
  }

  private mapError(err: unknown, op: string, where: string, keepUnknown = false): SnapStoreError | unknown {
    if (err instanceof SnapStoreError) return err;
    const name = errorName(err);
    const status = httpStatus(err);
    // HEAD answers have no body, so the SDK can only say "Unknown": show the status instead.
    const label = name && name !== 'Unknown' ? name : String(status ?? 'error');
    const detail = describeError(err);
    if (isNetworkError(err)) {
      return new SnapStoreError('E_UNREACHABLE', `${op} ${where}: cannot reach S3 endpoint ${this.endpoint}: ${detail}`, { cause: err });
    }
    if (status === undefined && err instanceof Error && /region is missing/i.test(err.message)) {
      return new SnapStoreError('E_CONFIG', `${op} ${where}: no S3 region configured (credentials "region")`, { cause: err });
    }
    // The credential provider fails before any request is sent, so it has no status.
    const vendorCode = err instanceof Error && err.name === 'CredentialsProviderError' ? err.name : name;
    const code = classifyStoreFailure({ status, vendorCode }, S3_VENDOR_CODES);
    if (keepUnknown && ((code === 'E_CONFIG' && name !== 'NoSuchBucket') || (status === undefined && !S3_VENDOR_CODES.has(vendorCode))))
      return err;
    switch (code) {
      case 'E_CONFIG':
        return name === 'NoSuchBucket'
          ? new SnapStoreError('E_CONFIG', `${op} ${where}: bucket ${this.bucket} does not exist at ${this.endpoint}`, { cause: err })
          : new SnapStoreError('E_CONFIG', `${op} ${where}: S3 rejected the request (${status} ${label}): ${detail}`, { cause: err });
      case 'E_NOT_FOUND':
        return new SnapStoreError('E_NOT_FOUND', `${op} ${where}: object not found`, { cause: err });
      case 'E_CREDENTIALS':
        return new SnapStoreError('E_CREDENTIALS', `${op} ${where}: S3 rejected the credentials (${label}): ${detail}`, { cause: err });
      default:
        return status === undefined
          ? new SnapStoreError(code, `${op} ${where} at ${this.endpoint} failed: ${detail}`, { cause: err })
          : new SnapStoreError(code, `${op} ${where}: S3 endpoint ${this.endpoint} answered ${status} ${label}: ${detail}`, { cause: err });
    }
  }
}

/** S3 error codes that say more than their status (`NoSuchBucket` is a 404, `AccessDenied` may come without one). */
const S3_VENDOR_CODES: ReadonlyMap<string, StoreFailureCode> = new Map<string, StoreFailureCode>([
  ['NoSuchBucket', 'E_CONFIG'],
  ['NoSuchKey', 'E_NOT_FOUND'],
  ['NotFound', 'E_NOT_FOUND'],
  ['NoSuchVersion', 'E_NOT_FOUND'],
  ['CredentialsProviderError', 'E_CREDENTIALS'],
  ...[
    'InvalidAccessKeyId',
    'SignatureDoesNotMatch',
    'ExpiredToken',
    'InvalidToken',
    'TokenRefreshRequired',
    'InvalidClientTokenId',
    'AccessDenied',
    'AuthorizationHeaderMalformed',
  ].map((c): [string, StoreFailureCode] => [c, 'E_CREDENTIALS']),
]);
