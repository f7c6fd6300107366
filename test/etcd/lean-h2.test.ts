/**
 * The online replay's lean HTTP/2 client (src/etcd/lean-h2.ts, also the benches' load generator's) against a real
 * etcd: many concurrent streams each get their own answer, bodies larger than etcd's flow-control windows
 * go through, and a server that goes away fails pending calls instead of leaving them hanging.
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { LeanDeadlineError, LeanH2 } from '../../src/etcd/lean-h2.js';
import { putFrame } from '../support/put-frame.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { startEtcdWithClient, startTestEtcd } from '../support/etcd.js';

const PUT = '/etcdserverpb.KV/Put';

/** A gRPC-framed etcdserverpb.PutRequest{key = 1, value = 2}, as the load generator sends it. */
function putBody(key: string, value: Buffer): Buffer {
  return putFrame(Buffer.from(key), value);
}

/** PutResponse.header (field 1) .revision (field 3), from a gRPC-framed response. */
function revisionOf(response: Buffer): number {
  let pos = 5;
  const read = (buf: Buffer): number => {
    let result = 0;
    let scale = 1;
    for (;;) {
      const b = buf[pos++]!;
      result += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return result;
      scale *= 128;
    }
  };
  expect(response[pos++]).toBe(0x0a);
  const end = read(response) + pos;
  while (pos < end) {
    const tag = read(response);
    const value = read(response); // every ResponseHeader field is a varint
    if (tag === 3 << 3) return value;
  }
  throw new Error('PutResponse without a header revision');
}

const cleanups = cleanupAfterEach();

async function etcdAndClient(options: Parameters<typeof LeanH2.connect>[1] = {}) {
  const env = await startEtcdWithClient('etcdbr-h2-client-');
  cleanups.push(() => env.cleanup());
  const client = await LeanH2.connect(env.etcd.clientUrl, options);
  cleanups.push(() => client.close());
  return { env, client };
}

