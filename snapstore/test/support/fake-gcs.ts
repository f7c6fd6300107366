/**
 * A small fake of the Google Cloud Storage JSON API (https://cloud.google.com/storage/docs/json_api)
 * over real HTTP, enough for the real @google-cloud/storage client: no GCS emulator is installable on
 * these machines. It follows the documented wire protocol, not our provider:
 *
 * - objects: list (prefix, delimiter, pageToken, maxResults, startOffset/endOffset), get metadata,
 *   download with `alt=media` (both `/storage/v1/...` and `/download/storage/v1/...`) incl. Range → 206,
 *   delete, patch (custom metadata, holds), compose (≤ 32 sources);
 * - uploads: `uploadType=media|multipart|resumable`; resumable sessions answer `308` with
 *   `Range: bytes=0-N` for partial chunks (`Content-Range: bytes a-b/*`), finalize on a known total,
 *   report status for `bytes *\/*`, and are cancelled with DELETE (`499`);
 * - preconditions `ifGenerationMatch` / `ifGenerationNotMatch` / `ifMetagenerationMatch` → `412`;
 * - bucket retention policy → `retentionExpirationTime` on objects and `403` on delete/overwrite before
 *   it; object holds → `403`;
 * - optional `requireAuth`: requests without `Authorization: Bearer <token>` get `401` as GCS answers
 *   anonymous callers.
 *
 * Object bytes live in files under a temp dir, so large benchmarks do not grow the heap.
 */
import { createHash, randomBytes, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rename, rm, stat, truncate, unlink } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { CRC32C } from '@google-cloud/storage';

export interface FakeGcsOptions {
  /** Buckets that exist from the start. */
  buckets?: string[];
  /**
   * Compute `crc32c` for every object (as GCS always does). The only CRC32C at hand is pure JS at
   * about 100 MB/s, so benchmarks with large objects may turn it off; `md5Hash` is always computed.
   */
  crc32c?: boolean;
  /** Answer 401 to requests that do not carry `Authorization: Bearer <requireAuth>`. */
  requireAuth?: string;
}

export interface FakeGcsObjectInfo {
  name: string;
  size: number;
  generation: number;
  metageneration: number;
  metadata?: Record<string, string>;
  contentType?: string;
  retentionExpirationTime?: Date;
  temporaryHold?: boolean;
  eventBasedHold?: boolean;
  componentCount?: number;
}

/** A request as the fake saw it, for tests that pin what the client sends. */
export interface FakeGcsRequestLog {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  status?: number;
}

/** Return a response to short-circuit a request (fault injection); undefined lets it through. */
export type FakeGcsInterceptor = (req: IncomingMessage, url: URL) => { status: number; body?: unknown } | undefined;

interface StoredObject {
  bucket: string;
  name: string;
  file: string;
  size: number;
  generation: number;
  metageneration: number;
  contentType: string;
  md5Hash?: string;
  crc32c?: string;
  metadata?: Record<string, string>;
  timeCreated: Date;
  updated: Date;
  retentionExpirationTime?: Date;
  temporaryHold?: boolean;
  eventBasedHold?: boolean;
  componentCount?: number;
}

interface Bucket {
  name: string;
  timeCreated: Date;
  metageneration: number;
  objects: Map<string, StoredObject>;
  retentionPeriodSeconds?: number;
  retentionEffectiveTime?: Date;
}

interface UploadSession {
  id: string;
  bucket: string;
  name: string;
  resource: Record<string, unknown>;
  preconditions: Preconditions;
  file: string;
  received: number;
  md5: Hash;
  crc: CRC32C | undefined;
  state: 'active' | 'final' | 'cancelled';
  result?: StoredObject;
  /** Serializes PUTs of one session. */
  busy: Promise<void>;
}

interface Preconditions {
  ifGenerationMatch?: number;
  ifGenerationNotMatch?: number;
  ifMetagenerationMatch?: number;
}

