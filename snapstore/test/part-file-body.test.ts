import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, readlink, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BODY_CHUNKS, BodyBufferPool, PartFileBody } from '../src/providers/part-file-body.js';
import { writeSelfSignedCert } from '../../test/support/certs.js';
import { waitFor } from '../../test/support/wait.js';

const MiB = 1024 * 1024;

let dir: string;
let file: string;
let content: Buffer;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'part-file-body-'));
  file = path.join(dir, 'part');
  // Larger than loopback's socket buffers, so writes queue in the kernel while the server holds back.
  content = randomBytes(24 * MiB + 12_345);
  await writeFile(file, content);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

interface Receiver {
  url: string;
  /** The body of the next request, once it ended: its SHA-256 and length, or the error that cut it off. */
  next(): Promise<{ sha256: string; bytes: number } | { error: string }>;
  /** Lets the held request be read. */
  release(): void;
  close(): Promise<void>;
}

/** A server that holds every request unread until `release`, then hashes what arrives. */
async function startReceiver(tls?: { key: string; cert: string }): Promise<Receiver> {
  let resolveNext: (r: { sha256: string; bytes: number } | { error: string }) => void = () => undefined;
  let nextBody = new Promise<{ sha256: string; bytes: number } | { error: string }>((r) => (resolveNext = r));
  let held: http.IncomingMessage | undefined;
  let released = false;
  const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    if (!released) req.pause();
    held = req;
    const hash = createHash('sha256');
    let bytes = 0;
    req.on('data', (c: Buffer) => {
      hash.update(c);
      bytes += c.length;
    });
    req.on('end', () => {
      resolveNext({ sha256: hash.digest('hex'), bytes });
      res.end('ok');
    });
    req.on('error', (err) => resolveNext({ error: err.message }));
    req.on('aborted', () => resolveNext({ error: 'aborted' }));
  };
  const server = tls ? https.createServer(tls, handler) : http.createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `${tls ? 'https' : 'http'}://127.0.0.1:${port}/`,
    next: async () => {
      const r = await nextBody;
      nextBody = new Promise((res) => (resolveNext = res));
      return r;
    },
    release: () => {
      released = true; // a request that has not arrived yet is read at once
      held?.resume();
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

/** Whether this process has the part file open. */
async function partFileOpen(): Promise<boolean> {
  for (const fd of await readdir('/proc/self/fd')) {
    const target = await readlink(path.join('/proc/self/fd', fd)).catch(() => '');
    if (target === file) return true;
  }
  return false;
}

describe('PartFileBody', () => {
  let receiver: Receiver | undefined;
  afterEach(async () => {
    await receiver?.close();
    receiver = undefined;
  });

  for (const scheme of ['http', 'https'] as const) {
    it(`sends the file over ${scheme} through ${BODY_CHUNKS} buffers, reusing each only after the socket took it`, async () => {
      let ca: string | undefined;
      if (scheme === 'https') {
        const { keyFile, certFile } = await writeSelfSignedCert(dir, '127.0.0.1');
        ca = await readFile(certFile, 'utf8');
        receiver = await startReceiver({ key: await readFile(keyFile, 'utf8'), cert: ca });
      } else {
        receiver = await startReceiver();
      }
      const body = new PartFileBody(file, content.length);
      const mod = scheme === 'https' ? https : http;
      const req = mod.request(receiver.url, {
        method: 'PUT',
        headers: { 'content-length': String(content.length) },
        ...(ca ? { ca } : {}),
      });
      const answered = new Promise<number>((resolve, reject) => {
        req.on('response', (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', reject);
      });
      body.pipe(req);
      // Every buffer is made and the socket holds unwritten bytes: reusing a buffer too early would now
      // overwrite bytes the server has not received yet.
      await waitFor(() => body.stats.buffersMade === BODY_CHUNKS && (req.socket?.writableLength ?? 0) > 0, 'the socket to back up');
      receiver.release();
      const got = await receiver.next();
      expect(got).toEqual({ sha256: sha256(content), bytes: content.length });
      expect(await answered).toBe(200);
      expect(body.stats).toEqual({ buffersMade: BODY_CHUNKS, readableChunks: 0 });
      body.destroy();
    });
  }

  it("bodies of one upload share its pool: the second part reuses the first part's buffers, and release frees them", async () => {
    receiver = await startReceiver();
    receiver.release();
    const pool = new BodyBufferPool();
    for (let part = 0; part < 2; part++) {
      const body = new PartFileBody(file, content.length, pool);
      const req = http.request(receiver.url, { method: 'PUT', headers: { 'content-length': String(content.length) } });
      const answered = new Promise<void>((resolve, reject) => {
        req.on('response', (res) => res.resume().on('end', resolve));
        req.on('error', reject);
      });
      body.pipe(req);
      expect(await receiver.next()).toEqual({ sha256: sha256(content), bytes: content.length });
      await answered;
      body.destroy();
    }
    expect(pool.made).toBeGreaterThan(0);
    expect(pool.made).toBeLessThanOrEqual(BODY_CHUNKS);
    const spare = pool.take();
    expect(spare.length).toBeGreaterThan(0);
    pool.give(spare);
    pool.release();
    expect(spare.length).toBe(0); // freed at once, not at the next major GC
    const late = Buffer.allocUnsafeSlow(1024);
    pool.give(late); // a write that calls back after the upload ended
    expect(late.length).toBe(0);
  });

  it('is an ordinary Readable for any other consumer, with a fresh buffer per chunk', async () => {
    const body = new PartFileBody(file, content.length);
    const chunks: Buffer[] = [];
    for await (const c of body) chunks.push(c as Buffer);
    expect(sha256(Buffer.concat(chunks))).toBe(sha256(content));
    expect(new Set(chunks.map((c) => c.buffer)).size).toBe(chunks.length);
    expect(body.stats.buffersMade).toBe(0);
    expect(body.stats.readableChunks).toBe(chunks.length);
  });

  it('fails the request with E_SPOOL when the file is shorter than the part, and closes the file', async () => {
    receiver = await startReceiver();
    const body = new PartFileBody(file, content.length + 100);
    const req = http.request(receiver.url, { method: 'PUT', headers: { 'content-length': String(content.length + 100) } });
    const failed = new Promise<unknown>((resolve) => req.on('error', resolve));
    body.pipe(req);
    receiver.release();
    const err = await failed;
    expect(err).toMatchObject({ code: 'E_SPOOL' });
    expect(String((err as Error).message)).toContain(`ends at byte ${content.length} of the ${content.length + 100}`);
    expect(await receiver.next()).toHaveProperty('error');
    await waitFor(async () => body.destroyed && !(await partFileOpen()), 'the part file to close');
  });

  it('stops reading and closes the file when the request is destroyed mid-body', async () => {
    receiver = await startReceiver();
    const body = new PartFileBody(file, content.length);
    const req = http.request(receiver.url, { method: 'PUT', headers: { 'content-length': String(content.length) } });
    const failed = new Promise<unknown>((resolve) => req.on('error', resolve));
    body.pipe(req);
    await waitFor(() => (req.socket?.writableLength ?? 0) > 0, 'the socket to back up');
    expect(await partFileOpen()).toBe(true);
    req.destroy(new Error('attempt timed out'));
    body.destroy(); // as withFileBody does when the attempt ends
    expect(await failed).toMatchObject({ message: 'attempt timed out' });
    await waitFor(async () => !(await partFileOpen()), 'the part file to close');
    expect(body.stats.buffersMade).toBeLessThanOrEqual(BODY_CHUNKS);
  });

  it('refuses a second pipe', () => {
    const body = new PartFileBody(file, content.length);
    const sink = new PassThrough();
    body.pipe(sink);
    expect(() => body.pipe(sink)).toThrow(/piped twice/);
    sink.destroy();
    body.destroy();
  });
});