describe('raw HTTP/2 unary gRPC client (bench load generator)', () => {
  it('answers 2,000 puts made 64 at a time, each with the revision etcd gave that put', async () => {
    // The smallest receive window makes the client widen it many times over 2,000 responses.
    const { env, client } = await etcdAndClient({ receiveWindow: 65_535 });
    const count = 2000;
    const revisions: number[] = [];
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < count) {
        const i = next++;
        revisions[i] = revisionOf(await client.call(PUT, putBody(`/h2/key-${String(i).padStart(5, '0')}`, Buffer.from(`value-${i}`))));
      }
    };
    await Promise.all(Array.from({ length: 64 }, worker));

    // A fresh etcd is at revision 1: 2,000 puts are revisions 2..2001, each once.
    expect([...revisions].sort((a, b) => a - b)).toEqual(Array.from({ length: count }, (_, i) => i + 2));
    const kvs = await env.client.getAll().prefix('/h2/').exec();
    expect(kvs.kvs).toHaveLength(count);
    for (const kv of kvs.kvs) {
      const i = Number(kv.key.toString().slice('/h2/key-'.length));
      expect(kv.value.toString()).toBe(`value-${i}`);
      // Each answer reached the call that made it: the revision it reports is its own key's.
      expect(Number(kv.mod_revision)).toBe(revisions[i]);
    }
  });

  it('sends bodies larger than the flow-control windows, within them', async () => {
    const { env, client } = await etcdAndClient();
    // 200 KiB each, three at once: over etcd's initial 64 KiB stream and connection windows, under its
    // 1.5 MiB request limit, so the bodies only get through as etcd widens the windows.
    const values = [0, 1, 2].map((n) => Buffer.alloc(200 * 1024, 0x61 + n));
    const responses = await Promise.all(values.map((v, n) => client.call(PUT, putBody(`/h2/big-${n}`, v))));

    expect(responses.map(revisionOf).sort((a, b) => a - b)).toEqual([2, 3, 4]);
    for (const [n, v] of values.entries()) {
      const got = await env.client.get(`/h2/big-${n}`).buffer();
      expect(got?.equals(v)).toBe(true);
    }
  });

  it('rejects pending and later calls when etcd goes away mid-run', async () => {
    const { env, client } = await etcdAndClient();
    let succeeded = 0;
    let stopping: Promise<void> | undefined;
    const failures: string[] = [];
    let n = 0;
    const worker = async (): Promise<void> => {
      for (;;) {
        try {
          await client.call(PUT, putBody(`/h2/away-${n++ % 100}`, Buffer.from('x')));
        } catch (err) {
          failures.push((err as Error).message);
          return;
        }
        if (++succeeded === 300) stopping = env.etcd.stop();
      }
    };
    // Every worker ends only through a rejected call: a hanging call would time the test out.
    await Promise.all(Array.from({ length: 64 }, worker));
    await stopping;

    expect(succeeded).toBeGreaterThanOrEqual(300);
    expect(failures).toHaveLength(64);
    for (const message of failures) {
      expect(message).toMatch(
        /^(\/etcdserverpb\.KV\/Put on stream \d+|cannot call \/etcdserverpb\.KV\/Put): .*(GOAWAY|was closed by the server|failed: )/,
      );
    }
    await expect(client.call(PUT, putBody('/h2/after', Buffer.from('x')))).rejects.toThrow(/^cannot call \/etcdserverpb\.KV\/Put: /);
  });

  it("keeps to etcd's limit on concurrent streams, queueing the calls beyond it", async () => {
    const etcd = await startTestEtcd({ extraArgs: ['--max-concurrent-streams=4'] });
    cleanups.push(() => etcd.cleanup());
    const client = await LeanH2.connect(etcd.clientUrl);
    cleanups.push(() => client.close());
    // etcd refuses (RST_STREAM REFUSED_STREAM) a fifth stream opened while four are open.
    const responses = await Promise.all(
      Array.from({ length: 64 }, (_, i) => client.call(PUT, putBody(`/h2/limited-${i}`, Buffer.from('x')))),
    );

    expect(responses.map(revisionOf).sort((a, b) => a - b)).toEqual(Array.from({ length: 64 }, (_, i) => i + 2));
  });

  it('names an endpoint that does not speak HTTP/2, or does not listen', async () => {
    // An HTTP/1.1 server answers the preface with an error page, not SETTINGS.
    const server = net.createServer((socket) => {
      socket.resume(); // reads to the client's FIN, so the connection closes
      socket.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const { port } = server.address() as net.AddressInfo;

    await expect(LeanH2.connect(`http://127.0.0.1:${port}`)).rejects.toThrow(
      `127.0.0.1:${port} did not answer with HTTP/2 SETTINGS (is it an h2c/gRPC server?); it sent "HTTP/1.1 "`,
    );
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const closedPort = (closed.address() as net.AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    await expect(LeanH2.connect(`http://127.0.0.1:${closedPort}`)).rejects.toThrow(
      `HTTP/2 connection to 127.0.0.1:${closedPort} failed: connect ECONNREFUSED 127.0.0.1:${closedPort}`,
    );
    await expect(LeanH2.connect(`https://127.0.0.1:${port}`)).rejects.toThrow(/endpoint must be plain http:\/\/ \(h2c\), got https:/);
  });

  it("ends a call to a server that stalls at its deadline, or at the caller's abort, and keeps the connection", async () => {
    // Says hello (an empty SETTINGS frame) and then nothing, ever: a stalled etcd as the client sees it.
    const sockets = new Set<net.Socket>();
    const server = net.createServer((socket) => {
      sockets.add(socket);
      socket.resume();
      socket.write(Buffer.from([0, 0, 0, 0x4, 0, 0, 0, 0, 0]));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => (sockets.forEach((s) => s.destroy()), server.close(resolve))));
    const { port } = server.address() as net.AddressInfo;
    const client = await LeanH2.connect(`http://127.0.0.1:${port}`);
    cleanups.push(() => client.close());

    const late = client.call(PUT, putBody('k', Buffer.from('v')), { timeoutMs: 50 });
    await expect(late).rejects.toBeInstanceOf(LeanDeadlineError);
    await expect(late).rejects.toThrow(`${PUT}: 127.0.0.1:${port} did not answer within 50 ms`);

    const stop = new AbortController();
    const stopped = client.call(PUT, putBody('k', Buffer.from('v')), { signal: stop.signal });
    stop.abort(new Error('received SIGTERM'));
    await expect(stopped).rejects.toThrow('received SIGTERM');
    await expect(client.call(PUT, putBody('k', Buffer.from('v')), { signal: stop.signal })).rejects.toThrow('received SIGTERM');
  });

  it('closing a connection whose server never closes its side cuts it after the grace, instead of waiting forever', async () => {
    // A stopped (SIGSTOP) etcd: it took the connection, said hello, and never reads or closes again.
    const sockets = new Set<net.Socket>();
    // allowHalfOpen: the client's FIN does not end the server's side, as no FIN comes from a stopped process.
    const server = net.createServer({ allowHalfOpen: true }, (socket) => {
      sockets.add(socket);
      socket.write(Buffer.from([0, 0, 0, 0x4, 0, 0, 0, 0, 0]));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => (sockets.forEach((s) => s.destroy()), server.close(resolve))));
    const { port } = server.address() as net.AddressInfo;
    const client = await LeanH2.connect(`http://127.0.0.1:${port}`);
    const [serverSide] = sockets;
    const serverSawEnd = new Promise<void>((resolve) => serverSide!.once('end', () => resolve()));
    serverSide!.resume();
    // Resolves (before the fix it waited for the server's FIN, which never comes) ...
    await client.close(50);
    // ... after it said goodbye (FIN), though the server never closed its side: the cut ended it.
    await serverSawEnd;
    expect(serverSide!.writable).toBe(true);
  });

  it('a call with a deadline and a signal that etcd answers in time resolves as any other', async () => {
    const { client } = await etcdAndClient();
    const stop = new AbortController();
    const response = await client.call(PUT, putBody('bounded', Buffer.from('v')), { signal: stop.signal, timeoutMs: 30_000 });
    expect(revisionOf(response)).toBeGreaterThan(1);
  });
});
