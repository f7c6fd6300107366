import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { S3Credentials, S3StoreConfig } from '../src/config.js';
import type { Logger } from '../src/logger.js';
import { openS3Store } from '../src/providers/s3.js';
import type { S3Tuning } from '../src/providers/s3.js';
import type { Snapshot } from '../src/snapshot.js';
import type { SnapStore } from '../src/store.js';
import { describeSnapStoreConformance, generatedStream, readAll, testSnapshot } from './conformance.js';
import type { ConformanceHarness } from './conformance.js';
import { closedPort } from './support/ports.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, UPLOAD_PART_MARKER, startRecordingProxy, startS3rver } from './support/s3rver.js';
import type { RecordingProxy, S3rverInstance } from './support/s3rver.js';
import { writeSelfSignedCert } from '../../test/support/certs.js';
import { waitFor } from '../../test/support/wait.js';

const MiB = 1024 * 1024;

function s3Config(
  endpoint: string,
  bucket: string,
  prefix: string,
  opts: { logger?: Logger; credentials?: Partial<S3Credentials> } = {},
): S3StoreConfig {
  return {
    provider: 'S3',
    container: bucket,
    prefix,
    endpointOverride: endpoint,
    maxParallelChunkUploads: 3,
    minChunkSize: 5 * MiB,
    tempDir: os.tmpdir(),
    credentials: {
      region: 'us-east-1',
      accessKeyID: S3RVER_ACCESS_KEY,
      secretAccessKey: S3RVER_SECRET_KEY,
      s3ForcePathStyle: true,
      ...opts.credentials,
    },
    ...(opts.logger ? { logger: opts.logger } : {}),
  };
}

// Part retries too: by default a failed part waits 1+2+4+8+16 s before the save gives up.
const FAST_FAIL: S3Tuning = { maxAttempts: 2, connectionTimeoutMs: 2000, socketTimeoutMs: 5000, partRetries: 1, partRetryBaseDelayMs: 50 };

async function s3rverHarness(): Promise<ConformanceHarness> {
  const srv = await startS3rver();
  const raw = new S3Client({
    endpoint: srv.endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY },
  });
  return {
    open: (opts) => openS3Store(s3Config(srv.endpoint, srv.bucket, opts?.prefix ?? 'v2', opts?.logger ? { logger: opts.logger } : {})),
    rawKeys: () => srv.rawKeys(),
    async putRaw(key, data) {
      await raw.send(new PutObjectCommand({ Bucket: srv.bucket, Key: key, Body: data }));
    },
    async teardown() {
      raw.destroy();
      await srv.stop();
    },
    async openUnreachable() {
      return openS3Store(s3Config(`http://127.0.0.1:${await closedPort()}`, srv.bucket, 'unreachable/v2'), FAST_FAIL);
    },
    async openThrough(through, over) {
      return openS3Store({ ...s3Config(await through(srv.endpoint), srv.bucket, 'faulty/v2'), ...over }, FAST_FAIL);
    },
    // s3rver answers AbortMultipartUpload with 405, so aborted parts stay on its disk; the tests
    // below prove that the provider sent the abort.
    ignoreLeftover: (key) => key.includes(UPLOAD_PART_MARKER),
  };
}

describeSnapStoreConformance('S3 (s3rver)', s3rverHarness);

function captureLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return {
    warnings,
    debug() {},
    info() {},
    warn(obj: object | string, msg?: string) {
      warnings.push(msg ?? (typeof obj === 'string' ? obj : JSON.stringify(obj)));
    },
    error() {},
  };
}

async function rejection(p: Promise<unknown>): Promise<Error & { code?: string }> {
  try {
    await p;
  } catch (err) {
    return err as Error & { code?: string };
  }
  throw new Error('expected a rejection');
}

const queryOf = (url: string): URLSearchParams => new URL(url, 'http://x').searchParams;

