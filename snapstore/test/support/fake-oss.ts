/**
 * A fake of the documented Alibaba Cloud OSS REST API, enough for the OSS provider driven through the
 * real `ali-oss` client: PutObject, InitiateMultipartUpload, UploadPart, CompleteMultipartUpload,
 * AbortMultipartUpload, GetObject (with Range), HeadObject, ListObjects (v1, marker), DeleteObject and
 * GetBucketWorm, with OSS's XML bodies and error format. Requests are signed with the documented V1
 * scheme (`Authorization: OSS <AccessKeyId>:<base64 HMAC-SHA1>`); a wrong key or signature is 403.
 *
 * The client reaches an IP endpoint with the bucket in the Host header (`<bucket>.<region host>`) and
 * the object in the path, which is virtual-hosted addressing; the fake takes the bucket from there.
 * Objects live in memory; one bucket, created at start.
 */
import { createHash, createHmac, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export const FAKE_OSS_ACCESS_KEY_ID = 'LTAI-fake-access-key';
export const FAKE_OSS_ACCESS_KEY_SECRET = 'fake-access-key-secret';

/** Sub-resources that are part of the V1 signature (the ones this fake serves). */
const SIGNED_SUBRESOURCES = new Set(['uploads', 'uploadId', 'partNumber', 'worm']);

interface StoredObject {
  data: Buffer;
  lastModified: Date;
  etag: string;
}

interface Upload {
  key: string;
  parts: Map<number, { data: Buffer; etag: string }>;
}

export interface FakeOssRequest {
  method: string;
  /** Path and query as sent. */
  url: string;
  status: number;
  /** The AccessKeyId the request was signed with ('' when unsigned). */
  accessKeyId: string;
}

export interface FakeOss {
  /** `http://127.0.0.1:<port>`, the `storageEndpoint` of the credentials. */
  endpoint: string;
  bucket: string;
  requests: FakeOssRequest[];
  /** Object keys, plus `<key>#upload=<id>/part=<n>` for each part of an unfinished multipart upload. */
  rawKeys(): string[];
  putRaw(key: string, data: Buffer): void;
  /** A bucket retention policy as GetBucketWorm reports it; undefined removes it (404). */
  setWorm(worm: { state: 'InProgress' | 'Locked' | 'Expired'; days: number } | undefined): void;
  /** The next UploadPart requests answer 500 InternalError, `times` of them. */
  failUploadParts(times: number): void;
  /** A key rotation: from now on only this access key is accepted (the old one is disabled). */
  rotateAccessKey(id: string, secret: string): void;
  stop(): Promise<void>;
}

const xmlEscape = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const md5Etag = (b: Buffer): string => `"${createHash('md5').update(b).digest('hex').toUpperCase()}"`;

function errorXml(code: string, message: string): string {
  const id = randomBytes(12).toString('hex').toUpperCase();
  return `<?xml version="1.0" encoding="UTF-8"?>\n<Error>\n<Code>${code}</Code>\n<Message>${xmlEscape(message)}</Message>\n<RequestId>${id}</RequestId>\n<HostId>fake-oss</HostId>\n</Error>`;
}

export async function startFakeOss(opts: { bucket?: string } = {}): Promise<FakeOss> {
  const bucket = opts.bucket ?? 'etcd-backups';
  const objects = new Map<string, StoredObject>();
  const uploads = new Map<string, Upload>();
  const requests: FakeOssRequest[] = [];
  let worm: { state: string; days: number; created: Date } | undefined;
  let failParts = 0;
  let accessKey = { id: FAKE_OSS_ACCESS_KEY_ID, secret: FAKE_OSS_ACCESS_KEY_SECRET };

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const rec: FakeOssRequest = { method: req.method ?? '', url: req.url ?? '', status: 0, accessKeyId: '' };
      requests.push(rec);
      const send = (status: number, body = '', headers: Record<string, string> = {}): void => {
        rec.status = status;
        res.writeHead(status, {
          'x-oss-request-id': randomBytes(12).toString('hex').toUpperCase(),
          ...(body ? { 'content-type': 'application/xml' } : {}),
          ...headers,
        });
        res.end(body);
      };
      const fail = (status: number, code: string, message: string): void => send(status, errorXml(code, message));
      try {
        handle(req, res, Buffer.concat(chunks), send, fail, rec);
      } catch (err) {
        fail(500, 'InternalError', String(err));
      }
    });
  });

  function handle(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    body: Buffer,
    send: (status: number, body?: string, headers?: Record<string, string>) => void,
    fail: (status: number, code: string, message: string) => void,
    rec: FakeOssRequest,
  ): void {
    const url = new URL(req.url ?? '/', 'http://fake');
    const method = req.method ?? '';
    const host = String(req.headers.host ?? '');
    const reqBucket = host.split('.').length > 1 && !/^\d+\.\d+\.\d+\.\d+(:\d+)?$/.test(host) ? (host.split('.')[0] as string) : '';
    const key = decodeURIComponent(url.pathname.slice(1));
    const q = url.searchParams;

    // V1 signature: VERB, Content-MD5, Content-Type, date, x-oss-* headers, /bucket/object?sub-resources.
    const auth = String(req.headers.authorization ?? '');
    const m = /^OSS ([^:]+):(.+)$/.exec(auth);
    if (!m) return fail(403, 'AccessDenied', 'The request is not signed');
    rec.accessKeyId = m[1] as string;
    if (m[1] !== accessKey.id) return fail(403, 'InvalidAccessKeyId', 'The OSS Access Key Id you provided does not exist in our records.');
    const ossHeaders = Object.keys(req.headers)
      .filter((h) => h.startsWith('x-oss-'))
      .sort()
      .map((h) => `${h}:${String(req.headers[h]).trim()}`);
    const sub = [...q.keys()]
      .filter((k) => SIGNED_SUBRESOURCES.has(k))
      .sort()
      .map((k) => (q.get(k) ? `${k}=${q.get(k)}` : k));
    const resource = `/${reqBucket ? `${reqBucket}/` : ''}${key}${sub.length ? `?${sub.join('&')}` : ''}`;
    const date = String(req.headers['x-oss-date'] ?? req.headers.date ?? '');
    const toSign = [
      method,
      String(req.headers['content-md5'] ?? ''),
      String(req.headers['content-type'] ?? ''),
      date,
      ...ossHeaders,
      resource,
    ].join('\n');
    const expected = createHmac('sha1', accessKey.secret).update(toSign).digest('base64');
    if (m[2] !== expected)
      return fail(403, 'SignatureDoesNotMatch', 'The request signature we calculated does not match the signature you provided.');
    if (reqBucket !== bucket) return fail(404, 'NoSuchBucket', `The specified bucket ${reqBucket} does not exist.`);

    if (key === '') {
      if (method === 'GET' && q.has('worm')) {
        if (!worm) return fail(404, 'NoSuchWORMConfiguration', 'The WORM Configuration does not exist.');
        return send(
          200,
          `<?xml version="1.0" encoding="UTF-8"?>\n<WormConfiguration><WormId>1666E2CFB2B3418****</WormId><State>${worm.state}</State><RetentionPeriodInDays>${worm.days}</RetentionPeriodInDays><CreationDate>${worm.created.toISOString()}</CreationDate></WormConfiguration>`,
        );
      }
      if (method === 'GET') return send(200, listXml(q));
      return fail(405, 'MethodNotAllowed', `${method} on a bucket`);
    }

    if (method === 'POST' && q.has('uploads')) {
      const id = randomBytes(16).toString('hex').toUpperCase();
      uploads.set(id, { key, parts: new Map() });
      return send(
        200,
        `<?xml version="1.0" encoding="UTF-8"?>\n<InitiateMultipartUploadResult><Bucket>${bucket}</Bucket><Key>${xmlEscape(key)}</Key><UploadId>${id}</UploadId></InitiateMultipartUploadResult>`,
      );
    }
    const uploadId = q.get('uploadId');
    if (uploadId !== null) {
      const up = uploads.get(uploadId);
      if (!up || up.key !== key) return fail(404, 'NoSuchUpload', 'The specified upload does not exist.');
      if (method === 'PUT' && q.has('partNumber')) {
        if (failParts > 0) {
          failParts--;
          return fail(500, 'InternalError', 'injected part failure');
        }
        const n = Number(q.get('partNumber'));
        if (!Number.isInteger(n) || n < 1 || n > 10_000) return fail(400, 'InvalidArgument', `part number ${q.get('partNumber')}`);
        const etag = md5Etag(body);
        up.parts.set(n, { data: body, etag });
        return send(200, '', { etag });
      }
      if (method === 'POST') {
        const listed = [...body.toString('utf8').matchAll(/<PartNumber>(\d+)<\/PartNumber>\s*<ETag>([^<]+)<\/ETag>/g)].map((x) => ({
          n: Number(x[1]),
          etag: x[2] as string,
        }));
        const datas: Buffer[] = [];
        let prev = 0;
        for (const [i, p] of listed.entries()) {
          const part = up.parts.get(p.n);
          if (!part || part.etag !== p.etag) return fail(400, 'InvalidPart', `part ${p.n} was not uploaded or its ETag differs`);
          if (p.n <= prev) return fail(400, 'InvalidPartOrder', 'parts must be in ascending order');
          // OSS: every part but the last is at least 100 KB.
          if (i < listed.length - 1 && part.data.length < 100 * 1024)
            return fail(400, 'EntityTooSmall', `part ${p.n} is smaller than 100 KB`);
          prev = p.n;
          datas.push(part.data);
        }
        const data = Buffer.concat(datas);
        uploads.delete(uploadId);
        const etag = `"${createHash('md5').update(data).digest('hex').toUpperCase()}-${listed.length}"`;
        objects.set(key, { data, lastModified: new Date(), etag });
        return send(
          200,
          `<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUploadResult><Bucket>${bucket}</Bucket><Key>${xmlEscape(key)}</Key><ETag>${etag}</ETag></CompleteMultipartUploadResult>`,
          { etag },
        );
      }
      if (method === 'DELETE') {
        uploads.delete(uploadId);
        return send(204);
      }
      return fail(405, 'MethodNotAllowed', `${method} with uploadId`);
    }

    const obj = objects.get(key);
    if (method === 'PUT') {
      const etag = md5Etag(body);
      objects.set(key, { data: body, lastModified: new Date(), etag });
      return send(200, '', { etag });
    }
    if (method === 'HEAD') {
      if (!obj) {
        // HEAD answers have no body, so the error is the status alone.
        rec.status = 404;
        res.writeHead(404, { 'content-length': '0' }).end();
        return;
      }
      return send(200, '', { 'content-length': String(obj.data.length), etag: obj.etag, 'last-modified': obj.lastModified.toUTCString() });
    }
    if (method === 'GET') {
      if (!obj) return fail(404, 'NoSuchKey', 'The specified key does not exist.');
      const range = /^bytes=(\d+)-(\d*)$/.exec(String(req.headers.range ?? ''));
      if (!range) return sendBytes(200, obj.data, {});
      const start = Number(range[1]);
      const end = range[2] === '' ? obj.data.length - 1 : Math.min(Number(range[2]), obj.data.length - 1);
      if (start >= obj.data.length) return fail(416, 'InvalidRange', 'The requested range cannot be satisfied');
      return sendBytes(206, obj.data.subarray(start, end + 1), { 'content-range': `bytes ${start}-${end}/${obj.data.length}` });
    }
    if (method === 'DELETE') {
      if (obj && worm && worm.state !== 'Expired' && Date.now() < obj.lastModified.getTime() + worm.days * 86_400_000) {
        return fail(409, 'FileImmutable', 'The object is protected by the bucket retention policy.');
      }
      objects.delete(key);
      return send(204);
    }
    return fail(405, 'MethodNotAllowed', method);

    function sendBytes(status: number, data: Buffer, headers: Record<string, string>): void {
      rec.status = status;
      res.writeHead(status, {
        'content-type': 'application/octet-stream',
        'content-length': String(data.length),
        etag: obj?.etag ?? '',
        ...headers,
      });
      res.end(data);
    }
  }

  function listXml(q: URLSearchParams): string {
    const prefix = q.get('prefix') ?? '';
    const marker = q.get('marker') ?? '';
    const max = Math.min(Number(q.get('max-keys') ?? 100), 1000);
    const keys = [...objects.keys()].filter((k) => k.startsWith(prefix) && k > marker).sort();
    const page = keys.slice(0, max);
    const truncated = keys.length > page.length;
    const contents = page
      .map((k) => {
        const o = objects.get(k) as StoredObject;
        return `<Contents><Key>${xmlEscape(k)}</Key><LastModified>${o.lastModified.toISOString()}</LastModified><ETag>${o.etag}</ETag><Type>Normal</Type><Size>${o.data.length}</Size><StorageClass>Standard</StorageClass><Owner><ID>0022012****</ID><DisplayName>user-example</DisplayName></Owner></Contents>`;
      })
      .join('');
    return (
      `<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult><Name>${bucket}</Name><Prefix>${xmlEscape(prefix)}</Prefix><Marker>${xmlEscape(marker)}</Marker>` +
      `<MaxKeys>${max}</MaxKeys><Delimiter></Delimiter><IsTruncated>${truncated}</IsTruncated>${truncated ? `<NextMarker>${xmlEscape(page[page.length - 1] as string)}</NextMarker>` : ''}${contents}</ListBucketResult>`
    );
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    bucket,
    requests,
    rawKeys() {
      const out = [...objects.keys()];
      for (const [id, up] of uploads) for (const n of up.parts.keys()) out.push(`${up.key}#upload=${id}/part=${n}`);
      return out.sort();
    },
    putRaw(key, data) {
      objects.set(key, { data, lastModified: new Date(), etag: md5Etag(data) });
    },
    setWorm(w) {
      worm = w ? { ...w, created: new Date() } : undefined;
    },
    failUploadParts(times) {
      failParts = times;
    },
    rotateAccessKey(id, secret) {
      accessKey = { id, secret };
    },
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
