/**
 * The hand-written etcd messages (rpc-wire.ts): 64-bit member ids survive the varint writer, requests are
 * one gRPC frame, and decoders read what etcd's encoder writes (unknown fields skipped).
 */
import { describe, expect, it } from 'vitest';
import { ProtoReader } from '../../src/encoding/protobuf.js';
import { varintSize } from '../../src/encoding/protobuf-write.js';
import {
  decodeMemberListResponse,
  decodeWatchResponse,
  encodeMemberIdRequest,
  encodeWatchCreateAllKeys,
  memberIdOf,
  ProtoBuilder,
} from '../../src/etcd/rpc-wire.js';

describe('rpc-wire', () => {
  it('member ids across the whole uint64 range round-trip through the one varint writer', () => {
    for (const hex of [
      '1',
      '7f',
      '8e9e05c52164694d',
      'ffffffffffffffff',
      '20000000000000',
      '1fffffffffffff',
      '100000000000000',
      '8000000000000000',
    ]) {
      const frame = encodeMemberIdRequest(memberIdOf(hex));
      expect(frame[0]).toBe(0);
      expect(frame.readUInt32BE(1)).toBe(frame.length - 5);
      const r = new ProtoReader(frame.subarray(5));
      expect(r.next()).toBe(true);
      expect(r.field).toBe(1);
      expect(r.uint64Big().toString(16)).toBe(hex);
      expect(r.next()).toBe(false);
      expect(frame.length - 5).toBe(1 + varintSize(memberIdOf(hex)));
    }
  });

  it('decodes a member list with an unknown field skipped', () => {
    const member = new ProtoBuilder()
      .uint(1, 2n ** 63n + 5n)
      .bytes(2, 'm1')
      .bytes(3, 'http://p:2380')
      .bytes(4, 'http://c:2379')
      .uint(99, 7)
      .bool(5, true)
      .finish();
    const header = new ProtoBuilder().uint(1, 0xabcn).uint(2, 0xdefn).uint(3, 42).finish();
    const msg = new ProtoBuilder().bytes(1, header).bytes(2, member).finish();
    expect(decodeMemberListResponse(msg)).toEqual({
      header: { clusterId: 0xabcn, memberId: 0xdefn, revision: 42, raftTerm: 0 },
      members: [{ id: 2n ** 63n + 5n, name: 'm1', peerUrls: ['http://p:2380'], clientUrls: ['http://c:2379'], isLearner: true }],
    });
  });

  it('a watch create request names the whole key space and the start revision; a response decodes its events', () => {
    const frame = encodeWatchCreateAllKeys(2 ** 40);
    const outer = new ProtoReader(frame.subarray(5));
    expect(outer.next() && outer.field).toBe(1);
    const [s, e] = outer.bytes();
    const inner = new ProtoReader(frame.subarray(5), s, e);
    const fields: Array<[number, unknown]> = [];
    while (inner.next())
      fields.push([inner.field, inner.field === 3 ? inner.uint64() : Buffer.from(frame.subarray(5).subarray(...inner.bytes()))]);
    expect(fields).toEqual([
      [1, Buffer.from([0])],
      [2, Buffer.from([0])],
      [3, 2 ** 40],
    ]);
    const kv = new ProtoBuilder().bytes(1, '/k').uint(2, 3).uint(3, 9).uint(4, 2).bytes(5, 'v').uint(6, 0x1234n).finish();
    const ev = new ProtoBuilder().uint(1, 1).bytes(2, kv).finish();
    const res = decodeWatchResponse(new ProtoBuilder().bytes(1, new ProtoBuilder().uint(3, 9).finish()).uint(2, 0).bytes(11, ev).finish());
    expect(res.events).toEqual([
      {
        type: 'DELETE',
        kv: { key: Buffer.from('/k'), createRevision: 3, modRevision: 9, version: 2, value: Buffer.from('v'), lease: String(0x1234) },
      },
    ]);
    expect(res.header.revision).toBe(9);
  });
});