describe('S3 provider against s3rver, observed through a recording proxy', () => {
  let srv: S3rverInstance;
  let proxy: RecordingProxy;
  const stores: SnapStore[] = [];
  let n = 0;

  const open = async (opts: { logger?: Logger; credentials?: Partial<S3Credentials> } = {}, tuning?: S3Tuning) => {
    const s = await openS3Store(s3Config(proxy.endpoint, srv.bucket, `x${++n}/v2`, opts), tuning);
    stores.push(s);
    return s;
  };

  beforeAll(async () => {
    srv = await startS3rver();
    proxy = await startRecordingProxy(srv.endpoint);
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
    await proxy?.stop();
    await srv?.stop();
  });

  it('a save whose input fails after a part was uploaded aborts the multipart upload and never completes it', async () => {
    const logger = captureLogger();
    const store = await open({ logger });
    proxy.requests.length = 0;
    // Fails only once part 1 was answered: a failure any earlier would cancel the part before it is sent.
    let sent = 0;
    const src = new Readable({
      read() {
        if (sent < 5 * MiB + 1_234_567) {
          const n = Math.min(MiB, 5 * MiB + 1_234_567 - sent);
          sent += n;
          this.push(Buffer.alloc(n, 3));
          return;
        }
        const partAnswered = () =>
          proxy.requests.some((r) => r.method === 'PUT' && queryOf(r.url).has('partNumber') && r.status !== undefined);
        void waitFor(partAnswered, 'part 1 answered', 20_000, 10).then(
          () => this.destroy(new Error('generated stream failed on purpose after a part')),
          (err: unknown) => this.destroy(err as Error),
        );
      },
    });
    const err = await rejection(store.save(testSnapshot('Full', 0, 10, 1_700_000_010), src));
    expect(err.code).toBe('E_SAVE_FAILED');
    expect((err.cause as Error).message).toContain('failed on purpose');

    const parts = proxy.requests.filter((r) => r.method === 'PUT' && queryOf(r.url).has('uploadId'));
    expect(parts.length).toBeGreaterThanOrEqual(1);
    const uploadId = queryOf(parts[0]?.url ?? '').get('uploadId');
    const aborts = proxy.requests.filter((r) => r.method === 'DELETE' && queryOf(r.url).get('uploadId') === uploadId);
    expect(aborts).toHaveLength(1);
    expect(aborts[0]?.status).toBe(405); // s3rver cannot abort; real S3 answers 204
    expect(proxy.requests.some((r) => r.method === 'POST' && queryOf(r.url).has('uploadId'))).toBe(false);
    // The failed abort is reported, not swallowed.
    expect(logger.warnings.some((w) => w.includes('parts may remain'))).toBe(true);
    expect(await store.list()).toEqual([]);
  });

  it('an aborted save aborts the multipart upload and never completes it', async () => {
    const store = await open();
    proxy.requests.length = 0;
    const controller = new AbortController();
    let sent = 0;
    let stalling = false;
    const stalled = new Readable({
      read() {
        if (sent >= 6 * MiB) {
          // Stalled after more than a part: abort once the upload is under way (a part reached S3's side).
          if (stalling) return;
          stalling = true;
          const partSent = () => proxy.requests.some((r) => r.method === 'PUT' && queryOf(r.url).has('partNumber'));
          const abort = (): void => controller.abort();
          void waitFor(partSent, 'a part sent', 20_000, 10).then(abort, abort);
          return;
        }
        sent += MiB;
        this.push(Buffer.alloc(MiB, 7));
      },
    });
    const err = await rejection(store.save(testSnapshot('Full', 0, 11, 1_700_000_011), stalled, { signal: controller.signal }));
    expect(err.code).toBe('E_SAVE_FAILED');
    expect(err.message).toContain('aborted');
    expect(proxy.requests.some((r) => r.method === 'DELETE' && queryOf(r.url).has('uploadId'))).toBe(true);
    expect(proxy.requests.some((r) => r.method === 'POST' && queryOf(r.url).has('uploadId'))).toBe(false);
  });

  it('uploads parts of minChunkSize and small objects with a single PUT', async () => {
    const store = await open();
    proxy.requests.length = 0;
    const size = 2 * 5 * MiB + 12_345;
    await store.save(testSnapshot('Full', 0, 12, 1_700_000_012), generatedStream(size, { pieces: [300_001] }).stream);
    const parts = proxy.requests.filter((r) => r.method === 'PUT' && queryOf(r.url).has('partNumber'));
    const sizes = parts.map((r) => Number(r.headers['x-amz-decoded-content-length'] ?? r.headers['content-length'])).sort((a, b) => b - a);
    expect(sizes).toEqual([5 * MiB, 5 * MiB, 12_345]);
    // Plain http: the body is signed (its SHA-256 in the signature), not sent as UNSIGNED-PAYLOAD.
    for (const p of parts) expect(p.headers['x-amz-content-sha256']).toMatch(/^[0-9a-f]{64}$/);

    proxy.requests.length = 0;
    await store.save(testSnapshot('Incr', 13, 14, 1_700_000_014), Readable.from([Buffer.from('small')]));
    expect(proxy.requests.filter((r) => r.method !== 'GET').map((r) => [r.method, queryOf(r.url).toString()])).toEqual([
      ['PUT', 'x-id=PutObject'],
    ]);
  });

  it('sends SSE-C headers on every object read and write, and not on list or delete', async () => {
    const key = '0123456789abcdef0123456789abcdef'; // 32 bytes
    const store = await open({ credentials: { sseCustomerKey: key, sseCustomerAlgorithm: 'AES256' } });
    proxy.requests.length = 0;
    await store.save(testSnapshot('Full', 0, 20, 1_700_000_020), Readable.from([Buffer.from('secret')]));
    await store.save(testSnapshot('Full', 0, 21, 1_700_000_021), generatedStream(5 * MiB + 10).stream);
    const listed = await store.list();
    expect(listed).toHaveLength(2);
    expect((await readAll(await store.fetch(listed[0] as Snapshot))).toString()).toBe('secret');
    await store.delete(listed[0] as Snapshot);

    const expected = {
      'x-amz-server-side-encryption-customer-algorithm': 'AES256',
      'x-amz-server-side-encryption-customer-key': Buffer.from(key).toString('base64'),
      'x-amz-server-side-encryption-customer-key-md5': createHash('md5').update(key).digest('base64'),
    };
    const isList = (url: string): boolean => queryOf(url).has('list-type') || queryOf(url).has('versioning');
    const objectCalls = proxy.requests.filter((r) => !isList(r.url) && r.method !== 'DELETE');
    // PUT, Create, UploadPart x2, Complete, GET, HEAD
    expect(objectCalls.length).toBeGreaterThanOrEqual(7);
    for (const r of objectCalls) expect(r.headers, `${r.method} ${r.url}`).toMatchObject(expected);
    for (const r of proxy.requests.filter((r) => isList(r.url) || r.method === 'DELETE')) {
      expect(r.headers['x-amz-server-side-encryption-customer-key']).toBeUndefined();
    }
  });

  it('requestChecksumCalculation when_required sends no CRC32 on PUT; the default does', async () => {
    const header = (r: { headers: http.IncomingHttpHeaders }): boolean =>
      Object.keys(r.headers).some((h) => h.startsWith('x-amz-checksum-')) || String(r.headers['x-amz-trailer'] ?? '').includes('checksum');
    const plain = await open({ credentials: { requestChecksumCalculation: 'when_required' } });
    proxy.requests.length = 0;
    await plain.save(testSnapshot('Full', 0, 30, 1_700_000_030), Readable.from([Buffer.from('a')]));
    expect(proxy.requests.filter((r) => r.method === 'PUT').some(header)).toBe(false);
    const def = await open();
    proxy.requests.length = 0;
    await def.save(testSnapshot('Full', 0, 31, 1_700_000_031), Readable.from([Buffer.from('b')]));
    expect(proxy.requests.filter((r) => r.method === 'PUT').some(header)).toBe(true);
  });

  it('an unknown access key is E_CREDENTIALS on every operation, naming bucket and key', async () => {
    const store = await open({ credentials: { accessKeyID: 'NOT-S3RVER' } });
    const snap = { ...testSnapshot('Full', 0, 40, 1_700_000_040), prefix: `${store.prefix}/` };
    const ops = [
      () => store.list(),
      () => store.fetch(snap),
      () => store.delete(snap),
      () => store.save(snap, Readable.from([Buffer.from('x')])),
    ];
    for (const op of ops) {
      const err = await rejection(op());
      expect(err.code).toBe('E_CREDENTIALS');
      expect(err.message).toContain(`s3://${srv.bucket}/`);
    }
    const err = await rejection(store.fetch(snap));
    expect(err.message).toContain(snap.snapName);
  });

  it('a missing bucket is E_CONFIG naming the bucket', async () => {
    const store = await openS3Store(s3Config(proxy.endpoint, 'no-such-bucket', 'v2'));
    stores.push(store);
    const err = await rejection(store.list());
    expect(err.code).toBe('E_CONFIG');
    expect(err.message).toContain('no-such-bucket');
  });

  it('the deprecated credential endpoint is used, and --store-endpoint-override wins over it', async () => {
    const viaCredential = await openS3Store({
      ...s3Config(proxy.endpoint, srv.bucket, 'ep/v2', { credentials: { endpoint: proxy.endpoint } }),
      endpointOverride: undefined,
    } as S3StoreConfig);
    stores.push(viaCredential);
    expect(await viaCredential.list()).toEqual([]);
    const dead = `http://127.0.0.1:${await closedPort()}`;
    const overridden = await openS3Store(s3Config(proxy.endpoint, srv.bucket, 'ep/v2', { credentials: { endpoint: dead } }), FAST_FAIL);
    stores.push(overridden);
    expect(await overridden.list()).toEqual([]);
  });

  it('an unreachable endpoint is E_UNREACHABLE naming the endpoint', async () => {
    const dead = `http://127.0.0.1:${await closedPort()}`;
    const store = await openS3Store(s3Config(dead, srv.bucket, 'v2'), FAST_FAIL);
    stores.push(store);
    const err = await rejection(store.list());
    expect(err.code).toBe('E_UNREACHABLE');
    expect(err.message).toContain(dead);
  });

  it('web identity: assumes the role with the token file through STS and signs with the session', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'webid-'));
    const tokenPath = path.join(dir, 'token');
    await writeFile(tokenPath, 'projected-token-1');
    const sts = await startFakeSts();
    try {
      const store = await open(
        { credentials: { accessKeyID: undefined, secretAccessKey: undefined, roleARN: 'arn:aws:iam::123456789012:role/etcd', tokenPath } },
        { stsEndpoint: sts.endpoint },
      );
      proxy.requests.length = 0;
      expect(await store.list()).toEqual([]);
      expect(sts.calls).toHaveLength(1);
      const call = sts.calls[0] as URLSearchParams;
      expect(call.get('Action')).toBe('AssumeRoleWithWebIdentity');
      expect(call.get('RoleArn')).toBe('arn:aws:iam::123456789012:role/etcd');
      expect(call.get('WebIdentityToken')).toBe('projected-token-1');
      expect(proxy.requests.length).toBeGreaterThan(0);
      for (const r of proxy.requests) expect(r.headers['x-amz-security-token']).toBe('session-token-from-sts');
    } finally {
      await sts.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('S3 provider configuration errors', () => {
  const base = (credentials: Partial<S3Credentials>): S3StoreConfig => s3Config('http://127.0.0.1:9', 'b', 'v2', { credentials });

  it('SSE-C needs both key and algorithm, and a 32-byte key for AES256', async () => {
    for (const c of [
      { sseCustomerKey: '0123456789abcdef0123456789abcdef' },
      { sseCustomerAlgorithm: 'AES256' },
      { sseCustomerKey: 'too-short', sseCustomerAlgorithm: 'AES256' },
    ]) {
      const err = await rejection(openS3Store(base(c)));
      expect(err.code, JSON.stringify(c)).toBe('E_CREDENTIALS');
      expect(err.message).toMatch(/sseCustomer|SSE-C/);
    }
  });

  it('rejects a bad endpoint, a missing bucket and incomplete credentials', async () => {
    expect((await rejection(openS3Store({ ...base({}), endpointOverride: 'not a url' }))).code).toBe('E_CONFIG');
    expect((await rejection(openS3Store({ ...base({}), endpointOverride: 'ftp://x' }))).code).toBe('E_CONFIG');
    expect((await rejection(openS3Store({ ...base({}), container: '' }))).code).toBe('E_CONFIG');
    expect((await rejection(openS3Store(base({ secretAccessKey: undefined })))).code).toBe('E_CREDENTIALS');
    expect(
      (await rejection(openS3Store(base({ accessKeyID: undefined, secretAccessKey: undefined, roleARN: 'arn:aws:iam::1:role/x' })))).code,
    ).toBe('E_CREDENTIALS');
  });
});

/** Minimal STS (awsQuery protocol) answering AssumeRoleWithWebIdentity with fixed session credentials. */
async function startFakeSts(): Promise<{ endpoint: string; calls: URLSearchParams[]; stop(): Promise<void> }> {
  const calls: URLSearchParams[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => (body += d));
    req.on('end', () => {
      const params = new URLSearchParams(body);
      calls.push(params);
      if (params.get('Action') !== 'AssumeRoleWithWebIdentity') {
        res.writeHead(400, { 'content-type': 'text/xml' }).end('<ErrorResponse><Error><Code>InvalidAction</Code></Error></ErrorResponse>');
        return;
      }
      res.writeHead(200, { 'content-type': 'text/xml' }).end(
        `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <AccessKeyId>${S3RVER_ACCESS_KEY}</AccessKeyId>
      <SecretAccessKey>${S3RVER_SECRET_KEY}</SecretAccessKey>
      <SessionToken>session-token-from-sts</SessionToken>
      <Expiration>2099-01-01T00:00:00Z</Expiration>
    </Credentials>
    <SubjectFromWebIdentityToken>system:serviceaccount:shoot:etcd</SubjectFromWebIdentityToken>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/etcd/session</Arn>
      <AssumedRoleId>AROAEXAMPLE:session</AssumedRoleId>
    </AssumedRoleUser>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>req-1</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>`,
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    calls,
    stop: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe('S3 provider over TLS (s3rver with a self-signed certificate)', () => {
  let dir: string | undefined;
  let srv: S3rverInstance | undefined;
  let cert = '';
  const stores: SnapStore[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 's3tls-'));
    // Needs the openssl CLI (scripts/setup.mjs installs it): without it this fails, it does not skip.
    const { keyFile, certFile } = await writeSelfSignedCert(dir, '127.0.0.1');
    cert = (await import('node:fs')).readFileSync(certFile, 'utf8');
    srv = await startS3rver({ tls: { keyFile, certFile } });
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
    await srv?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const open = async (credentials: Partial<S3Credentials>): Promise<SnapStore> => {
    const s = await openS3Store(s3Config(srv?.endpoint ?? '', srv?.bucket ?? '', 'tls/v2', { credentials }), FAST_FAIL);
    stores.push(s);
    return s;
  };

  it('refuses an untrusted certificate, accepts it with trustedCaCert or insecureSkipVerify', async () => {
    if (!srv) throw new Error('the TLS s3rver did not start (see beforeAll)');
    const err = await rejection((await open({})).list());
    expect(err.code).toBe('E_UNREACHABLE');
    expect(err.message).toContain(srv.endpoint);
    expect(err.message).toMatch(/certificate/i);

    const trusted = await open({ trustedCaCert: cert });
    await trusted.save(testSnapshot('Full', 0, 1, 1_700_000_001), Readable.from([Buffer.from('over tls')]));
    const [snap] = (await trusted.list()) as [Snapshot];
    expect((await readAll(await trusted.fetch(snap))).toString()).toBe('over tls');

    expect(await (await open({ insecureSkipVerify: true })).list()).toHaveLength(1);
  });

  it('uploads parts over TLS with an unsigned payload, and the object round-trips', async () => {
    if (!srv) throw new Error('the TLS s3rver did not start (see beforeAll)');
    const store = await open({ trustedCaCert: cert });
    const src = generatedStream(2 * 5 * MiB + 4321, { seed: 9 });
    const snap = testSnapshot('Full', 0, 2, 1_700_000_002);
    await store.save(snap, src.stream);
    const got = (await store.list()).find((s) => s.snapName === snap.snapName) as Snapshot;
    const back = await readAll(await store.fetch(got));
    expect(back.length).toBe(2 * 5 * MiB + 4321);
    expect(createHash('sha256').update(back).digest('hex')).toBe(src.digest());
  });
});

// -------------------------------------------------------------------------------------------------
// Versioned buckets with object lock. s3rver has no versioning (GetBucketVersioning falls through to
// a listing and reports no status; object-lock is 501), so these cases talk to a small fake of the S3
// REST/XML protocol that implements exactly the calls a versioned listing and delete make:
// GetBucketVersioning, GetObjectLockConfiguration, ListObjectVersions (paginated with key and
// version-id markers), GetObjectTagging, GetObject, HeadObject and DeleteObject by version.

interface FakeVersion {
  key: string;
  versionId: string;
  lastModified: Date;
  body?: Buffer; // undefined = delete marker
  tags?: Record<string, string>;
  lockedUntil?: Date;
}

interface FakeVersionedS3 {
  endpoint: string;
  bucket: string;
  versions: FakeVersion[];
  retention?: { days?: number; years?: number };
  calls: string[];
  stop(): Promise<void>;
}

const xmlEscape = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

async function startFakeVersionedS3(bucket: string): Promise<FakeVersionedS3> {
  const state: FakeVersionedS3 = { endpoint: '', bucket, versions: [], calls: [], stop: async () => undefined };
  const PAGE = 3; // small pages so that pagination with markers is exercised
  const xml = (res: http.ServerResponse, status: number, body: string): void => {
    res.writeHead(status, { 'content-type': 'application/xml' }).end(`<?xml version="1.0" encoding="UTF-8"?>\n${body}`);
  };
  const error = (res: http.ServerResponse, status: number, code: string, method?: string): void => {
    if (method === 'HEAD') res.writeHead(status).end();
    else xml(res, status, `<Error><Code>${code}</Code><Message>${code}</Message></Error>`);
  };
  // S3 order: keys ascending, versions of one key newest first.
  const ordered = (): FakeVersion[] =>
    [...state.versions].sort((a, b) => (a.key === b.key ? b.lastModified.getTime() - a.lastModified.getTime() : a.key < b.key ? -1 : 1));

  const server = http.createServer((req, res) => {
    req.resume();
    const url = new URL(req.url ?? '/', 'http://fake');
    const q = url.searchParams;
    const [, b, ...rest] = url.pathname.split('/');
    const key = rest.map(decodeURIComponent).join('/');
    state.calls.push(`${req.method} ${key === '' ? '' : key}?${[...q.keys()].filter((k) => k !== 'x-id').join('&')}`);
    if (b !== bucket) return error(res, 404, 'NoSuchBucket', req.method);
    if (key === '') {
      if (req.method === 'GET' && q.has('versioning')) {
        return xml(
          res,
          200,
          '<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>',
        );
      }
      if (req.method === 'GET' && q.has('object-lock')) {
        if (!state.retention) return error(res, 404, 'ObjectLockConfigurationNotFoundError');
        const r = state.retention.days ? `<Days>${state.retention.days}</Days>` : `<Years>${state.retention.years ?? 0}</Years>`;
        return xml(
          res,
          200,
          `<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention><Mode>COMPLIANCE</Mode>${r}</DefaultRetention></Rule></ObjectLockConfiguration>`,
        );
      }
      if (req.method === 'GET' && q.has('versions')) {
        const prefix = q.get('prefix') ?? '';
        const all = ordered().filter((v) => v.key.startsWith(prefix));
        let start = 0;
        const km = q.get('key-marker');
        if (km) {
          const vm = q.get('version-id-marker');
          start = all.findIndex((v) => v.key === km && v.versionId === vm) + 1;
          if (start === 0) return error(res, 400, 'InvalidArgument');
        }
        const page = all.slice(start, start + Math.min(PAGE, Number(q.get('max-keys') ?? 1000)));
        const truncated = start + page.length < all.length;
        const last = page[page.length - 1];
        const latest = new Set<string>();
        const entries = page.map((v) => {
          const isLatest = ordered().find((o) => o.key === v.key) === v;
          if (isLatest) latest.add(v.key);
          const common = `<Key>${xmlEscape(v.key)}</Key><VersionId>${v.versionId}</VersionId><IsLatest>${isLatest}</IsLatest><LastModified>${v.lastModified.toISOString()}</LastModified>`;
          return v.body === undefined
            ? `<DeleteMarker>${common}</DeleteMarker>`
            : `<Version>${common}<ETag>"e"</ETag><Size>${v.body.length}</Size><StorageClass>STANDARD</StorageClass></Version>`;
        });
        return xml(
          res,
          200,
          `<ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>${bucket}</Name><Prefix>${xmlEscape(prefix)}</Prefix>` +
            `<KeyMarker>${xmlEscape(km ?? '')}</KeyMarker><VersionIdMarker>${q.get('version-id-marker') ?? ''}</VersionIdMarker><MaxKeys>${PAGE}</MaxKeys>` +
            `<IsTruncated>${truncated}</IsTruncated>` +
            (truncated && last
              ? `<NextKeyMarker>${xmlEscape(last.key)}</NextKeyMarker><NextVersionIdMarker>${last.versionId}</NextVersionIdMarker>`
              : '') +
            `${entries.join('')}</ListVersionsResult>`,
        );
      }
      return error(res, 501, 'NotImplemented');
    }
    // Object calls. Without versionId: the latest version (a delete marker hides the object).
    const versionId = q.get('versionId');
    const v = versionId ? state.versions.find((x) => x.key === key && x.versionId === versionId) : ordered().find((x) => x.key === key);
    if (req.method === 'DELETE') {
      if (!versionId) {
        state.versions.push({ key, versionId: `dm${state.versions.length}`, lastModified: new Date() });
        return res.writeHead(204).end();
      }
      if (!v) return res.writeHead(204).end();
      if (v.lockedUntil && v.lockedUntil > new Date()) return error(res, 403, 'AccessDenied');
      state.versions.splice(state.versions.indexOf(v), 1);
      return res.writeHead(204).end();
    }
    if (!v || v.body === undefined) return error(res, 404, versionId ? 'NoSuchVersion' : 'NoSuchKey', req.method);
    if (req.method === 'GET' && q.has('tagging')) {
      const tags = Object.entries(v.tags ?? {}).map(([k, val]) => `<Tag><Key>${xmlEscape(k)}</Key><Value>${xmlEscape(val)}</Value></Tag>`);
      return xml(res, 200, `<Tagging><TagSet>${tags.join('')}</TagSet></Tagging>`);
    }
    if (req.method === 'HEAD' || req.method === 'GET') {
      res.writeHead(200, {
        'content-length': v.body.length,
        'x-amz-version-id': v.versionId,
        'last-modified': v.lastModified.toUTCString(),
      });
      return res.end(req.method === 'GET' ? v.body : undefined);
    }
    return error(res, 501, 'NotImplemented', req.method);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  state.endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  state.stop = async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  };
  return state;
}

describe('S3 provider on a versioned, object-locked bucket (S3 wire-protocol fake)', () => {
  let fake: FakeVersionedS3;
  const stores: SnapStore[] = [];
  const t = (s: string): Date => new Date(s);
  const FULL = 'p/v2/Full-00000000-00000100-1700000000.gz';
  const INCR = 'p/v2/Incr-00000101-00000200-1700000100.gz';
  const EXCL = 'p/v2/Incr-00000201-00000300-1700000200.gz';
  const V1 = 'p/v1/Backup-1600000000/Full-00000000-00000050-1600000000.gz';

  const open = async (): Promise<SnapStore> => {
    const s = await openS3Store(s3Config(fake.endpoint, fake.bucket, 'p/v2'), FAST_FAIL);
    stores.push(s);
    return s;
  };

  beforeAll(async () => {
    fake = await startFakeVersionedS3('locked');
  });
  afterAll(async () => {
    for (const s of stores) await s.close();
    await fake?.stop();
  });

  const seed = (): void => {
    fake.versions = [
      // oldest version is the snapshot; a later overwrite and a delete marker do not change that
      {
        key: FULL,
        versionId: 'f1',
        lastModified: t('2023-11-14T22:13:20Z'),
        body: Buffer.from('full-original'),
        lockedUntil: t('2999-01-01T00:00:00Z'),
      },
      { key: FULL, versionId: 'f2', lastModified: t('2023-11-15T00:00:00Z'), body: Buffer.from('full-overwritten!') },
      { key: FULL, versionId: 'f3', lastModified: t('2023-11-16T00:00:00Z') },
      { key: INCR, versionId: 'i1', lastModified: t('2023-11-14T22:15:00Z'), body: Buffer.from('incr') },
      // exclusion tag on the oldest version hides it; a tag on a newer version would not
      {
        key: EXCL,
        versionId: 'e1',
        lastModified: t('2023-11-14T22:16:40Z'),
        body: Buffer.from('bad'),
        tags: { 'x-etcd-snapshot-exclude': 'true' },
      },
      {
        key: V1,
        versionId: 'o1',
        lastModified: t('2020-09-13T12:26:40Z'),
        body: Buffer.from('v1'),
        tags: { 'x-etcd-snapshot-exclude': 'false' },
      },
      { key: 'p/v2/Full-00000000-00000099', versionId: 'bad', lastModified: t('2023-11-14T00:00:00Z'), body: Buffer.from('?') },
      {
        key: 'p2/v2/Full-00000000-00000999-1700000999.gz',
        versionId: 's1',
        lastModified: t('2023-11-14T00:00:00Z'),
        body: Buffer.from('sibling'),
      },
    ];
  };

  it('lists the oldest version per key with its version id, skips excluded ones, pages with markers', async () => {
    seed();
    fake.retention = { days: 4 };
    const store = await open();
    fake.calls.length = 0;
    const list = await store.list();
    expect(list.map((s) => [s.snapName, s.versionId, s.sizeBytes])).toEqual([
      ['Full-00000000-00000050-1600000000.gz', 'o1', 2],
      ['Full-00000000-00000100-1700000000.gz', 'f1', 13],
      ['Incr-00000101-00000200-1700000100.gz', 'i1', 4],
    ]);
    const listCalls = fake.calls.filter((c) => c.startsWith('GET ?') && /(^|[?&])versions(&|$)/.test(c.slice(5)));
    expect(listCalls.length).toBeGreaterThan(1);
    expect(listCalls.some((c) => c.includes('key-marker') && c.includes('version-id-marker'))).toBe(true);
    // immutable until createdOn + default retention
    expect(list[1]?.immutabilityExpiryTime?.toISOString()).toBe('2023-11-18T22:13:20.000Z');
    expect(list[0]?.immutabilityExpiryTime?.toISOString()).toBe('2020-09-17T12:26:40.000Z');

    const all = await store.list({ includeExcluded: true });
    expect(all.map((s) => s.snapName)).toContain('Incr-00000201-00000300-1700000200.gz');
    expect(all).toHaveLength(4);
  });

  it('retention in years counts 365 days a year; no object-lock configuration means no expiry', async () => {
    seed();
    fake.retention = { years: 1 };
    const store = await open();
    const [, full] = (await store.list()) as [Snapshot, Snapshot];
    expect(full.immutabilityExpiryTime?.toISOString()).toBe('2024-11-13T22:13:20.000Z');
    fake.retention = undefined;
    expect((await store.list()).every((s) => s.immutabilityExpiryTime === undefined)).toBe(true);
  });

  it('fetches the listed version, deletes by version id, and a locked version is E_IMMUTABLE', async () => {
    seed();
    fake.retention = { days: 4 };
    const store = await open();
    const [, full, incr] = (await store.list()) as [Snapshot, Snapshot, Snapshot];
    expect((await readAll(await store.fetch(full))).toString()).toBe('full-original');

    const err = await rejection(store.delete(full));
    expect(err.code).toBe('E_IMMUTABLE');
    expect(err.message).toContain(FULL);

    fake.calls.length = 0;
    await store.delete(incr);
    expect(fake.calls).toContain(`DELETE ${INCR}?versionId`);
    expect(fake.versions.some((v) => v.key === INCR)).toBe(false);
    expect((await rejection(store.fetch(incr))).code).toBe('E_NOT_FOUND');
    expect((await rejection(store.delete(incr))).code).toBe('E_NOT_FOUND');
  });
});
