/**
 * The gRPC transport's message framing over real HTTP/2 (a node:http2 server that answers as a gRPC server
 * does): messages split across many DATA frames, several messages in one frame, and a 5-byte prefix split
 * between frames all arrive whole and in order, decoded by the generated code; and how a call ends: its gRPC
 * status and message from the trailers, its deadline, its signal, an HTTP error, no message or half of one.
 */
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { SnapshotResponse, StatusResponse } from '../../src/etcd/gen/etcd/api/etcdserverpb/rpc_pb.js';
import { GrpcTransport } from '../../src/etcd/grpc.js';
import { Maintenance } from '../../src/etcd/methods.js';
import { cleanupAfterEach } from '../support/cleanups.js';

const cleanups = cleanupAfterEach();

function framed(payload: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** A server whose one method writes `pieces` as separate writes (each a DATA frame or more), then status 0. */
async function serverWriting(pieces: Buffer[]): Promise<string> {
  const server = http2.createServer();
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    const writeNext = (i: number): void => {
      if (i === pieces.length) {
        stream.end();
        return;
      }
      // One piece per event-loop turn, so the client sees them as separate chunks.
      stream.write(pieces[i], () => setImmediate(() => writeNext(i + 1)));
    };
    writeNext(0);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A SnapshotResponse carrying `blob`, encoded. */
const message = (blob: Buffer): Buffer => Buffer.from(SnapshotResponse.encode({ blob }).finish());

async function receive(url: string): Promise<Buffer[]> {
  const transport = new GrpcTransport({ endpoints: [url] });
  cleanups.push(async () => transport.close());
  const got: Buffer[] = [];
  const call = await transport.open(Maintenance.snapshot, (msg) => got.push(Buffer.from(msg.blob!)));
  call.send({});
  call.end();
  await call.done;
  return got;
}

describe('gRPC transport framing', () => {
  it('joins a message split into many pieces, the prefix split too, and splits pieces holding several', async () => {
    const big = Buffer.alloc(3 * 1024 * 1024 + 17);
    for (let i = 0; i < big.length; i++) big[i] = (i * 31) & 0xff;
    const small = [Buffer.from('one'), Buffer.from(''), Buffer.from('three')];
    const stream = Buffer.concat([framed(message(big)), ...small.map((m) => framed(message(m))), framed(message(Buffer.from('last')))]);
    // The big message in 16 KiB pieces, its prefix cut after 2 bytes; the small ones all in one piece with the
    // start of the last message; the rest of the last one in a piece of its own.
    const pieces: Buffer[] = [stream.subarray(0, 2)];
    let at = 2;
    const bigEnd = 5 + message(big).length;
    while (at < bigEnd) {
      const next = Math.min(at + 16 * 1024, bigEnd);
      pieces.push(stream.subarray(at, next));
      at = next;
    }
    const lastStart = stream.length - (5 + message(Buffer.from('last')).length);
    pieces.push(stream.subarray(at, lastStart + 3), stream.subarray(lastStart + 3));
    const got = await receive(await serverWriting(pieces));
    expect(got.map((m) => m.length)).toEqual([big.length, 3, 0, 5, 4]);
    expect(got[0]!.equals(big)).toBe(true);
    expect(got.slice(1).map((m) => m.toString())).toEqual(['one', '', 'three', 'last']);
  });
});

/** A server whose every call gets what `answer` does with the stream. */
async function serverAnswering(answer: (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void): Promise<string> {
  const server = http2.createServer();
  server.on('stream', answer);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function transportOf(url: string): GrpcTransport {
  const transport = new GrpcTransport({ endpoints: [url] });
  cleanups.push(async () => transport.close());
  return transport;
}

describe('gRPC transport statuses', () => {
  it("a trailers-only error carries etcd's status and its percent-encoded message", async () => {
    const url = await serverAnswering((stream) =>
      stream.respond(
        { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '5', 'grpc-message': 'etcdserver%3A member not found' },
        { endStream: true },
      ),
    );
    await expect(transportOf(url).unary(Maintenance.status, {})).rejects.toMatchObject({
      code: 'E_ETCD_REQUEST',
      message: 'etcdserver: member not found',
    });
  });

  it('the method is called at its path, and the answer in the trailers decodes', async () => {
    let path: unknown;
    const url = await serverAnswering((stream, headers) => {
      path = headers[':path'];
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(framed(Buffer.from(StatusResponse.encode({ version: '3.5.16', leader: 2n ** 63n + 1n }).finish())));
    });
    const res = await transportOf(url).unary(Maintenance.status, {});
    expect(path).toBe('/etcdserverpb.Maintenance/Status');
    expect([res.version, res.leader]).toEqual(['3.5.16', 2n ** 63n + 1n]);
  });

  it('no answer within the deadline is E_ETCD_TIMEOUT, a stop is E_ETCD_CANCELLED, an HTTP 503 is E_ETCD_UNAVAILABLE', async () => {
    const silent = await serverAnswering(() => undefined);
    await expect(transportOf(silent).unary(Maintenance.status, {}, { timeoutMs: 50 })).rejects.toMatchObject({
      code: 'E_ETCD_TIMEOUT',
    });
    const stop = new AbortController();
    const pending = transportOf(silent).unary(Maintenance.status, {}, { signal: stop.signal });
    setTimeout(() => stop.abort(), 20);
    await expect(pending).rejects.toMatchObject({ code: 'E_ETCD_CANCELLED' });
    const busy = await serverAnswering((stream) => stream.respond({ ':status': 503 }, { endStream: true }));
    await expect(transportOf(busy).unary(Maintenance.status, {})).rejects.toMatchObject({ code: 'E_ETCD_UNAVAILABLE' });
  });

  it('a unary call answered with no message, or a stream cut inside one, fails', async () => {
    const empty = await serverAnswering((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end();
    });
    await expect(transportOf(empty).unary(Maintenance.status, {})).rejects.toThrow(/expected one response message, got 0/);
    const cut = await serverAnswering((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(framed(Buffer.alloc(10)).subarray(0, 8));
    });
    await expect(transportOf(cut).unary(Maintenance.status, {})).rejects.toThrow(/ended inside a message/);
  });
});
