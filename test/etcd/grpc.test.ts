/**
 * The gRPC transport's message framing over real HTTP/2 (a node:http2 server that answers as a gRPC server
 * does): messages split across many DATA frames, several messages in one frame, and a 5-byte prefix split
 * between frames all arrive whole and in order, decoded by the generated code.
 */
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { create, toBinary } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { Maintenance, SnapshotRequestSchema, SnapshotResponseSchema } from '../../src/etcd/gen/etcd/api/etcdserverpb/rpc_pb.js';
import { GrpcTransport } from '../../src/etcd/grpc.js';
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
const message = (blob: Buffer): Buffer => Buffer.from(toBinary(SnapshotResponseSchema, create(SnapshotResponseSchema, { blob })));

async function receive(url: string): Promise<Buffer[]> {
  const transport = new GrpcTransport({ endpoints: [url] });
  cleanups.push(async () => transport.close());
  const got: Buffer[] = [];
  const call = await transport.open(Maintenance.method.snapshot, (msg) => got.push(Buffer.from(msg.blob)));
  call.send(create(SnapshotRequestSchema));
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