/** GCS: every resumable chunk but the last must carry at least 256 KiB. */
const MIN_RESUMABLE_CHUNK = 256 * 1024;

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly reason: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export class FakeGcsServer {
  readonly buckets = new Map<string, Bucket>();
  /** Every request, in order (bodies are not kept). */
  readonly requests: FakeGcsRequestLog[] = [];
  intercept: FakeGcsInterceptor | undefined;

  private readonly sessions = new Map<string, UploadSession>();
  private generationCounter = Date.now() * 1000;
  private fileCounter = 0;
  private readonly sockets = new Set<import('node:net').Socket>();

  private constructor(
    private readonly server: Server,
    readonly dir: string,
    readonly endpoint: string,
    private readonly opts: FakeGcsOptions,
  ) {}

  static async start(opts: FakeGcsOptions = {}): Promise<FakeGcsServer> {
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-fake-gcs-'));
    const server = createServer();
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', () => resolve());
      });
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    const { port } = server.address() as AddressInfo;
    const fake = new FakeGcsServer(server, dir, `http://127.0.0.1:${port}`, opts);
    server.on('connection', (s) => {
      fake.sockets.add(s);
      s.once('close', () => fake.sockets.delete(s));
    });
    server.on('request', (req, res) => void fake.handle(req, res));
    for (const b of opts.buckets ?? []) fake.createBucket(b);
    return fake;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      for (const s of this.sockets) s.destroy();
    });
    await rm(this.dir, { recursive: true, force: true });
  }

  // ------------------------------------------------------------------------------------------------
  // Direct access for tests (bypasses HTTP)

  createBucket(name: string, opts: { retentionPeriodSeconds?: number } = {}): void {
    if (this.buckets.has(name)) return;
    this.buckets.set(name, {
      name,
      timeCreated: new Date(),
      metageneration: 1,
      objects: new Map(),
      ...(opts.retentionPeriodSeconds !== undefined
        ? { retentionPeriodSeconds: opts.retentionPeriodSeconds, retentionEffectiveTime: new Date() }
        : {}),
    });
  }

  /** Sets (or with undefined removes) the bucket retention period; existing objects follow it, as in GCS. */
  setRetentionPeriod(bucket: string, seconds: number | undefined): void {
    const b = this.bucketOrThrow(bucket);
    if (seconds === undefined) {
      delete b.retentionPeriodSeconds;
      delete b.retentionEffectiveTime;
    } else {
      b.retentionPeriodSeconds = seconds;
      b.retentionEffectiveTime = new Date();
    }
  }

  objectNames(bucket: string): string[] {
    return [...this.bucketOrThrow(bucket).objects.keys()].sort();
  }

  objectInfo(bucket: string, name: string): FakeGcsObjectInfo | undefined {
    const b = this.bucketOrThrow(bucket);
    const o = b.objects.get(name);
    if (!o) return undefined;
    const expiry = this.retentionExpiry(b, o);
    return {
      name: o.name,
      size: o.size,
      generation: o.generation,
      metageneration: o.metageneration,
      contentType: o.contentType,
      ...(o.metadata ? { metadata: { ...o.metadata } } : {}),
      ...(expiry ? { retentionExpirationTime: expiry } : {}),
      ...(o.temporaryHold ? { temporaryHold: true } : {}),
      ...(o.eventBasedHold ? { eventBasedHold: true } : {}),
      ...(o.componentCount !== undefined ? { componentCount: o.componentCount } : {}),
    };
  }

  async putObject(
    bucket: string,
    name: string,
    data: Buffer,
    opts: { metadata?: Record<string, string>; contentType?: string } = {},
  ): Promise<void> {
    const b = this.bucketOrThrow(bucket);
    const file = this.newFile();
    const md5 = createHash('md5').update(data);
    const crc = this.opts.crc32c === false ? undefined : new CRC32C();
    crc?.update(data);
    await pipeline([data], createWriteStream(file));
    await this.commitObject(
      b,
      name,
      file,
      data.length,
      md5,
      crc,
      {
        ...(opts.metadata ? { metadata: opts.metadata } : {}),
        ...(opts.contentType ? { contentType: opts.contentType } : {}),
      },
      {},
    );
  }

  /** Active (not finalized, not cancelled) resumable upload sessions. */
  activeSessions(): { bucket: string; name: string; received: number }[] {
    return [...this.sessions.values()]
      .filter((s) => s.state === 'active')
      .map((s) => ({ bucket: s.bucket, name: s.name, received: s.received }));
  }

  // ------------------------------------------------------------------------------------------------
  // HTTP

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const log: FakeGcsRequestLog = { method: req.method ?? 'GET', url: req.url ?? '/', headers: { ...req.headers } };
    this.requests.push(log);
    res.on('finish', () => {
      log.status = res.statusCode;
    });
    try {
      const url = new URL(req.url ?? '/', 'http://fake');
      const injected = this.intercept?.(req, url);
      if (injected) {
        await drain(req);
        if (injected.body === undefined) {
          sendJson(res, injected.status, errorBody(injected.status, `injected ${injected.status}`, 'injected'));
        } else {
          sendJson(res, injected.status, injected.body);
        }
        return;
      }
      if (this.opts.requireAuth !== undefined && req.headers.authorization !== `Bearer ${this.opts.requireAuth}`) {
        await drain(req);
        const what = url.pathname.includes('/o') ? 'storage.objects.list' : 'storage.buckets.get';
        throw new HttpError(401, `Anonymous caller does not have ${what} access to the Google Cloud Storage bucket.`, 'required', {
          'WWW-Authenticate': 'Bearer realm="https://accounts.google.com/"',
        });
      }
      await this.route(req, res, url);
    } catch (err) {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      await drain(req).catch(() => undefined);
      if (err instanceof HttpError) {
        for (const [k, v] of Object.entries(err.headers)) res.setHeader(k, v);
        sendJson(res, err.status, errorBody(err.status, err.message, err.reason));
      } else {
        sendJson(res, 500, errorBody(500, err instanceof Error ? err.message : String(err), 'backendError'));
      }
    }
  }

  private async route(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const method = req.method ?? 'GET';
    // Object names are one percent-encoded path segment, so split the raw path before decoding.
    const raw = url.pathname.split('/').slice(1);
    const seg = (i: number): string | undefined => {
      const s = raw[i];
      return s === undefined ? undefined : decodeURIComponent(s);
    };
    const q = url.searchParams;

    if (raw[0] === 'upload' && raw[1] === 'storage' && raw[2] === 'v1' && raw[3] === 'b' && raw[5] === 'o' && raw.length === 6) {
      const bucket = seg(4) ?? '';
      if (q.has('upload_id')) {
        if (method === 'PUT' || method === 'POST') return this.resumablePut(req, res, q.get('upload_id') ?? '');
        if (method === 'DELETE') return this.resumableCancel(req, res, q.get('upload_id') ?? '');
      }
      if (method === 'POST') {
        const type = q.get('uploadType');
        if (type === 'media') return this.mediaUpload(req, res, bucket, q);
        if (type === 'multipart') return this.multipartUpload(req, res, bucket, q);
        if (type === 'resumable') return this.resumableStart(req, res, bucket, q);
        throw new HttpError(400, `Invalid uploadType ${JSON.stringify(type)}`, 'invalid');
      }
      throw new HttpError(405, `method ${method} not allowed on upload endpoint`, 'methodNotAllowed');
    }

    const isDownload = raw[0] === 'download';
    const base = isDownload ? raw.slice(1) : raw;
    if (base[0] !== 'storage' || base[1] !== 'v1' || base[2] !== 'b') throw new HttpError(404, `Not Found: ${url.pathname}`, 'notFound');
    const off = isDownload ? 1 : 0;

    // /storage/v1/b
    if (base.length === 3) {
      if (method === 'POST') return this.bucketInsert(req, res);
      if (method === 'GET') {
        await drain(req);
        return sendJson(res, 200, { kind: 'storage#buckets', items: [...this.buckets.values()].map((b) => this.bucketResource(b)) });
      }
    }
    const bucketName = seg(3 + off) ?? '';
    // /storage/v1/b/{bucket}
    if (base.length === 4) {
      await (method === 'PATCH' ? Promise.resolve() : drain(req));
      if (method === 'GET') return sendJson(res, 200, this.bucketResource(this.bucketOrThrow(bucketName)));
      if (method === 'PATCH') return this.bucketPatch(req, res, bucketName);
      if (method === 'DELETE') {
        const b = this.bucketOrThrow(bucketName);
        if (b.objects.size > 0) throw new HttpError(409, 'The bucket you tried to delete is not empty.', 'conflict');
        this.buckets.delete(bucketName);
        res.writeHead(204).end();
        return;
      }
    }
    if (base[4] !== 'o') throw new HttpError(404, `Not Found: ${url.pathname}`, 'notFound');
    // /storage/v1/b/{bucket}/o
    if (base.length === 5) {
      await drain(req);
      if (method === 'GET') return this.listObjects(res, bucketName, q);
      throw new HttpError(405, `method ${method} not allowed`, 'methodNotAllowed');
    }
    const objectName = seg(5 + off) ?? '';
    // /storage/v1/b/{bucket}/o/{object}/compose
    if (base.length === 7 && base[6] === 'compose' && method === 'POST') return this.compose(req, res, bucketName, objectName, q);
    if (base.length !== 6) throw new HttpError(404, `Not Found: ${url.pathname}`, 'notFound');
    if (method === 'GET' && (isDownload || q.get('alt') === 'media')) {
      await drain(req);
      return this.download(req, res, bucketName, objectName, q);
    }
    if (method === 'GET') {
      await drain(req);
      const b = this.bucketOrThrow(bucketName);
      const o = this.objectOrThrow(b, objectName, q);
      return sendJson(res, 200, this.objectResource(b, o));
    }
    if (method === 'DELETE') {
      await drain(req);
      return this.deleteObject(res, bucketName, objectName, q);
    }
    if (method === 'PATCH' || method === 'PUT') return this.patchObject(req, res, bucketName, objectName, q, method === 'PUT');
    throw new HttpError(405, `method ${method} not allowed`, 'methodNotAllowed');
  }

  // --- buckets --------------------------------------------------------------------------------------

  private async bucketInsert(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = (await readJson(req)) as { name?: unknown; retentionPolicy?: { retentionPeriod?: unknown } };
    if (typeof body.name !== 'string' || body.name === '') throw new HttpError(400, 'Required bucket name', 'required');
    if (this.buckets.has(body.name)) {
      throw new HttpError(409, 'Your previous request to create the named bucket succeeded and you already own it.', 'conflict');
    }
    const period = body.retentionPolicy?.retentionPeriod;
    this.createBucket(body.name, period !== undefined ? { retentionPeriodSeconds: Number(period) } : {});
    sendJson(res, 200, this.bucketResource(this.bucketOrThrow(body.name)));
  }

  private async bucketPatch(req: IncomingMessage, res: ServerResponse, name: string): Promise<void> {
    const b = this.bucketOrThrow(name);
    const body = (await readJson(req)) as { retentionPolicy?: { retentionPeriod?: unknown } | null };
    if (body.retentionPolicy === null) this.setRetentionPeriod(name, undefined);
    else if (body.retentionPolicy?.retentionPeriod !== undefined)
      this.setRetentionPeriod(name, Number(body.retentionPolicy.retentionPeriod));
    b.metageneration++;
    sendJson(res, 200, this.bucketResource(b));
  }

  private bucketResource(b: Bucket): Record<string, unknown> {
    return {
      kind: 'storage#bucket',
      id: b.name,
      name: b.name,
      projectNumber: '0',
      metageneration: String(b.metageneration),
      location: 'US',
      storageClass: 'STANDARD',
      etag: 'CAE=',
      timeCreated: b.timeCreated.toISOString(),
      updated: b.timeCreated.toISOString(),
      ...(b.retentionPeriodSeconds !== undefined
        ? {
            retentionPolicy: {
              retentionPeriod: String(b.retentionPeriodSeconds),
              effectiveTime: (b.retentionEffectiveTime ?? b.timeCreated).toISOString(),
            },
          }
        : {}),
    };
  }

  // --- objects --------------------------------------------------------------------------------------

  private listObjects(res: ServerResponse, bucketName: string, q: URLSearchParams): void {
    const b = this.bucketOrThrow(bucketName);
    const prefix = q.get('prefix') ?? '';
    const delimiter = q.get('delimiter') ?? '';
    const startOffset = q.get('startOffset') ?? '';
    const endOffset = q.get('endOffset') ?? '';
    const maxResults = Math.min(Math.max(Number(q.get('maxResults') ?? 1000) || 1000, 1), 1000);
    const after = q.has('pageToken') ? Buffer.from(q.get('pageToken') ?? '', 'base64url').toString('utf8') : undefined;

    // Entries in name order; with a delimiter, names below it collapse into one prefix entry.
    const entries: { key: string; object?: StoredObject }[] = [];
    const seenPrefixes = new Set<string>();
    for (const name of [...b.objects.keys()].sort(compareBytes)) {
      if (!name.startsWith(prefix)) continue;
      if (startOffset !== '' && compareBytes(name, startOffset) < 0) continue;
      if (endOffset !== '' && compareBytes(name, endOffset) >= 0) continue;
      if (delimiter !== '') {
        const i = name.indexOf(delimiter, prefix.length);
        if (i >= 0) {
          const p = name.slice(0, i + delimiter.length);
          if (!seenPrefixes.has(p)) {
            seenPrefixes.add(p);
            entries.push({ key: p });
          }
          continue;
        }
      }
      entries.push({ key: name, object: b.objects.get(name) as StoredObject });
    }
    const remaining = after === undefined ? entries : entries.filter((e) => compareBytes(e.key, after) > 0);
    const page = remaining.slice(0, maxResults);
    const body: Record<string, unknown> = { kind: 'storage#objects' };
    const items = page.filter((e) => e.object).map((e) => this.objectResource(b, e.object as StoredObject));
    const prefixes = page.filter((e) => !e.object).map((e) => e.key);
    if (items.length > 0) body.items = items;
    if (prefixes.length > 0) body.prefixes = prefixes;
    const last = page[page.length - 1];
    if (remaining.length > page.length && last) body.nextPageToken = Buffer.from(last.key, 'utf8').toString('base64url');
    sendJson(res, 200, body);
  }

  private objectResource(b: Bucket, o: StoredObject): Record<string, unknown> {
    const enc = encodeURIComponent(o.name);
    const expiry = this.retentionExpiry(b, o);
    return {
      kind: 'storage#object',
      id: `${b.name}/${o.name}/${o.generation}`,
      selfLink: `${this.endpoint}/storage/v1/b/${b.name}/o/${enc}`,
      mediaLink: `${this.endpoint}/download/storage/v1/b/${b.name}/o/${enc}?generation=${o.generation}&alt=media`,
      name: o.name,
      bucket: b.name,
      generation: String(o.generation),
      metageneration: String(o.metageneration),
      contentType: o.contentType,
      storageClass: 'STANDARD',
      size: String(o.size),
      ...(o.md5Hash !== undefined ? { md5Hash: o.md5Hash } : {}),
      ...(o.crc32c !== undefined ? { crc32c: o.crc32c } : {}),
      ...(o.componentCount !== undefined ? { componentCount: o.componentCount } : {}),
      etag: Buffer.from(`${o.generation}/${o.metageneration}`).toString('base64'),
      timeCreated: o.timeCreated.toISOString(),
      updated: o.updated.toISOString(),
      timeStorageClassUpdated: o.timeCreated.toISOString(),
      ...(o.metadata && Object.keys(o.metadata).length > 0 ? { metadata: { ...o.metadata } } : {}),
      ...(expiry ? { retentionExpirationTime: expiry.toISOString() } : {}),
      ...(o.temporaryHold ? { temporaryHold: true } : {}),
      ...(o.eventBasedHold ? { eventBasedHold: true } : {}),
    };
  }

  private retentionExpiry(b: Bucket, o: StoredObject): Date | undefined {
    if (b.retentionPeriodSeconds === undefined) return o.retentionExpirationTime;
    return new Date(o.timeCreated.getTime() + b.retentionPeriodSeconds * 1000);
  }

  /** GCS refuses to delete or replace an object under retention or hold (403 Forbidden). */
  private assertMutable(b: Bucket, o: StoredObject, verb: 'deleted' | 'overwritten'): void {
    const expiry = this.retentionExpiry(b, o);
    if (expiry && expiry.getTime() > Date.now()) {
      throw new HttpError(
        403,
        `Object '${b.name}/${o.name}' is subject to bucket's retention policy or object retention and cannot be deleted, overwritten or archived until ${expiry.toISOString()}`,
        'forbidden',
      );
    }
    if (o.temporaryHold)
      throw new HttpError(403, `Object '${b.name}/${o.name}' is under active Temporary hold and cannot be ${verb}.`, 'forbidden');
    if (o.eventBasedHold)
      throw new HttpError(403, `Object '${b.name}/${o.name}' is under active Event-Based hold and cannot be ${verb}.`, 'forbidden');
  }

  private download(req: IncomingMessage, res: ServerResponse, bucketName: string, objectName: string, q: URLSearchParams): void {
    const b = this.bucketOrThrow(bucketName);
    const o = this.objectOrThrow(b, objectName, q);
    const hashes = [o.crc32c !== undefined ? `crc32c=${o.crc32c}` : '', o.md5Hash !== undefined ? `md5=${o.md5Hash}` : '']
      .filter((s) => s !== '')
      .join(',');
    const headers: Record<string, string> = {
      'Content-Type': o.contentType,
      'Accept-Ranges': 'bytes',
      'x-goog-generation': String(o.generation),
      'x-goog-metageneration': String(o.metageneration),
      'x-goog-stored-content-encoding': 'identity',
      'x-goog-stored-content-length': String(o.size),
      ETag: `"${o.md5Hash ?? o.generation}"`,
      'Last-Modified': o.updated.toUTCString(),
    };
    if (hashes !== '') headers['x-goog-hash'] = hashes;
    const range = req.headers.range;
    let start = 0;
    let end = o.size - 1;
    let status = 200;
    if (typeof range === 'string' && range !== '') {
      const parsed = parseRangeHeader(range, o.size);
      if (parsed === 'unsatisfiable') {
        res.writeHead(416, { 'Content-Range': `bytes */${o.size}`, 'Content-Type': 'application/json; charset=UTF-8' });
        res.end(JSON.stringify(errorBody(416, 'The requested range cannot be satisfied.', 'requestedRangeNotSatisfiable')));
        return;
      }
      if (parsed) {
        ({ start, end } = parsed);
        status = 206;
        headers['Content-Range'] = `bytes ${start}-${end}/${o.size}`;
      }
    }
    const length = o.size === 0 ? 0 : end - start + 1;
    headers['Content-Length'] = String(length);
    res.writeHead(status, headers);
    if (length === 0) {
      res.end();
      return;
    }
    const stream = createReadStream(o.file, { start, end });
    stream.on('error', () => res.destroy());
    stream.pipe(res);
  }

  private async deleteObject(res: ServerResponse, bucketName: string, objectName: string, q: URLSearchParams): Promise<void> {
    const b = this.bucketOrThrow(bucketName);
    const o = this.objectOrThrow(b, objectName, q);
    checkPreconditions(o, readPreconditions(q), `${b.name}/${o.name}`);
    this.assertMutable(b, o, 'deleted');
    b.objects.delete(objectName);
    await unlink(o.file).catch(() => undefined);
    res.writeHead(204).end();
  }

  private async patchObject(
    req: IncomingMessage,
    res: ServerResponse,
    bucketName: string,
    objectName: string,
    q: URLSearchParams,
    replace: boolean,
  ): Promise<void> {
    const body = (await readJson(req)) as {
      metadata?: Record<string, string | null> | null;
      contentType?: string;
      temporaryHold?: boolean;
      eventBasedHold?: boolean;
    };
    const b = this.bucketOrThrow(bucketName);
    const o = this.objectOrThrow(b, objectName, q);
    checkPreconditions(o, readPreconditions(q), `${b.name}/${o.name}`);
    // Custom metadata patches merge; a null value removes a key; PUT (update) replaces everything.
    if (replace) delete o.metadata;
    if (body.metadata === null) delete o.metadata;
    else if (body.metadata) {
      const merged: Record<string, string> = { ...(o.metadata ?? {}) };
      for (const [k, v] of Object.entries(body.metadata)) {
        if (v === null) delete merged[k];
        else merged[k] = String(v);
      }
      o.metadata = merged;
    }
    if (body.contentType !== undefined) o.contentType = body.contentType;
    if (body.temporaryHold !== undefined) o.temporaryHold = body.temporaryHold;
    if (body.eventBasedHold !== undefined) o.eventBasedHold = body.eventBasedHold;
    o.metageneration++;
    o.updated = new Date();
    sendJson(res, 200, this.objectResource(b, o));
  }

  private async compose(req: IncomingMessage, res: ServerResponse, bucketName: string, dest: string, q: URLSearchParams): Promise<void> {
    const body = (await readJson(req)) as {
      sourceObjects?: { name?: string; generation?: string | number; objectPreconditions?: { ifGenerationMatch?: string | number } }[];
      destination?: { contentType?: string; metadata?: Record<string, string> };
    };
    const b = this.bucketOrThrow(bucketName);
    const sources = body.sourceObjects ?? [];
    if (sources.length === 0) throw new HttpError(400, 'Required sourceObjects', 'required');
    if (sources.length > 32)
      throw new HttpError(400, 'The number of source components provided (' + sources.length + ') exceeds the maximum (32)', 'invalid');
    const parts: StoredObject[] = [];
    for (const s of sources) {
      const o = b.objects.get(s.name ?? '');
      if (!o || (s.generation !== undefined && Number(s.generation) !== o.generation)) {
        throw new HttpError(404, `Object ${b.name}/${s.name ?? ''} not found.`, 'notFound');
      }
      const pre = s.objectPreconditions?.ifGenerationMatch;
      if (pre !== undefined && Number(pre) !== o.generation) throw new HttpError(412, 'Precondition Failed', 'conditionNotMet');
      parts.push(o);
    }
    const file = this.newFile();
    const md5 = createHash('md5');
    const crc = this.opts.crc32c === false ? undefined : new CRC32C();
    let size = 0;
    const out = createWriteStream(file);
    try {
      for (const p of parts) {
        for await (const chunk of createReadStream(p.file)) {
          const buf = chunk as Buffer;
          crc?.update(buf);
          md5.update(buf);
          size += buf.length;
          if (!out.write(buf)) await new Promise<void>((r) => out.once('drain', () => r()));
        }
      }
      await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
    } catch (err) {
      out.destroy();
      await unlink(file).catch(() => undefined);
      throw err;
    }
    const componentCount = parts.reduce((n, p) => n + (p.componentCount ?? 1), 0);
    const o = await this.commitObject(b, dest, file, size, undefined, crc, body.destination ?? {}, readPreconditions(q), componentCount);
    sendJson(res, 200, this.objectResource(b, o));
  }

  // --- uploads --------------------------------------------------------------------------------------

  private async mediaUpload(req: IncomingMessage, res: ServerResponse, bucketName: string, q: URLSearchParams): Promise<void> {
    const b = this.bucketOrThrow(bucketName);
    const name = q.get('name');
    if (!name) throw new HttpError(400, 'Required parameter: name', 'required');
    const file = this.newFile();
    const md5 = createHash('md5');
    const crc = this.opts.crc32c === false ? undefined : new CRC32C();
    const size = await writeBody(req, file, md5, crc);
    const contentType = typeof req.headers['content-type'] === 'string' ? req.headers['content-type'] : undefined;
    const o = await this.commitObject(b, name, file, size, md5, crc, contentType ? { contentType } : {}, readPreconditions(q));
    sendJson(res, 200, this.objectResource(b, o));
  }

  private async multipartUpload(req: IncomingMessage, res: ServerResponse, bucketName: string, q: URLSearchParams): Promise<void> {
    const b = this.bucketOrThrow(bucketName);
    const ct = req.headers['content-type'] ?? '';
    const m = /boundary="?([^";]+)"?/i.exec(ct);
    if (!/^multipart\/related/i.test(ct) || !m?.[1])
      throw new HttpError(400, 'multipart upload needs Content-Type multipart/related with a boundary', 'invalid');
    const body = await readBody(req);
    const parts = splitMultipart(body, m[1]);
    const metaPart = parts[0];
    const mediaPart = parts[1];
    if (!metaPart || !mediaPart) throw new HttpError(400, 'multipart upload needs a metadata part and a media part', 'invalid');
    const resource = JSON.parse(metaPart.body.toString('utf8') || '{}') as {
      name?: string;
      contentType?: string;
      metadata?: Record<string, string>;
    };
    const name = resource.name ?? q.get('name');
    if (!name) throw new HttpError(400, 'Required parameter: name', 'required');
    const file = this.newFile();
    const md5 = createHash('md5').update(mediaPart.body);
    const crc = this.opts.crc32c === false ? undefined : new CRC32C();
    crc?.update(mediaPart.body);
    await pipeline([mediaPart.body], createWriteStream(file));
    const contentType = resource.contentType ?? mediaPart.headers['content-type'];
    const o = await this.commitObject(
      b,
      name,
      file,
      mediaPart.body.length,
      md5,
      crc,
      { ...(resource.metadata ? { metadata: resource.metadata } : {}), ...(contentType ? { contentType } : {}) },
      readPreconditions(q),
      undefined,
      req.headers['x-goog-hash'],
    );
    sendJson(res, 200, this.objectResource(b, o));
  }

  private async resumableStart(req: IncomingMessage, res: ServerResponse, bucketName: string, q: URLSearchParams): Promise<void> {
    const b = this.bucketOrThrow(bucketName);
    const body = await readBody(req);
    const resource = (body.length > 0 ? JSON.parse(body.toString('utf8')) : {}) as Record<string, unknown>;
    const name = (typeof resource.name === 'string' ? resource.name : undefined) ?? q.get('name');
    if (!name) throw new HttpError(400, 'Required parameter: name', 'required');
    const preconditions = readPreconditions(q);
    // Preconditions are checked when the session starts and again when it finalizes.
    const existing = b.objects.get(name);
    if (existing) checkPreconditions(existing, preconditions, `${b.name}/${name}`);
    else if (preconditions.ifGenerationMatch !== undefined && preconditions.ifGenerationMatch !== 0) {
      throw new HttpError(412, 'At least one of the pre-conditions you specified did not hold.', 'conditionNotMet');
    }
    const uploadContentType = req.headers['x-upload-content-type'];
    if (typeof uploadContentType === 'string' && resource.contentType === undefined) resource.contentType = uploadContentType;
    const id = randomBytes(16).toString('hex');
    const session: UploadSession = {
      id,
      bucket: b.name,
      name,
      resource,
      preconditions,
      file: this.newFile(),
      received: 0,
      md5: createHash('md5'),
      crc: this.opts.crc32c === false ? undefined : new CRC32C(),
      state: 'active',
      busy: Promise.resolve(),
    };
    await pipeline([Buffer.alloc(0)], createWriteStream(session.file));
    this.sessions.set(id, session);
    const origin = `http://${req.headers.host ?? this.endpoint.replace(/^http:\/\//, '')}`;
    const location = `${origin}/upload/storage/v1/b/${encodeURIComponent(b.name)}/o?uploadType=resumable&name=${encodeURIComponent(name)}&upload_id=${id}`;
    res.writeHead(200, { Location: location, 'X-GUploader-UploadID': id, 'Content-Length': '0' });
    res.end();
  }

  private async resumableCancel(req: IncomingMessage, res: ServerResponse, id: string): Promise<void> {
    await drain(req);
    const s = this.sessions.get(id);
    if (!s) throw new HttpError(404, 'No such upload session', 'notFound');
    if (s.state === 'active') {
      s.state = 'cancelled';
      await unlink(s.file).catch(() => undefined);
    }
    // GCS answers a successful cancellation with the non-standard status 499.
    res.writeHead(499, { 'Content-Length': '0' }).end();
  }

  private async resumablePut(req: IncomingMessage, res: ServerResponse, id: string): Promise<void> {
    const s = this.sessions.get(id);
    if (!s) {
      await drain(req);
      throw new HttpError(404, 'No such upload session', 'notFound');
    }
    // One PUT at a time per session, as GCS serializes writes to a session.
    const prev = s.busy;
    let release!: () => void;
    s.busy = new Promise((r) => (release = r));
    await prev;
    try {
      await this.resumablePutLocked(req, res, s);
    } finally {
      release();
    }
  }

  private async resumablePutLocked(req: IncomingMessage, res: ServerResponse, s: UploadSession): Promise<void> {
    if (s.state === 'cancelled') {
      await drain(req);
      throw new HttpError(499, 'Upload session was cancelled', 'clientClosedRequest');
    }
    if (s.state === 'final') {
      await drain(req);
      const b = this.bucketOrThrow(s.bucket);
      return sendJson(res, 200, this.objectResource(b, s.result as StoredObject));
    }
    const header = req.headers['content-range'];
    const cr = header === undefined ? { kind: 'whole' as const } : parseContentRange(header);
    if (cr === undefined) {
      await drain(req);
      throw new HttpError(400, `Invalid Content-Range ${JSON.stringify(header)}`, 'invalid');
    }
    if (cr.kind === 'status') {
      await drain(req);
      if (cr.total !== undefined && cr.total === s.received) return this.finalizeSession(res, s, req.headers['x-goog-hash']);
      if (cr.total !== undefined && cr.total !== s.received) {
        throw new HttpError(400, `Upload session has ${s.received} bytes, total ${cr.total} given`, 'invalid');
      }
      return send308(res, s.received);
    }
    const first = cr.kind === 'whole' ? 0 : cr.first;
    if (first > s.received) {
      await drain(req);
      throw new HttpError(400, `Chunk starts at ${first} but the session only has ${s.received} bytes`, 'invalid');
    }
    const declared = Number(req.headers['content-length'] ?? NaN);
    const isFinal =
      cr.kind === 'whole' ||
      cr.last === undefined ||
      (cr.total !== undefined && first + (Number.isNaN(declared) ? 0 : declared) >= cr.total);
    if (!isFinal && !Number.isNaN(declared) && declared < MIN_RESUMABLE_CHUNK) {
      await drain(req);
      throw new HttpError(
        400,
        `Invalid request. The number of bytes uploaded is required to be equal or greater than ${MIN_RESUMABLE_CHUNK}, except for the final request. The received request contained ${declared} bytes.`,
        'invalid',
      );
    }
    // Bytes the server already has (a client resending after a lost answer) are skipped.
    const skip = s.received - first;
    const chunk = await appendBody(req, s.file, skip, s.md5, s.crc);
    // Cancelled while this chunk was arriving: the session is gone, whatever the chunk said.
    if ((s.state as UploadSession['state']) === 'cancelled')
      throw new HttpError(499, 'Upload session was cancelled', 'clientClosedRequest');
    const written = chunk.written;
    s.md5 = chunk.md5;
    s.crc = chunk.crc;
    s.received += written;
    // No Content-Range, or an open end (`a-*`): this request carries the rest of the object.
    const streamedToEnd = cr.kind === 'whole' || cr.last === undefined;
    if (streamedToEnd && cr.kind === 'range' && cr.total !== undefined && cr.total !== s.received) {
      throw new HttpError(400, `Received ${s.received} bytes, total ${cr.total} given`, 'invalid');
    }
    const total = streamedToEnd ? s.received : cr.total;
    if (total === undefined) return send308(res, s.received);
    if (s.received > total) throw new HttpError(400, `Received ${s.received} bytes, more than the total ${total}`, 'invalid');
    if (s.received < total) return send308(res, s.received);
    return this.finalizeSession(res, s, req.headers['x-goog-hash']);
  }

  private async finalizeSession(res: ServerResponse, s: UploadSession, xGoogHash: string | string[] | undefined): Promise<void> {
    const b = this.bucketOrThrow(s.bucket);
    const resource = s.resource as { contentType?: string; metadata?: Record<string, string> };
    const o = await this.commitObject(
      b,
      s.name,
      s.file,
      s.received,
      s.md5,
      s.crc,
      {
        ...(resource.metadata ? { metadata: resource.metadata } : {}),
        ...(resource.contentType ? { contentType: resource.contentType } : {}),
      },
      s.preconditions,
      undefined,
      xGoogHash,
    );
    s.state = 'final';
    s.result = o;
    sendJson(res, 200, this.objectResource(b, o));
  }

  /** Makes a written file the live generation of `name`: the only place objects become visible. */
  private async commitObject(
    b: Bucket,
    name: string,
    file: string,
    size: number,
    md5: Hash | undefined,
    crc: CRC32C | undefined,
    resource: { contentType?: string; metadata?: Record<string, string> },
    preconditions: Preconditions,
    componentCount?: number,
    xGoogHash?: string | string[],
  ): Promise<StoredObject> {
    try {
      const existing = b.objects.get(name);
      if (existing) {
        checkPreconditions(existing, preconditions, `${b.name}/${name}`);
        this.assertMutable(b, existing, 'overwritten');
      } else if (preconditions.ifGenerationMatch !== undefined && preconditions.ifGenerationMatch !== 0) {
        throw new HttpError(412, 'At least one of the pre-conditions you specified did not hold.', 'conditionNotMet');
      }
      const md5Hash = md5?.digest('base64');
      const crc32c = crc?.toString();
      // A client-supplied X-Goog-Hash must match what arrived, or the object is not created.
      for (const pair of (Array.isArray(xGoogHash) ? xGoogHash.join(',') : (xGoogHash ?? '')).split(',')) {
        const i = pair.indexOf('=');
        if (i < 0) continue;
        const kind = pair.slice(0, i).trim();
        const value = pair.slice(i + 1).trim();
        if (
          (kind === 'md5' && md5Hash !== undefined && value !== md5Hash) ||
          (kind === 'crc32c' && crc32c !== undefined && value !== crc32c)
        ) {
          throw new HttpError(400, `Provided ${kind} hash "${value}" doesn't match calculated hash`, 'invalid');
        }
      }
      const live = join(this.dir, `obj-${++this.fileCounter}`);
      await rename(file, live);
      const now = new Date();
      const o: StoredObject = {
        bucket: b.name,
        name,
        file: live,
        size,
        generation: ++this.generationCounter,
        metageneration: 1,
        contentType: resource.contentType ?? 'application/octet-stream',
        ...(md5Hash !== undefined ? { md5Hash } : {}),
        ...(crc32c !== undefined ? { crc32c } : {}),
        ...(resource.metadata && Object.keys(resource.metadata).length > 0
          ? { metadata: Object.fromEntries(Object.entries(resource.metadata).map(([k, v]) => [k, String(v)])) }
          : {}),
        timeCreated: now,
        updated: now,
        ...(componentCount !== undefined ? { componentCount } : {}),
      };
      b.objects.set(name, o);
      if (existing) await unlink(existing.file).catch(() => undefined);
      return o;
    } catch (err) {
      await unlink(file).catch(() => undefined);
      throw err;
    }
  }

  private newFile(): string {
    return join(this.dir, `tmp-${++this.fileCounter}-${randomBytes(4).toString('hex')}`);
  }

  private bucketOrThrow(name: string): Bucket {
    const b = this.buckets.get(name);
    if (!b) throw new HttpError(404, 'The specified bucket does not exist.', 'notFound');
    return b;
  }

  private objectOrThrow(b: Bucket, name: string, q: URLSearchParams): StoredObject {
    const o = b.objects.get(name);
    const gen = q.get('generation');
    if (!o || (gen !== null && Number(gen) !== o.generation)) throw new HttpError(404, `No such object: ${b.name}/${name}`, 'notFound');
    return o;
  }
}

