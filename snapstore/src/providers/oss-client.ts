/**
 * The part of the official Alibaba Cloud OSS client (`ali-oss`) the OSS provider uses, typed narrowly
 * (its published types lack `getBucketWorm`, and a small surface keeps the provider honest about what it
 * needs), plus the mapping of its errors to SnapStoreErrors.
 */
import type { Readable } from 'node:stream';
import OSS from 'ali-oss';
import type { OssStoreConfig } from '../config.js';
import { SnapStoreError, isSnapStoreError } from '../errors.js';
import { type StoreFailureCode, classifyStoreFailure, describeError, isAbortError, isNetworkError } from './common.js';

export interface OssListPage {
  objects: { name: string; size: number; lastModified: string }[] | undefined;
  nextMarker: string | null;
  isTruncated: boolean;
}

export interface OssWorm {
  /** `InProgress` (not yet locked, but already enforced) or `Locked`. */
  state: string;
  days: string | number;
}

export interface OssApi {
  put(name: string, body: Buffer): Promise<unknown>;
  initMultipartUpload(name: string): Promise<{ uploadId: string }>;
  uploadPart(name: string, uploadId: string, partNo: number, body: Buffer, start: number, end: number): Promise<{ etag: string }>;
  completeMultipartUpload(name: string, uploadId: string, parts: { number: number; etag: string }[]): Promise<unknown>;
  abortMultipartUpload(name: string, uploadId: string): Promise<unknown>;
  list(query: { prefix: string; marker?: string; 'max-keys': number }, options: object): Promise<OssListPage>;
  getStream(name: string, options?: { headers?: Record<string, string> }): Promise<{ stream: Readable }>;
  head(name: string): Promise<unknown>;
  delete(name: string): Promise<unknown>;
  getBucketWorm(bucket: string): Promise<OssWorm>;
}

/** Client knobs that are not part of the store configuration; tests shorten them. */
export interface OssClientTuning {
  /** Per-request timeout (default 180 s, upstream `chunkUploadTimeout`). */
  timeoutMs?: number;
}

/** `--store-endpoint-override` wins over the credentials' `storageEndpoint`, as for the other providers. */
export function ossEndpoint(config: Pick<OssStoreConfig, 'endpointOverride' | 'credentials'>): string {
  return config.endpointOverride ?? config.credentials.storageEndpoint;
}

export function createOssClient(config: OssStoreConfig, tuning: OssClientTuning = {}): OssApi {
  try {
    const client = new OSS({
      accessKeyId: config.credentials.accessKeyID,
      accessKeySecret: config.credentials.accessKeySecret,
      endpoint: ossEndpoint(config),
      bucket: config.container,
      timeout: tuning.timeoutMs ?? 180_000,
    });
    return client as unknown as OssApi;
  } catch (err) {
    // The client checks the endpoint and bucket name when it is constructed.
    throw new SnapStoreError(
      'E_CONFIG',
      `OSS client for bucket ${config.container} at ${ossEndpoint(config)} could not be created: ${describeError(err)}`,
      {
        cause: err,
      },
    );
  }
}

/** The `code` (e.g. `NoSuchKey`) and HTTP `status` of an ali-oss error. */
export function ossErrorInfo(err: unknown): { code: string; status: number } {
  const e = (err ?? {}) as { code?: unknown; status?: unknown };
  return { code: typeof e.code === 'string' ? e.code : '', status: typeof e.status === 'number' ? e.status : 0 };
}

/** An ali-oss error as a SnapStoreError; `subject` names what was being done (`delete object a/b`). */
export function mapOssError(err: unknown, where: string, subject: string): SnapStoreError {
  if (isSnapStoreError(err)) return err;
  const { code, status } = ossErrorInfo(err);
  const detail = `${subject} in ${where}: ${describeError(err)}`;
  if (
    status === 0 &&
    (isNetworkError(err) || isAbortError(err) || /Timeout|Connection|Request/i.test((err as Error | undefined)?.name ?? ''))
  ) {
    return new SnapStoreError('E_UNREACHABLE', `${where} is unreachable (${subject}): ${describeError(err)}`, { cause: err });
  }
  // HEAD answers carry no error body, so a missing object is just a 404 there.
  // A retention policy (WORM) forbids deleting or overwriting an object before it expires; OSS says so with a
  // WORM code or a bare 409.
  const vendorCode = /Immutable|Worm/i.test(code) || status === 409 ? 'Worm' : code;
  switch (classifyStoreFailure({ status: status === 0 ? undefined : status, vendorCode }, OSS_VENDOR_CODES)) {
    case 'E_NOT_FOUND':
      return new SnapStoreError('E_NOT_FOUND', `${subject}: not found in ${where}`, { cause: err });
    case 'E_CREDENTIALS':
      return new SnapStoreError('E_CREDENTIALS', `OSS refused ${detail}`, { cause: err });
    case 'E_IMMUTABLE':
      return new SnapStoreError('E_IMMUTABLE', `${detail} (protected by the bucket retention policy)`, { cause: err });
    case 'E_CONFIG':
      return new SnapStoreError('E_CONFIG', code === 'NoSuchBucket' ? `${detail} (the bucket does not exist)` : detail, { cause: err });
    case 'E_UNREACHABLE':
      return new SnapStoreError('E_UNREACHABLE', detail, { cause: err });
  }
}

/** OSS error codes that say more than their status (every WORM/immutability code is folded into one). */
const OSS_VENDOR_CODES: ReadonlyMap<string, StoreFailureCode> = new Map<string, StoreFailureCode>([
  ['NoSuchKey', 'E_NOT_FOUND'],
  ['NoSuchBucket', 'E_CONFIG'],
  ['InvalidAccessKeyId', 'E_CREDENTIALS'],
  ['SignatureDoesNotMatch', 'E_CREDENTIALS'],
  ['Worm', 'E_IMMUTABLE'],
]);
