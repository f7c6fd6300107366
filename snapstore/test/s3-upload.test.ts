import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { crc32 } from 'node:zlib';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Logger } from '../src/logger.js';
import { silentLogger } from '../src/logger.js';
import { PartFileBody } from '../src/providers/part-file-body.js';
import { UploadFailedError, uploadStream } from '../src/providers/s3-upload.js';
import type { PartRetryPolicy, StreamUploadOptions } from '../src/providers/s3-upload.js';
import { removeLeftoverSpoolFiles } from '../src/spool-files.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from './support/s3rver.js';
import type { S3rverInstance } from './support/s3rver.js';
import { writeSelfSignedCert } from '../../test/support/certs.js';
import { waitFor } from '../../test/support/wait.js';

const MiB = 1024 * 1024;
const PART = 5 * MiB;

interface Seen {
  method: string;
  url: string;
  query: URLSearchParams;
  headers: http.IncomingHttpHeaders;
  /** Request body, kept for POSTs only (CompleteMultipartUpload lists the parts). */
  body?: string;
  bytes: number;
  /** SHA-256 (hex) and CRC32 (base64, big-endian, as S3's checksum header) of the body as it arrived. */
  sha256?: string;
  crc32?: string;
  status?: number;
}

/** What the test proxy does with a request: pass it on (after an optional wait), fail it, or never answer. */
type Verdict = undefined | { fail: number; code: string } | 'hang';

/**
 * An HTTP proxy in front of s3rver that lets a test fail, delay or stall chosen requests and see what
 * was sent (parts and their sizes, the Complete body, in-flight UploadParts). A fault is answered
 * only after the request body is drained, as S3 does, so the client sees the status, not a reset.
 */
