/**
 * OpenStack Swift provider (upstream `pkg/snapstore/swift_snapstore.go`) on our own client of the
 * documented Swift and Keystone v3 APIs (swift-client.ts, keystone.ts).
 *
 * Layout, as upstream writes it: a snapshot larger than one segment is a Dynamic Large Object, segments
 * `<key>/%010d` (numbered from 1) and then a zero-byte manifest `<key>` with `X-Object-Manifest:
 * <container>/<key>/`; Swift serves the manifest as the concatenation of the segments. Upstream's
 * manifest prefix has no trailing slash; ours has one so that a sibling key that merely starts with this
 * one (`<key>.final`) can never become part of it. Reading a Go-written store is unaffected: Swift
 * resolves either manifest.
 *
 * Differences from upstream, on purpose: the snapshot streams through the multipart-upload engine
 * (multipart-upload.ts) into segments of `minChunkSize` held in memory ((maxParallelChunkUploads + 1)
 * buffers, reused) instead of a temp file first, so the segment
 * size cannot depend on the total size (upstream `max(minChunkSize, size/999)`); DLOs have no segment
 * limit, so this only means more segments above 999 x minChunkSize. A snapshot that fits one segment is
 * stored as a plain object (one request, and its size is listed). Segment objects are listed as chunks
 * (as upstream lists them) with the manifest's size summed from them; garbage collection leaves them
 * alone for Swift (gc.ts), and deleting a snapshot deletes its segments first, then the manifest.
 *
 * Known limit shared with upstream: a save over an existing large object overwrites its segments in
 * place, so if that save then fails the old object is damaged. Snapshot names carry their creation time,
 * so the snapshotter never saves one key twice.
 */
import type { Readable } from 'node:stream';
import type { SwiftStoreConfig } from '../config.js';
import { SnapStoreError, isSnapStoreError } from '../errors.js';
import type { Logger } from '../logger.js';
import { silentLogger } from '../logger.js';
import { listedObjectKey, listingPrefix, objectKey, tryParseSnapshotKey } from '../snapshot.js';
import { sortSnapshots } from '../snapshot-order.js';
import type { Snapshot } from '../snapshot.js';
import type { ByteRange, FetchOptions, ListOptions, SaveOptions, SnapStore } from '../store.js';
import { classifyStoreFailure, describeError, isAbortError, isNetworkError, saveFailed } from './common.js';
import { DEFAULT_FETCH_STALL_MS, guardedFetch } from './fetch-guard.js';
import { MemoryParts } from './memory-parts.js';
import { uploadInParts, type MultipartAdapter } from './multipart-upload.js';
import { IdleBuffers, PartBufferPool } from './part-buffers.js';
import { UploadFailedError } from './upload-failed.js';
import { SwiftClient, bodyStream } from './swift-client.js';

export interface SwiftTuning {
  /** Time limit of one request, including an authentication (upstream `chunkUploadTimeout` = 180 s). */
  requestTimeoutMs?: number;
  /** Retries of a failed segment upload (upstream: 5). */
  segmentRetries?: number;
  /** Backoff before retry i is base x 2^i (upstream: 1 s). */
  retryBaseDelayMs?: number;
}

const DEFAULTS: Required<SwiftTuning> = { requestTimeoutMs: 180_000, segmentRetries: 5, retryBaseDelayMs: 1000 };
/** Objects per listing page (Swift's default and maximum `container_listing_limit`). */
const LISTING_LIMIT = 10_000;
/** Parallel DELETEs when removing the segments of a snapshot. */
const DELETE_CONCURRENCY = 8;

export async function openSwiftStore(config: SwiftStoreConfig, tuning: SwiftTuning = {}): Promise<SnapStore> {
  if (!config.container) throw new SnapStoreError('E_CONFIG', 'Swift store needs a container name (--store-container)');
  const t = { ...DEFAULTS, ...tuning };
  const client = new SwiftClient(config.credentials, config.container, t.requestTimeoutMs, config.endpointOverride);
  return new SwiftSnapStore(config, client, t);
}

/** `%010d`, the segment suffix. */
export function segmentName(key: string, n: number): string {
  return `${key}/${String(n).padStart(10, '0')}`;
}

const SEGMENT = /\/(\d{10})$/;

class SwiftSnapStore implements SnapStore {
  readonly provider = 'Swift' as const;
  readonly prefix: string;
  private readonly logger: Logger;
  private readonly segmentSize: number;
  private readonly concurrency: number;
  private readonly idle: IdleBuffers;
  private readonly where: string;
  private readonly stallMs: number;

  constructor(
    config: SwiftStoreConfig,
    readonly client: SwiftClient,
    private readonly tuning: Required<SwiftTuning>,
  ) {
    this.prefix = config.prefix;
    this.logger = config.logger ?? silentLogger;
    this.segmentSize = config.minChunkSize;
    this.concurrency = Math.max(1, config.maxParallelChunkUploads);
    this.idle = new IdleBuffers(this.concurrency + 1);
    this.where = `Swift container ${config.container} (Keystone ${config.credentials.authURL})`;
    this.stallMs = config.fetchStallTimeoutMs ?? DEFAULT_FETCH_STALL_MS;
  }

