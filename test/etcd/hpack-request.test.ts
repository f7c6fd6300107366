/**
 * The lean client's request headers (src/etcd/hpack-request.ts): HPACK integers and string literals as
 * RFC 7541 gives them, and the gRPC request block read back both by the subset of HPACK it uses and by a real
 * HPACK decoder (Node's HTTP/2 server, which a whole call through the lean client then goes to).
 */
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { grpcRequestHeaderBlock, hpackInteger, hpackString } from '../../src/etcd/hpack-request.js';
import { LeanH2 } from '../../src/etcd/lean-h2.js';
import { cleanupAfterEach } from '../support/cleanups.js';

const cleanups = cleanupAfterEach();

/** RFC 7541 Appendix A, the entries the block refers to. */
const STATIC: Record<number, [string, string]> = {
  1: [':authority', ''],
  3: [':method', 'POST'],
  4: [':path', '/'],
  6: [':scheme', 'http'],
  31: ['content-type', ''],
};

/**
 * Decodes a header block made only of what the encoder writes: indexed static entries and literals without
 * indexing, no Huffman. Anything else fails the test.
 */
function decodeSubset(block: Buffer): Array<[string, string]> {
  let pos = 0;
  const integer = (prefixBits: number): number => {
    const max = (1 << prefixBits) - 1;
    let value = block[pos++]! & max;
    if (value < max) return value;
    for (let shift = 0; ; shift += 7) {
      const b = block[pos++]!;
      value += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return value;
    }
  };
  const string = (): string => {
    expect(block[pos]! & 0x80, 'a Huffman-coded string').toBe(0);
    const length = integer(7);
    pos += length;
    return block.toString('latin1', pos - length, pos);
  };
  const out: Array<[string, string]> = [];
  while (pos < block.length) {
    const first = block[pos]!;
    if ((first & 0x80) !== 0) {
      out.push(STATIC[integer(7)]!);
    } else {
      expect(first & 0xf0, 'a representation other than a literal without indexing').toBe(0);
      const index = integer(4);
      out.push([index === 0 ? string() : STATIC[index]![0], string()]);
    }
  }
  return out;
}

describe('HPACK for gRPC requests', () => {
  it('encodes integers as RFC 7541 C.1 does, at every prefix and across continuation bytes', () => {
    const enc = (value: number, prefixBits: number, flags = 0): number[] => {
      const out: number[] = [];
      hpackInteger(out, value, prefixBits, flags);
      return out;
    };
    expect(enc(10, 5)).toEqual([0x0a]); // C.1.1
    expect(enc(1337, 5)).toEqual([0x1f, 0x9a, 0x0a]); // C.1.2
    expect(enc(42, 8)).toEqual([0x2a]); // C.1.3
    expect(enc(15, 4, 0x10)).toEqual([0x1f, 0x00]); // exactly the prefix's maximum takes a second byte
    expect(enc(14, 4, 0x10)).toEqual([0x1e]);
    expect(enc(2 ** 21 + 127, 7)).toEqual([0x7f, 0x80, 0x80, 0x80, 0x01]);
  });

  it('encodes strings as literals without Huffman coding', () => {
    const out: number[] = [];
    hpackString(out, 'custom-key'); // RFC 7541 C.2.1's name
    expect(Buffer.from(out).toString('hex')).toBe('0a' + Buffer.from('custom-key').toString('hex'));
    const long: number[] = [];
    hpackString(long, 'x'.repeat(200));
    expect(long.slice(0, 3)).toEqual([0x7f, 0x49, 0x78]); // 200 = 127 + 73
    expect(long).toHaveLength(202);
  });

  it('makes the request block of static entries and unindexed literals: the headers gRPC asks for', () => {
    const block = grpcRequestHeaderBlock('/etcdserverpb.KV/Txn', '127.0.0.1:2379');
    expect(decodeSubset(block)).toEqual([
      [':method', 'POST'],
      [':scheme', 'http'],
      [':path', '/etcdserverpb.KV/Txn'],
      [':authority', '127.0.0.1:2379'],
      ['content-type', 'application/grpc'],
      ['te', 'trailers'],
    ]);
    // A long path takes a multi-byte length and still decodes.
    const path = `/${'p'.repeat(300)}`;
    expect(decodeSubset(grpcRequestHeaderBlock(path, 'h:1'))[2]).toEqual([':path', path]);
  });

  it("is read by Node's HTTP/2 server as those headers, and a call through the lean client gets the server's answer", async () => {
    const seen: http2.IncomingHttpHeaders[] = [];
    const server = http2.createServer();
    server.on('stream', (stream, headers) => {
      seen.push(headers);
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        // Echo the request message back, as one gRPC message, then the trailers.
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.end(Buffer.concat(chunks));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const { port } = server.address() as AddressInfo;
    const client = await LeanH2.connect(`http://127.0.0.1:${port}`);
    cleanups.push(() => client.close());

    const body = Buffer.from([0, 0, 0, 0, 3, 0x0a, 0x01, 0x6b]);
    expect(await client.call('/etcdserverpb.KV/Range', body)).toEqual(body);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({
      ':method': 'POST',
      ':scheme': 'http',
      ':path': '/etcdserverpb.KV/Range',
      ':authority': `127.0.0.1:${port}`,
      'content-type': 'application/grpc',
      te: 'trailers',
    });
  });
});
