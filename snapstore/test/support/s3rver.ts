/**
 * s3rver (a real S3 HTTP server on the local filesystem) as a child process for tests and benches.
 *
 * A child process because s3rver's continuation tokens use DES, which Node 20 only has with
 * `--openssl-legacy-provider` (else paginated listing answers 500), and that flag cannot be turned on
 * inside an already running vitest worker. Port 0 and a fresh temp directory per instance, so
 * parallel runs on a shared machine never collide.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import type { S3Credentials } from '../../src/config.js';

export const S3RVER_ACCESS_KEY = 'S3RVER';
export const S3RVER_SECRET_KEY = 'S3RVER';

/** What a client of s3rver needs, as a credentials file holds it: its keys and path-style addressing. */
export const S3RVER_CREDENTIALS: S3Credentials = {
  region: 'us-east-1',
  accessKeyID: S3RVER_ACCESS_KEY,
  secretAccessKey: S3RVER_SECRET_KEY,
  s3ForcePathStyle: true,
};

export interface S3rverInstance {
  /** `http://127.0.0.1:<port>` */
  endpoint: string;
  bucket: string;
  /** s3rver's data directory. */
  directory: string;
  /** The s3rver process (benchmarks read its CPU time). */
  pid: number;
  /**
   * Every object key in the bucket, read from s3rver's directory, plus one entry per stored part of
   * an unfinished multipart upload, named `<key>#upload=<uploadId>/part=<n>` so it sorts under the
   * key it belongs to. s3rver cannot abort uploads (405), so such entries stay after an abort.
   */
  rawKeys(): Promise<string[]>;
  stop(): Promise<void>;
}

const OBJECT_SUFFIX = '._S3rver_object';
const UPLOADS_DIR = '._S3rver_uploads';

/** Marker inside the rawKeys entries that stand for multipart parts, not objects. */
export const UPLOAD_PART_MARKER = '#upload=';

const running = new Set<ChildProcess>();
let exitHookInstalled = false;

export interface S3rverOptions {
  bucket?: string;
  /** Serve HTTPS with this PEM key and certificate (files). */
  tls?: { keyFile: string; certFile: string };
}

/**
 * The preload beside this module; a bench bundled by `scripts/bench.mjs --compiled` runs from
 * node_modules/.cache, so there it is found from the bench's directory (ETCDBR_BENCH_DIR, e2e/bench).
 */
const ATOMIC_PUT_PRELOAD =
  process.env['ETCDBR_BENCH_DIR'] === undefined
    ? fileURLToPath(new URL('./s3rver-atomic-put.cjs', import.meta.url))
    : path.join(process.env['ETCDBR_BENCH_DIR'], '..', '..', 'snapstore', 'test', 'support', 's3rver-atomic-put.cjs');

export async function startS3rver(opts: S3rverOptions = {}): Promise<S3rverInstance> {
  const bucket = opts.bucket ?? 'etcd-backups';
  const directory = await mkdtemp(path.join(os.tmpdir(), 's3rver-'));
  const require = createRequire(import.meta.url);
  const cli = path.join(path.dirname(require.resolve('s3rver/package.json')), 'bin', 's3rver.js');

  if (!exitHookInstalled) {
    exitHookInstalled = true;
    // A test run that dies must not leave servers behind.
    process.once('exit', () => {
      for (const c of running) c.kill('SIGKILL');
    });
  }

  const child = spawn(
    process.execPath,
    [
      '--openssl-legacy-provider',
      // S3's all-or-nothing object writes (s3rver-atomic-put.cjs says why).
      '--require',
      ATOMIC_PUT_PRELOAD,
      cli,
      '--directory',
      directory,
      '--address',
      '127.0.0.1',
      '--port',
      '0',
      '--silent',
      '--no-vhost-buckets',
      '--configure-bucket',
      bucket,
      ...(opts.tls ? ['--key', opts.tls.keyFile, '--cert', opts.tls.certFile] : []),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NODE_OPTIONS: '' } },
  );
  running.add(child);

  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  exited.then(() => running.delete(child)).catch(() => undefined);

  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    stderr = (stderr + d).slice(-4000);
  });

  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error('s3rver did not start within 20 s')), 20_000);
    const fail = (err: Error): void => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(new Error(`${err.message}\n${stderr}`));
    };
    child.stdout?.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /listening on [^\s:]+:(\d+)/.exec(out);
      if (m?.[1]) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.once('exit', (code) => fail(new Error(`s3rver exited with ${String(code)} before listening`)));
  });

  const bucketDir = path.join(directory, bucket);
  return {
    endpoint: `${opts.tls ? 'https' : 'http'}://127.0.0.1:${port}`,
    bucket,
    directory,
    pid: child.pid ?? -1,
    rawKeys: () => s3rverRawKeys(bucketDir),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(t);
      }
      await rm(directory, { recursive: true, force: true });
    },
  };
}

async function s3rverRawKeys(bucketDir: string): Promise<string[]> {
  const keys: string[] = [];
  const walk = async (dir: string, rel: string): Promise<void> => {
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch (err) {
      if ((err as { code?: unknown }).code === 'ENOENT') return;
      throw err;
    }
    for (const e of entries) {
      if (e.isDirectory()) {
        if (rel === '' && e.name === UPLOADS_DIR) continue;
        await walk(path.join(dir, e.name), rel === '' ? e.name : `${rel}/${e.name}`);
      } else if (e.name.endsWith(OBJECT_SUFFIX)) {
        const name = e.name.slice(0, -OBJECT_SUFFIX.length);
        keys.push(rel === '' ? name : `${rel}/${name}`);
      }
    }
  };
  await walk(bucketDir, '');

  // Unfinished multipart uploads: <bucket>/._S3rver_uploads/<uploadId>/{key,metadata,<n>,<n>.md5}
  const uploadsDir = path.join(bucketDir, UPLOADS_DIR);
  let uploads: string[] = [];
  try {
    uploads = await readdir(uploadsDir);
  } catch (err) {
    if ((err as { code?: unknown }).code !== 'ENOENT') throw err;
  }
  for (const id of uploads) {
    const dir = path.join(uploadsDir, id);
    const key = await readFile(path.join(dir, 'key'), 'utf8').catch(() => '?');
    const parts = (await readdir(dir).catch(() => [] as string[])).filter((f) => /^\d+$/.test(f));
    if (parts.length === 0) keys.push(`${key}${UPLOAD_PART_MARKER}${id}`);
    for (const p of parts) keys.push(`${key}${UPLOAD_PART_MARKER}${id}/part=${p}`);
  }
  return keys.sort();
}

export interface RecordedRequest {
  method: string;
  /** Path and query as sent. */
  url: string;
  headers: http.IncomingHttpHeaders;
  status?: number;
}

export interface RecordingProxy {
  endpoint: string;
  requests: RecordedRequest[];
  stop(): Promise<void>;
}

/**
 * A transparent HTTP proxy in front of a real server that records every request line, its headers
 * and the status answered. Lets tests prove what the provider sent (an AbortMultipartUpload, SSE-C
 * headers) without faking the server. Path-style only; the Host header is passed through unchanged
 * so SigV4 signatures stay valid.
 */
export async function startRecordingProxy(target: string): Promise<RecordingProxy> {
  const t = new URL(target);
  const requests: RecordedRequest[] = [];
  const server = http.createServer((req, res) => {
    const rec: RecordedRequest = { method: req.method ?? '', url: req.url ?? '', headers: req.headers };
    requests.push(rec);
    const upstream = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (up) => {
      rec.status = up.statusCode;
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    req.on('error', () => upstream.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    requests,
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