  /** Every object name and size under `prefix`, page by page (`marker`). */
  private async listObjects(prefix: string): Promise<{ name: string; bytes: number }[]> {
    const out: { name: string; bytes: number }[] = [];
    let marker = '';
    for (;;) {
      const query: Record<string, string> = { format: 'json', prefix, limit: String(LISTING_LIMIT) };
      if (marker !== '') query['marker'] = marker;
      const res = await this.client.request({ method: 'GET', query });
      if (res.status === 204) break;
      if (res.status !== 200) throw await this.statusError(res, 'list', `objects under ${JSON.stringify(prefix)}`);
      const page = (await res.json()) as { name?: unknown; bytes?: unknown }[];
      for (const o of page) if (typeof o.name === 'string') out.push({ name: o.name, bytes: Number(o.bytes ?? 0) });
      if (page.length < LISTING_LIMIT) break;
      marker = out[out.length - 1]?.name ?? '';
    }
    return out;
  }

  async list(_options?: ListOptions): Promise<Snapshot[]> {
    const base = listingPrefix(this.prefix).replace(/^\/+|\/+$/g, '');
    const prefix = base === '' || base === '.' ? '' : `${base}/`;
    let objects: { name: string; bytes: number }[];
    try {
      objects = await this.listObjects(prefix);
    } catch (err) {
      throw this.mapError(err, 'list', `objects under ${JSON.stringify(prefix)}`);
    }
    const snaps: Snapshot[] = [];
    const segmentBytes = new Map<string, number>();
    for (const o of objects) {
      const snap = tryParseSnapshotKey(o.name, this.logger);
      if (!snap) continue;
      snap.sizeBytes = o.bytes;
      if (snap.isChunk) {
        const parent = o.name.replace(SEGMENT, '');
        segmentBytes.set(parent, (segmentBytes.get(parent) ?? 0) + o.bytes);
      }
      snaps.push(snap);
    }
    // A manifest lists as 0 bytes; its object is the sum of its segments.
    for (const s of snaps) {
      if (s.isChunk || s.sizeBytes !== 0) continue;
      const sum = segmentBytes.get(listedObjectKey(s));
      if (sum !== undefined) s.sizeBytes = sum;
    }
    return sortSnapshots(snaps);
  }

  async fetch(snap: Snapshot, range?: ByteRange, options?: FetchOptions): Promise<Readable> {
    const key = listedObjectKey(snap);
    return guardedFetch(
      async (signal) => {
        try {
          const res = await this.client.request({
            method: 'GET',
            object: key,
            ...(range ? { headers: { range: `bytes=${range.start}-${range.end ?? ''}` } } : {}),
            signal,
            streamed: true,
          });
          if (res.status === 200 || res.status === 206) return bodyStream(res);
          // Past the end of a non-empty object; the contract returns what is there (nothing).
          if (res.status === 416) {
            await res.body?.cancel();
            return bodyStream(new Response(null));
          }
          throw await this.statusError(res, 'fetch', `object ${key}`);
        } catch (err) {
          throw this.mapError(err, 'fetch', `object ${key}`);
        }
      },
      { what: `fetch object ${key}`, store: `the ${this.where}`, stallMs: this.stallMs },
      options,
    );
  }

  async save(snap: Snapshot, data: Readable, options?: SaveOptions): Promise<void> {
    const key = objectKey(this.prefix, snap);
    const pool = new PartBufferPool(this.segmentSize, this.concurrency + 1, this.idle);
    try {
      const r = await uploadInParts(data, this.segmentCalls(key), new MemoryParts(pool), {
        partSize: this.segmentSize,
        concurrency: this.concurrency,
        // Upstream's retries (1, 2, 4, 8, 16 s) on network errors and 5xx answers.
        retry: { retries: this.tuning.segmentRetries, baseDelayMs: this.tuning.retryBaseDelayMs },
        ...(options?.signal ? { signal: options.signal } : {}),
        logger: this.logger,
        where: key,
      });
      if (r.parts > 0) this.logger.debug({ key, segments: r.parts }, 'snapshot uploaded as a Swift dynamic large object');
    } catch (err) {
      const cause = err instanceof UploadFailedError ? err.cause : err;
      throw saveFailed(this.mapSaveError(cause, key), `snapshot ${key} to ${this.where}`);
    }
  }