async function startFaultProxy(target: string) {
  const t = new URL(target);
  const seen: Seen[] = [];
  let decide: (s: Seen) => Promise<Verdict> | Verdict = () => undefined;
  let partsInFlight = 0;
  let maxPartsInFlight = 0;
  const server = http.createServer((req, res) => {
    const query = new URL(req.url ?? '', 'http://x').searchParams;
    const rec: Seen = { method: req.method ?? '', url: req.url ?? '', query, headers: req.headers, bytes: 0 };
    seen.push(rec);
    const isPart = rec.method === 'PUT' && query.has('partNumber');
    if (isPart) maxPartsInFlight = Math.max(maxPartsInFlight, ++partsInFlight);
    let counted = isPart;
    const done = (): void => {
      if (counted) partsInFlight--;
      counted = false;
    };
    res.on('close', done);
    // Nothing reads the body until the verdict is in, so a delayed request loses none of it.
    const chunks: Buffer[] = [];
    const bodyHash = createHash('sha256');
    let bodyCrc = 0;
    const tap = new Transform({
      transform(c: Buffer, _enc, cb) {
        rec.bytes += c.length;
        bodyHash.update(c);
        bodyCrc = crc32(c, bodyCrc);
        if (rec.method === 'POST') chunks.push(c);
        cb(null, c);
      },
      flush(cb) {
        if (chunks.length > 0) rec.body = Buffer.concat(chunks).toString('utf8');
        rec.sha256 = bodyHash.digest('hex');
        const crc = Buffer.alloc(4);
        crc.writeUInt32BE(bodyCrc >>> 0);
        rec.crc32 = crc.toString('base64');
        cb();
      },
    });
    void Promise.resolve(decide(rec)).then((verdict) => {
      if (verdict === 'hang') {
        req.pipe(tap).resume();
        return;
      }
      if (verdict) {
        req.pipe(tap).resume();
        tap.on('end', () => {
          rec.status = verdict.fail;
          res
            .writeHead(verdict.fail, { 'content-type': 'application/xml' })
            .end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${verdict.code}</Code><Message>injected</Message></Error>`);
        });
        return;
      }
      const up = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        rec.status = answer.statusCode;
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      up.on('error', () => {
        if (!res.headersSent) res.writeHead(502);
        res.end();
      });
      req.on('error', () => up.destroy());
      req.pipe(tap).pipe(up);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    seen,
    get maxPartsInFlight() {
      return maxPartsInFlight;
    },
    reset(next: (s: Seen) => Promise<Verdict> | Verdict = () => undefined) {
      seen.length = 0;
      maxPartsInFlight = 0;
      decide = next;
    },
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Deterministic bytes in uneven chunks; counts what was pulled so tests can see backpressure. */
function source(size: number, opts: { chunk?: number; failAfter?: number; seed?: number } = {}) {
  const chunk = opts.chunk ?? 100_003;
  const hash = createHash('sha256');
  let produced = 0;
  let x = opts.seed ?? 0x12345678;
  const stream = new Readable({
    highWaterMark: 64 * 1024,
    read() {
      if (opts.failAfter !== undefined && produced >= opts.failAfter) {
        this.destroy(new Error(`source failed on purpose after ${produced} bytes`));
        return;
      }
      if (produced >= size) {
        this.push(null);
        return;
      }
      const n = Math.min(chunk, size - produced);
      const b = Buffer.allocUnsafe(n);
      for (let i = 0; i < n; i++) {
        if ((i & 3) === 0) x = (Math.imul(x, 1103515245) + 12345) >>> 0;
        b[i] = (x >>> ((i & 3) * 8)) & 0xff;
      }
      hash.update(b);
      produced += n;
      this.push(b);
    },
  });
  return {
    stream,
    get produced() {
      return produced;
    },
    digest: () => hash.copy().digest('hex'),
  };
}

const isPart = (s: Seen): boolean => s.method === 'PUT' && s.query.has('partNumber');
const partNo = (s: Seen): number => Number(s.query.get('partNumber'));
const isComplete = (s: Seen): boolean => s.method === 'POST' && s.query.has('uploadId');
const isAbort = (s: Seen): boolean => s.method === 'DELETE' && s.query.has('uploadId');
const isCreate = (s: Seen): boolean => s.method === 'POST' && s.query.has('uploads');

function captureLogger(): Logger & { warnings: string[]; retryDelays: number[] } {
  const warnings: string[] = [];
  const retryDelays: number[] = [];
  return {
    ...silentLogger,
    warnings,
    retryDelays,
    warn: (obj: object | string, msg?: string) => {
      warnings.push(msg ?? String(obj));
      const delay = typeof obj === 'object' ? (obj as { delayMs?: unknown }).delayMs : undefined;
      if (typeof delay === 'number') retryDelays.push(delay);
    },
  };
}

async function failure(p: Promise<unknown>): Promise<UploadFailedError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(UploadFailedError);
    return err as UploadFailedError;
  }
  throw new Error('expected the upload to fail');
}

const FAST_RETRY: PartRetryPolicy = { retries: 2, baseDelayMs: 20, timeoutMs: 30_000 };

// Every upload's part files go here; each suite checks that none outlives its upload.
let spool: string;
beforeAll(async () => {
  spool = await mkdtemp(path.join(os.tmpdir(), 's3-upload-spool-'));
});
afterAll(async () => {
  if (spool) await rm(spool, { recursive: true, force: true });
});

describe('uploadStream (multipart through part files) against s3rver', () => {
  let srv: S3rverInstance;
  let proxy: Awaited<ReturnType<typeof startFaultProxy>>;
  let client: S3Client;
  let n = 0;

  beforeAll(async () => {
    srv = await startS3rver();
    proxy = await startFaultProxy(srv.endpoint);
    client = new S3Client({
      endpoint: proxy.endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY },
      // No SDK retries: every failure the proxy injects reaches the uploader's own retry.
      maxAttempts: 1,
      requestHandler: { httpAgent: new http.Agent({ keepAlive: true }) },
    });
  });
  afterAll(async () => {
    client?.destroy();
    await proxy?.stop();
    await srv?.stop();
  });
  beforeEach(() => proxy.reset());
  // No part file outlives its upload, whether it succeeded or failed.
  afterEach(async () => expect(await readdir(spool)).toEqual([]));

  const options = (over: Partial<StreamUploadOptions> = {}): StreamUploadOptions => ({
    client,
    bucket: srv.bucket,
    key: `up/${++n}`,
    partSize: PART,
    concurrency: 3,
    spoolDir: spool,
    retry: FAST_RETRY,
    logger: silentLogger,
    ...over,
  });

  async function stored(key: string): Promise<{ size: number; hex: string }> {
    const out = await client.send(new GetObjectCommand({ Bucket: srv.bucket, Key: key }));
    const hash = createHash('sha256');
    let size = 0;
    for await (const c of out.Body as Readable) {
      hash.update(c as Buffer);
      size += (c as Buffer).length;
    }
    return { size, hex: hash.digest('hex') };
  }

  it('cuts the input into parts of exactly partSize and completes them in order, even when they finish out of order', async () => {
    // Part 1 answers last (it goes to S3 only once the other three were answered): the Complete request
    // must still list 1, 2, 3, 4.
    proxy.reset(async (s) => {
      if (isPart(s) && partNo(s) === 1) {
        await waitFor(
          () => proxy.seen.filter((x) => isPart(x) && partNo(x) > 1 && x.status === 200).length === 3,
          'parts 2 to 4 answered',
          20_000,
          10,
        );
      }
      return undefined;
    });
    const size = 3 * PART + 777_777;
    const src = source(size);
    const opts = options();
    const r = await uploadStream(src.stream, opts);
    expect(r).toMatchObject({ bytes: size, parts: 4, retries: 0 });

    const parts = proxy.seen.filter(isPart);
    expect(parts.map((p) => [partNo(p), p.bytes]).sort((a, b) => (a[0] as number) - (b[0] as number))).toEqual([
      [1, PART],
      [2, PART],
      [3, PART],
      [4, 777_777],
    ]);
    const answered = parts.filter((p) => p.status === 200).map(partNo);
    expect(answered).toHaveLength(4);
    const complete = proxy.seen.find(isComplete);
    const listed = [...(complete?.body ?? '').matchAll(/<PartNumber>(\d+)<\/PartNumber>/g)].map((m) => Number(m[1]));
    expect(listed).toEqual([1, 2, 3, 4]);
    expect(await stored(opts.key)).toEqual({ size, hex: src.digest() });
  });

  it('an input that ends within the first part is one PutObject; an exact part is a one-part upload', async () => {
    for (const size of [0, 1, PART - 1]) {
      proxy.reset();
      const src = source(size);
      const opts = options();
      const r = await uploadStream(src.stream, opts);
      expect(r).toMatchObject({ bytes: size, parts: 0, maxPartFiles: 0 });
      expect(proxy.seen.map((s) => `${s.method} ${s.query.toString()}`)).toEqual(['PUT x-id=PutObject']);
      expect(await stored(opts.key)).toEqual({ size, hex: src.digest() });
    }
    proxy.reset();
    const src = source(PART);
    const opts = options();
    expect(await uploadStream(src.stream, opts)).toMatchObject({ bytes: PART, parts: 1 });
    expect(proxy.seen.filter(isPart).map((s) => s.bytes)).toEqual([PART]);
    expect(await stored(opts.key)).toEqual({ size: PART, hex: src.digest() });
  });

  it('retries a failed part with backoff and completes', async () => {
    let failed = 0;
    proxy.reset((s) => (isPart(s) && partNo(s) === 2 && failed++ === 0 ? { fail: 500, code: 'InternalError' } : undefined));
    const logger = captureLogger();
    const src = source(3 * PART);
    const opts = options({ logger });
    const r = await uploadStream(src.stream, opts);
    expect(r).toMatchObject({ parts: 3, retries: 1 });
    expect(proxy.seen.filter((s) => isPart(s) && partNo(s) === 2).map((s) => s.status)).toEqual([500, 200]);
    expect(logger.warnings).toEqual(['upload of part 2 failed; retrying']);
    expect(await stored(opts.key)).toEqual({ size: 3 * PART, hex: src.digest() });
  });

  it('gives up after the configured retries, aborts the upload and never completes it', async () => {
    proxy.reset((s) => (isPart(s) && partNo(s) === 2 ? { fail: 503, code: 'SlowDown' } : undefined));
    const logger = captureLogger();
    const err = await failure(uploadStream(source(4 * PART).stream, options({ logger })));
    expect(err.origin).toBe('store');
    expect((err.cause as { name?: string }).name).toBe('SlowDown');
    // 1 + 2 retries, after 20 and 40 ms (the backoff the uploader reports, not the test's wall clock)
    expect(proxy.seen.filter((s) => isPart(s) && partNo(s) === 2)).toHaveLength(3);
    expect(logger.retryDelays).toEqual([20, 40]);
    expect(proxy.seen.filter(isAbort)).toHaveLength(1);
    expect(proxy.seen.some(isComplete)).toBe(false);
  });

  it('does not retry what a retry cannot fix (403)', async () => {
    proxy.reset((s) => (isPart(s) && partNo(s) === 1 ? { fail: 403, code: 'AccessDenied' } : undefined));
    const err = await failure(uploadStream(source(2 * PART).stream, options()));
    expect(err.origin).toBe('store');
    expect(proxy.seen.filter((s) => isPart(s) && partNo(s) === 1)).toHaveLength(1);
    expect(proxy.seen.filter(isAbort)).toHaveLength(1);
  });

  it('an attempt that exceeds the part timeout is cancelled and retried', async () => {
    let hung = 0;
    proxy.reset((s) => (isPart(s) && partNo(s) === 1 && hung++ === 0 ? 'hang' : undefined));
    const src = source(PART + 10);
    // Generous enough that an answered attempt never hits it on a loaded machine; only the hung one does.
    const opts = options({ retry: { ...FAST_RETRY, retries: 3, timeoutMs: 2000 } });
    expect(await uploadStream(src.stream, opts)).toMatchObject({ parts: 2, retries: 1 });
    expect(await stored(opts.key)).toEqual({ size: PART + 10, hex: src.digest() });
  });

  it('an input error aborts the multipart upload and is reported as the cause', async () => {
    const logger = captureLogger();
    const err = await failure(uploadStream(source(4 * PART, { failAfter: PART + PART / 2 }).stream, options({ logger })));
    expect(err.origin).toBe('input');
    expect((err.cause as Error).message).toContain('failed on purpose');
    expect(proxy.seen.filter(isCreate)).toHaveLength(1);
    expect(proxy.seen.filter(isAbort)).toHaveLength(1);
    expect(proxy.seen.some(isComplete)).toBe(false);
    // s3rver answers AbortMultipartUpload with 405: the uploader says so instead of hiding it.
    expect(proxy.seen.find(isAbort)?.status).toBe(405);
    expect(logger.warnings.some((w) => w.includes('parts may remain'))).toBe(true);
  });

  it('an input error before the first part is full sends nothing at all', async () => {
    const err = await failure(uploadStream(source(PART, { failAfter: 1000 }).stream, options()));
    expect(err.origin).toBe('input');
    expect(proxy.seen).toEqual([]);
  });

  it('the abort signal cancels parts in flight and aborts the upload', async () => {
    proxy.reset((s) => (isPart(s) ? 'hang' : undefined));
    const controller = new AbortController();
    const src = source(6 * PART);
    const p = uploadStream(src.stream, options({ signal: controller.signal }));
    await waitFor(() => proxy.seen.filter(isPart).length >= 3, 'three parts hanging at the proxy', 20_000, 10);
    controller.abort();
    const err = await failure(p);
    expect(err.origin).toBe('aborted');
    expect((err.cause as Error).name).toBe('AbortError');
    expect(proxy.seen.filter(isAbort)).toHaveLength(1);
    expect(proxy.seen.some(isComplete)).toBe(false);
    expect(src.stream.destroyed).toBe(true);
  });

  it('holds at most concurrency + 1 part files, and stops reading while all slots are busy', async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    proxy.reset(async (s) => {
      if (isPart(s)) await gate;
      return undefined;
    });
    const src = source(8 * PART + 5, { chunk: 65_536 });
    const opts = options({ concurrency: 2 });
    const p = uploadStream(src.stream, opts);
    await waitFor(() => proxy.seen.filter(isPart).length >= 2, 'two parts held at the proxy', 20_000, 10);
    // Two parts held at the proxy, a third written and waiting for a slot (the uploader stops reading there);
    // the source is not read further than that plus the stream's own read-ahead.
    await waitFor(() => src.produced >= 3 * PART, 'the third part written', 20_000, 10);
    await waitFor(async () => (await readdir(spool)).length === 3, 'three part files', 20_000, 10);
    // Named with this process as their writer: an initialization's sweep while they are in flight leaves them.
    for (const name of await readdir(spool))
      expect(name).toMatch(new RegExp(`^\\.etcdbr-part-${process.pid}\\.\\d+\\.[0-9a-f]{8}-[0-9a-f]{12}-\\d+$`));
    expect(await removeLeftoverSpoolFiles(spool, { keep: [], logger: silentLogger })).toEqual([]);
    expect(src.produced).toBeLessThanOrEqual(3 * PART + 2 * 65_536);
    expect(proxy.seen.filter(isPart)).toHaveLength(2);
    release();
    const r = await p;
    expect(r).toMatchObject({ parts: 9, bytes: 8 * PART + 5 });
    expect(r.maxPartFiles).toBe(3);
    expect(proxy.maxPartsInFlight).toBeLessThanOrEqual(2);
    expect(await stored(opts.key)).toEqual({ size: 8 * PART + 5, hex: src.digest() });
  });

  it('sends SSE-C parameters on create, parts and complete, and a CRC32 checksum by default', async () => {
    const key = '0123456789abcdef0123456789abcdef';
    const ssec = {
      SSECustomerAlgorithm: 'AES256',
      SSECustomerKey: Buffer.from(key).toString('base64'),
      SSECustomerKeyMD5: createHash('md5').update(key).digest('base64'),
    };
    await uploadStream(source(PART + 1).stream, options({ writeParams: ssec }));
    const headers = proxy.seen.map((s) => s.headers);
    expect(headers).toHaveLength(4); // create, 2 parts, complete
    for (const h of headers) expect(h['x-amz-server-side-encryption-customer-key-md5']).toBe(ssec.SSECustomerKeyMD5);
    expect(headers[0]?.['x-amz-checksum-algorithm']).toBe('CRC32');
    expect(headers.slice(1, 3).every((h) => typeof h['x-amz-checksum-crc32'] === 'string')).toBe(true);
  });

  it('sends each part from its file with the CRC32 and, over http, the SHA-256 of the bytes that arrived', async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    proxy.reset(async (s) => {
      if (isPart(s)) await gate;
      return undefined;
    });
    const size = 6 * PART + 12_345;
    const src = source(size, { chunk: 65_536 });
    const opts = options({ concurrency: 3, unsignedPayload: true });
    const before = { ...PartFileBody.totals };
    const p = uploadStream(src.stream, opts);
    // Three parts held at the proxy and a fourth written: four files, and the input read no further.
    await waitFor(
      async () => (await readdir(spool)).length === 4 && proxy.seen.filter(isPart).length === 3,
      'three parts held',
      20_000,
      10,
    );
    await waitFor(() => src.produced >= 4 * PART, 'the fourth part written', 20_000, 10);
    expect(src.produced).toBeLessThanOrEqual(4 * PART + 2 * 65_536);
    release();
    const r = await p;
    expect(r).toMatchObject({ parts: 7, bytes: size, retries: 0, maxPartFiles: 4 });
    expect(proxy.maxPartsInFlight).toBeLessThanOrEqual(3);
    const parts = proxy.seen.filter(isPart);
    expect(parts.map((x) => x.bytes).sort((a, b) => a - b)).toEqual([12_345, PART, PART, PART, PART, PART, PART]);
    for (const x of parts) {
      expect(x.headers['x-amz-checksum-crc32']).toBe(x.crc32);
      expect(x.headers['x-amz-content-sha256']).toBe(x.sha256);
      expect(x.headers['content-length']).toBe(String(x.bytes));
      expect(x.headers['content-encoding']).toBeUndefined();
    }
    expect(await stored(opts.key)).toEqual({ size, hex: src.digest() });
    // The SDK still pipes the body, so every part went through the body's reused buffers.
    expect(PartFileBody.totals.piped - before.piped).toBe(7);
    expect(PartFileBody.totals.readableChunks).toBe(before.readableChunks);
  });

  it('sends an object that fits one part from memory with the checksums of its bytes, without touching the temp directory', async () => {
    const src = source(PART - 1, { chunk: 65_536 });
    // A temp directory that cannot be created: a small object never needs it.
    const blocker = path.join(spool, 'not-a-directory');
    await writeFile(blocker, 'x');
    try {
      const opts = options({ spoolDir: path.join(blocker, 'spool') });
      expect(await uploadStream(src.stream, opts)).toMatchObject({ parts: 0, maxPartFiles: 0, bytes: PART - 1 });
      const [put] = proxy.seen;
      expect(put?.headers['x-amz-checksum-crc32']).toBe(put?.crc32);
      expect(put?.headers['x-amz-content-sha256']).toBe(put?.sha256);
      expect(put?.bytes).toBe(PART - 1);
      expect(await stored(opts.key)).toEqual({ size: PART - 1, hex: src.digest() });
    } finally {
      await rm(blocker, { force: true });
    }
  });

  it('a retried part is read from its file again; a part that fails for good leaves no file and aborts the upload', async () => {
    let failed = 0;
    proxy.reset((s) => (isPart(s) && partNo(s) === 2 && failed++ === 0 ? { fail: 500, code: 'InternalError' } : undefined));
    const src = source(3 * PART + 1);
    const opts = options();
    expect(await uploadStream(src.stream, opts)).toMatchObject({ parts: 4, retries: 1 });
    expect(proxy.seen.filter((x) => isPart(x) && partNo(x) === 2).map((x) => [x.status, x.bytes])).toEqual([
      [500, PART],
      [200, PART],
    ]);
    expect(await stored(opts.key)).toEqual({ size: 3 * PART + 1, hex: src.digest() });

    proxy.reset((s) => (isPart(s) && partNo(s) === 2 ? { fail: 403, code: 'AccessDenied' } : undefined));
    const err = await failure(uploadStream(source(4 * PART).stream, options()));
    expect(err.origin).toBe('store');
    expect(proxy.seen.filter(isAbort)).toHaveLength(1);
    expect(proxy.seen.some(isComplete)).toBe(false);
  });

  it('a temp directory that cannot be created fails the upload as a spool failure naming the path, before any request', async () => {
    const blocker = path.join(spool, 'not-a-directory');
    await writeFile(blocker, 'x');
    try {
      const err = await failure(uploadStream(source(2 * PART + 1).stream, options({ spoolDir: path.join(blocker, 'spool') })));
      expect(err.origin).toBe('spool');
      expect(String((err.cause as Error).message)).toContain(`snapstore temp directory ${path.join(blocker, 'spool')}`);
      expect(proxy.seen).toEqual([]);
    } finally {
      await rm(blocker, { force: true });
    }
  });

  it('unsignedPayload leaves plain-http requests signed with the body hash', async () => {
    const opts = options({ unsignedPayload: true });
    await uploadStream(source(PART + 3).stream, opts);
    const parts = proxy.seen.filter(isPart);
    expect(parts).toHaveLength(2);
    for (const p of parts) expect(p.headers['x-amz-content-sha256']).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('uploadStream over https', () => {
  let dir: string | undefined;
  let srv: S3rverInstance | undefined;
  let client: S3Client | undefined;
  /** Headers of every request as signed and sent, captured after the SDK's last middleware step before the wire. */
  const sent: Array<{ query: Record<string, unknown>; headers: Record<string, string> }> = [];

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 's3up-tls-'));
    // Needs the openssl CLI (scripts/setup.mjs installs it): without it this fails, it does not skip.
    const { keyFile, certFile } = await writeSelfSignedCert(dir, '127.0.0.1');
    srv = await startS3rver({ tls: { keyFile, certFile } });
    client = new S3Client({
      endpoint: srv.endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY },
      requestHandler: { httpsAgent: new https.Agent({ ca: await readFile(certFile, 'utf8') }) },
    });
    client.middlewareStack.add(
      (next) => async (args) => {
        const req = args.request as { query?: Record<string, unknown>; headers?: Record<string, string> };
        sent.push({ query: { ...req.query }, headers: { ...req.headers } });
        return next(args);
      },
      { step: 'deserialize', name: 'sentHeadersSpy' },
    );
  });
  afterAll(async () => {
    client?.destroy();
    await srv?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('sends parts and single puts as UNSIGNED-PAYLOAD, everything else signed, and the objects round-trip', async () => {
    if (!srv || !client) throw new Error('the https s3rver did not start (see beforeAll)');
    for (const size of [PART + 3, 1000]) {
      sent.length = 0;
      const src = source(size);
      const key = `tls/${size}`;
      const before = { ...PartFileBody.totals };
      await uploadStream(src.stream, {
        client,
        bucket: srv.bucket,
        key,
        partSize: PART,
        concurrency: 2,
        spoolDir: spool,
        unsignedPayload: true,
        logger: silentLogger,
      });
      expect(await readdir(spool)).toEqual([]);
      const bodies = sent.filter((r) => 'partNumber' in r.query || r.query['x-id'] === 'PutObject');
      expect(bodies).toHaveLength(size > PART ? 2 : 1);
      for (const b of bodies) expect(b.headers['x-amz-content-sha256']).toBe('UNSIGNED-PAYLOAD');
      expect(PartFileBody.totals.piped - before.piped).toBe(size > PART ? 2 : 0);
      expect(PartFileBody.totals.readableChunks).toBe(before.readableChunks);
      for (const r of sent.filter((x) => !bodies.includes(x))) expect(r.headers['x-amz-content-sha256']).toMatch(/^[0-9a-f]{64}$/);

      const out = await client.send(new GetObjectCommand({ Bucket: srv.bucket, Key: key }));
      const back = Buffer.from(await (out.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray());
      expect(back.length).toBe(size);
      expect(createHash('sha256').update(back).digest('hex')).toBe(src.digest());
    }
  });
});

describe('uploadStream over https, against a scripted request handler', () => {
  it("hands each of the SDK's own retries a fresh stream of the whole part file", async () => {
    const attempts: Array<{ part: number; body: 'buffer' | 'stream'; sha: string; bytes: number; payload: string }> = [];
    let resets = 0;
    const xml = (body: string) => ({
      statusCode: 200,
      headers: { 'content-type': 'application/xml' },
      body: Readable.from([Buffer.from(body)]),
    });
    const handler = {
      async handle(request: { method: string; query: Record<string, string>; headers: Record<string, string>; body?: unknown }) {
        if (request.method === 'POST' && 'uploads' in request.query) {
          return { response: xml('<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>') };
        }
        if (request.method === 'POST')
          return { response: xml('<CompleteMultipartUploadResult><ETag>"done"</ETag></CompleteMultipartUploadResult>') };
        const part = Number(request.query.partNumber);
        const hash = createHash('sha256');
        let bytes = 0;
        const isStream = request.body instanceof Readable;
        for await (const c of (isStream ? request.body : [request.body]) as AsyncIterable<Buffer>) {
          hash.update(c);
          bytes += c.length;
        }
        attempts.push({
          part,
          body: isStream ? 'stream' : 'buffer',
          sha: hash.digest('hex'),
          bytes,
          payload: request.headers['x-amz-content-sha256'] ?? '',
        });
        if (part === 1 && resets++ === 0) throw Object.assign(new Error('connection reset by the test'), { code: 'ECONNRESET' });
        return { response: { statusCode: 200, headers: { etag: `"p${part}"` }, body: Readable.from([]) } };
      },
      updateHttpClientConfig() {},
      httpHandlerConfigs: () => ({}),
    };
    const client = new S3Client({
      endpoint: 'https://s3.test.invalid',
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
      maxAttempts: 3,
      requestHandler: handler as never,
    });
    try {
      const src = source(PART + 10);
      const parts: Buffer[] = [];
      // A tee that passes nothing on before the uploader reads (a 'data' listener would start the flow at once).
      const tee = src.stream.pipe(
        new Transform({
          transform(c: Buffer, _enc, cb) {
            parts.push(c);
            cb(null, c);
          },
        }),
      );
      const r = await uploadStream(tee, {
        client,
        bucket: 'b',
        key: 'k',
        partSize: PART,
        concurrency: 1,
        spoolDir: spool,
        unsignedPayload: true,
        logger: silentLogger,
      });
      expect(r).toMatchObject({ parts: 2, retries: 0 }); // the retry was the SDK's, inside one attempt of ours
      const whole = Buffer.concat(parts);
      const part1 = createHash('sha256').update(whole.subarray(0, PART)).digest('hex');
      expect(attempts.filter((a) => a.part === 1)).toEqual([
        { part: 1, body: 'stream', sha: part1, bytes: PART, payload: 'UNSIGNED-PAYLOAD' },
        { part: 1, body: 'stream', sha: part1, bytes: PART, payload: 'UNSIGNED-PAYLOAD' },
      ]);
      expect(attempts.find((a) => a.part === 2)).toMatchObject({ body: 'stream', bytes: 10 });
      expect(await readdir(spool)).toEqual([]);
    } finally {
      client.destroy();
    }
  });
});