// --------------------------------------------------------------------------------------------------
// Protocol helpers

function errorBody(code: number, message: string, reason: string): Record<string, unknown> {
  return { error: { code, message, errors: [{ message, domain: 'global', reason }] } };
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json; charset=UTF-8', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/** `308 Resume Incomplete`; `Range` names the persisted bytes and is absent when there are none. */
function send308(res: ServerResponse, received: number): void {
  const headers: Record<string, string> = { 'Content-Length': '0' };
  if (received > 0) headers.Range = `bytes=0-${received - 1}`;
  res.writeHead(308, headers).end();
}

function readPreconditions(q: URLSearchParams): Preconditions {
  const num = (k: string): number | undefined => (q.has(k) ? Number(q.get(k)) : undefined);
  const p: Preconditions = {};
  const gm = num('ifGenerationMatch');
  const gnm = num('ifGenerationNotMatch');
  const mm = num('ifMetagenerationMatch');
  if (gm !== undefined) p.ifGenerationMatch = gm;
  if (gnm !== undefined) p.ifGenerationNotMatch = gnm;
  if (mm !== undefined) p.ifMetagenerationMatch = mm;
  return p;
}

function checkPreconditions(o: StoredObject, p: Preconditions, what: string): void {
  const failed =
    (p.ifGenerationMatch !== undefined && p.ifGenerationMatch !== o.generation) ||
    (p.ifGenerationNotMatch !== undefined && p.ifGenerationNotMatch === o.generation) ||
    (p.ifMetagenerationMatch !== undefined && p.ifMetagenerationMatch !== o.metageneration);
  if (failed) throw new HttpError(412, `At least one of the pre-conditions you specified did not hold (${what}).`, 'conditionNotMet');
}

type ContentRange =
  { kind: 'status'; total?: number } | { kind: 'range'; first: number; last?: number; total?: number } | { kind: 'whole' };

/** Content-Range forms: `bytes *\/*`, `bytes *\/N`, `bytes a-b/*`, `bytes a-b/N`, `bytes a-*\/*` (to the end). */
export function parseContentRange(value: string | string[]): ContentRange | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  const m = /^bytes (\*|(\d+)-(\d+|\*|-1))\/(\*|\d+)$/.exec((v ?? '').trim());
  if (!m) return undefined;
  const total = m[4] === '*' ? undefined : Number(m[4]);
  if (m[1] === '*') return total === undefined ? { kind: 'status' } : { kind: 'status', total };
  const first = Number(m[2]);
  // `a-*` streams until the request ends; `0--1` is what a client sends for an empty final chunk.
  const last = m[3] === '*' ? undefined : Number(m[3]);
  if (last !== undefined && last < first - 1) return undefined;
  return { kind: 'range', first, ...(last !== undefined ? { last } : {}), ...(total !== undefined ? { total } : {}) };
}