  /**
   * The requests of one save: segments `<key>/%010d`, each its own object, and the manifest as the commit;
   * a snapshot that fits one segment is a plain object (one request, and its size is listed).
   */
  private segmentCalls(key: string): MultipartAdapter<Buffer, void, void> {
    return {
      begin: () => Promise.resolve(),
      putPart: (_, n, body, signal) => this.putObject(segmentName(key, n), body, {}, signal),
      commit: async (_, segments) => {
        // A previous, larger object under this key must not keep segments beyond the new ones: the manifest
        // would take them in. Before the manifest, so that a failure here commits nothing.
        await this.deleteSegments(key, segments.length);
        await this.putObject(key, Buffer.alloc(0), { 'x-object-manifest': `${this.client.container}/${key}/` });
      },
      // Nothing is committed: remove what was uploaded (a manifest was not written). By name, each segment
      // this save started: a PUT the server finished after we gave up may not be in the container listing
      // yet (Swift updates listings asynchronously), and a DELETE, later by Swift's timestamps, wins over it.
      discard: async (_, started) => {
        if (started === 0) return;
        await this.deleteSegments(key, 0, started).catch((e: unknown) =>
          this.logger.warn({ key, err: describeError(e) }, 'could not remove uploaded segments'),
        );
      },
      putWhole: async (body, signal) => {
        await this.putObject(key, body, {}, signal);
        // The segments of a previous large object under this key are orphans now.
        await this.deleteSegments(key, 0);
      },
      retryable: (err) => isNetworkError(err) || isSnapStoreError(err, 'E_UNREACHABLE'),
    };
  }

  private async putObject(name: string, body: Buffer, headers: Record<string, string>, signal?: AbortSignal): Promise<void> {
    const res = await this.client.request({
      method: 'PUT',
      object: name,
      body,
      headers: { 'content-type': 'application/octet-stream', ...headers },
      ...(signal ? { signal } : {}),
    });
    if (res.status !== 201) throw await this.statusError(res, 'save', `object ${name}`);
    await res.body?.cancel();
  }

  /**
   * Deletes the segments `<key>/%010d` numbered above `keep`; missing ones are fine. With `upTo`, exactly
   * those numbered up to it, by name; otherwise whatever the container lists.
   */
  private async deleteSegments(key: string, keep: number, upTo?: number): Promise<number> {
    const names =
      upTo !== undefined
        ? Array.from({ length: Math.max(0, upTo - keep) }, (_, i) => segmentName(key, keep + 1 + i))
        : (await this.listObjects(`${key}/`))
            .map((o) => o.name)
            .filter((n) => {
              const m = SEGMENT.exec(n);
              return m !== null && n.length === key.length + 11 && Number(m[1]) > keep;
            });
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < names.length) {
        const name = names[next++] as string;
        const res = await this.client.request({ method: 'DELETE', object: name });
        if (res.status !== 204 && res.status !== 200 && res.status !== 404) throw await this.statusError(res, 'delete', `segment ${name}`);
        await res.body?.cancel();
      }
    };
    await Promise.all(Array.from({ length: Math.min(DELETE_CONCURRENCY, names.length) }, worker));
    return names.length;
  }

  /** Segments first, then the manifest (upstream order), so a half-done delete never leaves a manifest without data. */
  async delete(snap: Snapshot): Promise<void> {
    const key = listedObjectKey(snap);
    try {
      const segments = snap.isChunk ? 0 : await this.deleteSegments(key, 0);
      const res = await this.client.request({ method: 'DELETE', object: key });
      if (res.status === 404 && segments > 0) return;
      if (res.status !== 204 && res.status !== 200) throw await this.statusError(res, 'delete', `object ${key}`);
      await res.body?.cancel();
    } catch (err) {
      throw this.mapError(err, 'delete', `object ${key}`);
    }
  }

  async close(): Promise<void> {
    // fetch keeps only idle keep-alive sockets, which do not hold the process open.
  }

  private async statusError(res: Response, op: string, subject: string): Promise<SnapStoreError> {
    const text = (await res.text().catch(() => '')).slice(0, 300);
    const detail = `${op} ${subject} in ${this.where}: HTTP ${res.status}${text ? ` ${text}` : ''}`;
    // Swift answers without error codes; a 404 on a container request means the container is missing.
    const container = res.status === 404 && !(subject.startsWith('object ') || subject.startsWith('segment '));
    const code = container ? 'E_CONFIG' : classifyStoreFailure({ status: res.status });
    if (code === 'E_NOT_FOUND') return new SnapStoreError('E_NOT_FOUND', `${subject} not found in ${this.where}`);
    if (code === 'E_CREDENTIALS') return new SnapStoreError('E_CREDENTIALS', `Swift refused ${detail}`);
    return new SnapStoreError(code, container ? `${detail} (the container does not exist)` : detail);
  }

  private mapSaveError(err: unknown, key: string): unknown {
    if (isSnapStoreError(err) || isAbortError(err)) return err;
    return isNetworkError(err) ? this.mapError(err, 'save', `object ${key}`) : err;
  }

  private mapError(err: unknown, op: string, subject: string): SnapStoreError {
    if (isSnapStoreError(err)) return err;
    if (isNetworkError(err) || isAbortError(err)) {
      return new SnapStoreError('E_UNREACHABLE', `${this.where} is unreachable (${op} ${subject}): ${describeError(err)}`, { cause: err });
    }
    return new SnapStoreError('E_UNREACHABLE', `${op} ${subject} in ${this.where} failed: ${describeError(err)}`, { cause: err });
  }
}
