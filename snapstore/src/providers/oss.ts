/**
 * Alibaba Cloud OSS provider (upstream `pkg/snapstore/oss_snapstore.go`), through the official `ali-oss`
 * client: streaming multipart uploads (oss-upload.ts), ListObjects with marker, ranged GetObject, and
 * DeleteObject. A bucket retention policy (WORM) that is `InProgress` or `Locked` makes every snapshot
 * immutable until its CreatedOn plus the retention days, as upstream computes it.
 */
import { Readable } from 'node:stream';
import type { OssStoreConfig } from '../config.js';
import { SnapStoreError } from '../errors.js';
import type { Logger } from '../logger.js';
import { silentLogger } from '../logger.js';
import { listedObjectKey, listingPrefix, objectKey, tryParseSnapshotKey } from '../snapshot.js';
import { sortSnapshots } from '../snapshot-order.js';
import type { Snapshot } from '../snapshot.js';
import type { ByteRange, FetchOptions, ListOptions, SaveOptions, SnapStore } from '../store.js';
import { isNetworkError, saveFailed } from './common.js';
import { DEFAULT_FETCH_STALL_MS, guardedFetch } from './fetch-guard.js';
import { createOssClient, mapOssError, ossEndpoint, ossErrorInfo } from './oss-client.js';
import type { OssApi, OssClientTuning } from './oss-client.js';
import { uploadOssObject } from './oss-upload.js';
import { IdleBuffers } from './part-buffers.js';
import { UploadFailedError } from './upload-failed.js';

const DAY_MS = 24 * 60 * 60 * 1000;
/** ListObjects' largest page. */
const LIST_PAGE = 1000;
/** The WORM states in which OSS enforces the retention (a policy not locked within 24 h is dropped). */
const ENFORCED_WORM_STATES = new Set(['InProgress', 'Locked']);

export interface OssTuning extends OssClientTuning {
  /** Retries of one part after the first attempt (upstream: 5). */
  partRetries?: number;
  /** Delay before retry i is `base * 2^i` ms (upstream: 1000). */
  retryBaseDelayMs?: number;
}

export async function openOssStore(config: OssStoreConfig, tuning: OssTuning = {}): Promise<SnapStore> {
  return Promise.resolve(new OssStore(config, createOssClient(config, tuning), tuning));
}

class OssStore implements SnapStore {
  readonly provider = 'OSS' as const;
  readonly prefix: string;
  private readonly logger: Logger;
  private readonly where: string;
  // Part buffers lent between overlapping uploads, as for ABS and Swift (see part-buffers.ts).
  private readonly idle: IdleBuffers;

  constructor(
    private readonly config: OssStoreConfig,
    private readonly client: OssApi,
    private readonly tuning: OssTuning,
  ) {
    this.prefix = config.prefix;
    this.logger = config.logger ?? silentLogger;
    this.where = `OSS bucket ${config.container} at ${ossEndpoint(config)}`;
    this.idle = new IdleBuffers(Math.max(1, config.maxParallelChunkUploads) + 1);
  }

  async list(_options?: ListOptions): Promise<Snapshot[]> {
    const base = listingPrefix(this.prefix).replace(/^\/+|\/+$/g, '');
    const prefix = base === '' || base === '.' ? '' : `${base}/`;
    const snaps: Snapshot[] = [];
    try {
      let marker: string | undefined;
      do {
        const page = await this.client.list({ prefix, 'max-keys': LIST_PAGE, ...(marker !== undefined ? { marker } : {}) }, {});
        for (const o of page.objects ?? []) {
          const snap = tryParseSnapshotKey(o.name, this.logger);
          if (!snap) continue;
          snap.sizeBytes = o.size;
          snaps.push(snap);
        }
        marker = page.isTruncated ? (page.nextMarker ?? undefined) : undefined;
      } while (marker !== undefined);
    } catch (err) {
      throw mapOssError(err, this.where, `list objects under ${JSON.stringify(prefix)}`);
    }
    const retentionDays = await this.retentionDays();
    if (retentionDays !== undefined) {
      for (const s of snaps) s.immutabilityExpiryTime = new Date(s.createdOn.getTime() + retentionDays * DAY_MS);
    }
    return sortSnapshots(snaps);
  }

  /** The bucket's enforced retention in days, or undefined without a policy (GetBucketWorm answers 404). */
  private async retentionDays(): Promise<number | undefined> {
    try {
      const worm = await this.client.getBucketWorm(this.config.container);
      if (!ENFORCED_WORM_STATES.has(worm.state)) return undefined;
      const days = Number(worm.days);
      if (!Number.isFinite(days) || days < 0) {
        throw new SnapStoreError(
          'E_UNREACHABLE',
          `${this.where}: retention policy has an invalid RetentionPeriodInDays ${JSON.stringify(worm.days)}`,
        );
      }
      return days;
    } catch (err) {
      const { code, status } = ossErrorInfo(err);
      if (status === 404 && code !== 'NoSuchBucket') return undefined;
      throw mapOssError(err, this.where, 'get the bucket retention policy (GetBucketWorm)');
    }
  }

  async fetch(snap: Snapshot, range?: ByteRange, options?: FetchOptions): Promise<Readable> {
    const key = listedObjectKey(snap);
    // ali-oss takes no signal: the guard stops waiting for it, and destroys a body that arrives too late.
    return guardedFetch(
      async () => {
        try {
          const headers = range ? { Range: `bytes=${range.start}-${range.end ?? ''}` } : undefined;
          return (await this.client.getStream(key, headers ? { headers } : {})).stream;
        } catch (err) {
          // Past the end of the object: the contract returns what is there (nothing).
          if (range !== undefined && ossErrorInfo(err).status === 416) {
            return Readable.from([]);
          }
          throw mapOssError(err, this.where, `fetch object ${key}`);
        }
      },
      { what: `fetch object ${key}`, store: `the ${this.where}`, stallMs: this.config.fetchStallTimeoutMs ?? DEFAULT_FETCH_STALL_MS },
      options,
    );
  }

  async save(snap: Snapshot, data: Readable, options?: SaveOptions): Promise<void> {
    const key = objectKey(this.prefix, snap);
    try {
      const result = await uploadOssObject(data, {
        client: this.client,
        key,
        partSize: this.config.minChunkSize,
        concurrency: this.config.maxParallelChunkUploads,
        partRetries: this.tuning.partRetries ?? 5,
        retryBaseDelayMs: this.tuning.retryBaseDelayMs ?? 1000,
        ...(options?.signal ? { signal: options.signal } : {}),
        logger: this.logger,
        idle: this.idle,
      });
      this.logger.debug({ key, ...result }, 'snapshot uploaded to OSS');
    } catch (failure) {
      const err = failure instanceof UploadFailedError ? failure.cause : failure;
      // OSS answers and network failures become typed errors; the input's own failure stays what it was.
      const mapped =
        failure instanceof UploadFailedError && failure.origin === 'store' && (ossErrorInfo(err).status !== 0 || isNetworkError(err))
          ? mapOssError(err, this.where, `save object ${key}`)
          : err;
      throw saveFailed(mapped, `snapshot ${key} to ${this.where}`);
    }
  }

  async delete(snap: Snapshot): Promise<void> {
    const key = listedObjectKey(snap);
    try {
      // DeleteObject answers 204 for a missing key too; the contract wants E_NOT_FOUND.
      await this.client.head(key);
      await this.client.delete(key);
    } catch (err) {
      throw mapOssError(err, this.where, `delete object ${key}`);
    }
  }

  async close(): Promise<void> {
    // ali-oss keeps only idle keep-alive sockets, which do not hold the process open.
  }
}