/** `bytes=a-b`, `bytes=a-`, `bytes=-n`; undefined = ignore the header (serve all), as HTTP allows. */
export function parseRangeHeader(value: string, size: number): { start: number; end: number } | 'unsatisfiable' | undefined {
  const m = /^bytes=(\d*)-(\d*)$/.exec(value.trim());
  if (!m || (m[1] === '' && m[2] === '')) return undefined;
  if (m[1] === '') {
    const n = Number(m[2]);
    if (n === 0 || size === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - n), end: size - 1 };
  }
  const start = Number(m[1]);
  const end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  if (start >= size || end < start) return 'unsatisfiable';
  return { start, end };
}

function compareBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

async function drain(req: IncomingMessage): Promise<void> {
  if (req.readableEnded) return;
  req.resume();
  await new Promise<void>((resolve) => {
    req.once('end', resolve);
    req.once('close', resolve);
    req.once('error', () => resolve());
  });
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const body = await readBody(req);
  if (body.length === 0) return {};
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    throw new HttpError(400, 'Parse Error', 'parseError');
  }
}

/** Hashes while passing bytes through, dropping the first `skip` bytes. */
class HashingSkipper extends Transform {
  written = 0;
  constructor(
    private skip: number,
    private readonly md5: Hash,
    private readonly crc: CRC32C | undefined,
  ) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    let c = chunk;
    if (this.skip > 0) {
      const n = Math.min(this.skip, c.length);
      this.skip -= n;
      c = c.subarray(n);
    }
    if (c.length > 0) {
      this.md5.update(c);
      this.crc?.update(c);
      this.written += c.length;
      this.push(c);
    }
    cb();
  }
}

async function writeBody(req: IncomingMessage, file: string, md5: Hash, crc: CRC32C | undefined): Promise<number> {
  const t = new HashingSkipper(0, md5, crc);
  try {
    await pipeline(req, t, createWriteStream(file));
  } catch (err) {
    await unlink(file).catch(() => undefined);
    throw err;
  }
  return t.written;
}

/**
 * Appends a chunk to a session file. A request that breaks off keeps nothing of its bytes (the
 * file is cut back), which is allowed: the client asks for the persisted range and resends. The
 * running hashes are advanced on copies and handed back only for a complete chunk.
 */
async function appendBody(
  req: IncomingMessage,
  file: string,
  skip: number,
  md5: Hash,
  crc: CRC32C | undefined,
): Promise<{ written: number; md5: Hash; crc: CRC32C | undefined }> {
  const before = (await stat(file)).size;
  const md5Copy = md5.copy();
  const crcCopy = crc ? CRC32C.from(crc.toString()) : undefined;
  const t = new HashingSkipper(skip, md5Copy, crcCopy);
  try {
    await pipeline(req, t, createWriteStream(file, { flags: 'a' }));
  } catch (err) {
    await truncate(file, before).catch(() => undefined);
    throw err;
  }
  return { written: t.written, md5: md5Copy, crc: crcCopy };
}

function splitMultipart(body: Buffer, boundary: string): { headers: Record<string, string>; body: Buffer }[] {
  const delim = Buffer.from(`--${boundary}`);
  const parts: { headers: Record<string, string>; body: Buffer }[] = [];
  let pos = body.indexOf(delim);
  while (pos >= 0) {
    let start = pos + delim.length;
    if (body.subarray(start, start + 2).toString() === '--') break;
    if (body.subarray(start, start + 2).toString() === '\r\n') start += 2;
    const next = body.indexOf(delim, start);
    if (next < 0) break;
    let partEnd = next;
    if (body.subarray(partEnd - 2, partEnd).toString() === '\r\n') partEnd -= 2;
    const part = body.subarray(start, partEnd);
    const sep = part.indexOf('\r\n\r\n');
    const headerText = sep >= 0 ? part.subarray(0, sep).toString('utf8') : '';
    const headers: Record<string, string> = {};
    for (const line of headerText.split('\r\n')) {
      const i = line.indexOf(':');
      if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    parts.push({ headers, body: sep >= 0 ? part.subarray(sep + 4) : Buffer.alloc(0) });
    pos = next;
  }
  return parts;
}
