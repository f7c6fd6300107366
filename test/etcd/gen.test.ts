/**
 * The protobuf code generated from etcd's .proto files (src/etcd/gen): what is checked in is what
 * `npm run proto` (scripts/gen-proto.mjs) gives from proto/, it carries etcd's 64-bit ids whole, decodes bytes
 * as views of the message and every absent field as its default, and the client's method table (methods.ts)
 * has each generated method at its gRPC path.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { MemberListResponse, MemberRemoveRequest, SnapshotResponse } from '../../src/etcd/gen/etcd/api/etcdserverpb/rpc_pb.js';
import * as methods from '../../src/etcd/methods.js';
import { ProtoReader } from '../../src/encoding/protobuf.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const GEN = join(ROOT, 'src/etcd/gen');

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .sort();
}

describe('the generated etcd messages', () => {
  it('are what the generator gives from the vendored .proto files', { timeout: 120_000 }, async () => {
    const out = await mkdtemp(join(tmpdir(), 'etcdbr-gen-proto-'));
    try {
      const { generate } = (await import(join(ROOT, 'scripts/gen-proto.mjs'))) as { generate(out: string): void };
      generate(out);
      const files = await filesUnder(out);
      expect(files).toEqual(await filesUnder(GEN));
      for (const f of files) expect(await readFile(join(out, f), 'utf8'), f).toBe(await readFile(join(GEN, f), 'utf8'));
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  });

  it('member ids across the whole uint64 range round-trip, on the wire as one varint', () => {
    for (const hex of ['1', '7f', '8e9e05c52164694d', 'ffffffffffffffff', '20000000000000', '1fffffffffffff', '8000000000000000']) {
      const bytes = MemberRemoveRequest.encode({ ID: BigInt(`0x${hex}`) }).finish();
      // Read back by the project's own protobuf reader, not the generated code.
      const r = new ProtoReader(Buffer.from(bytes));
      expect(r.next()).toBe(true);
      expect(r.field).toBe(1);
      expect(r.uint64Big().toString(16)).toBe(hex);
      expect(r.next()).toBe(false);
      expect(MemberRemoveRequest.decode(bytes).ID?.toString(16)).toBe(hex);
    }
  });

  it('decoding skips fields it does not know (a newer etcd)', () => {
    const member = Buffer.from([0x08, 0x05, 0x12, 0x02, 0x6d, 0x31, 0xf8, 0x06, 0x07, 0x28, 0x01]); // ID 5, name m1, field 111 = 7, isLearner
    const list = Buffer.concat([Buffer.from([0x12, member.length]), member]);
    const res = MemberListResponse.decode(list);
    expect(res.members?.map((m) => [m.ID, m.name, m.isLearner])).toEqual([[5n, 'm1', true]]);
    // Not kept either: encoded again, the member is its known fields only.
    expect(Buffer.from(MemberListResponse.encode(res).finish())).toEqual(
      Buffer.from([0x12, 0x08, 0x08, 0x05, 0x12, 0x02, 0x6d, 0x31, 0x28, 0x01]),
    );
  });

  it('a bytes field decodes to a view of the message (no copy); an absent field decodes to its default', () => {
    const blob = Buffer.from('chunk of a snapshot');
    const message = Buffer.concat([Buffer.from([0x1a, blob.length]), blob]); // blob (field 3)
    const res = SnapshotResponse.decode(message);
    expect(Buffer.from(res.blob!)).toEqual(blob);
    expect(res.blob!.buffer).toBe(message.buffer);
    expect([res.header, res.remainingBytes]).toEqual([undefined, 0n]);
    const empty = MemberListResponse.decode(new Uint8Array(0));
    expect(empty.members).toEqual([]);
  });

  it("the client's methods are the generated ones, each at its gRPC path", async () => {
    const { METHODS } = (await import(join(ROOT, 'scripts/gen-proto.mjs'))) as { METHODS: string[] };
    const paths = Object.values(methods).flatMap((service) => Object.values(service).map((m) => m.path));
    expect(paths.sort()).toEqual(METHODS.map((m) => `/${m.replace(/\.(\w+)$/, '/$1')}`).sort());
    expect(methods.KV.range.path).toBe('/etcdserverpb.KV/Range');
    expect(methods.KV.range.input.encode({ key: Buffer.from('a') }).finish()).toEqual(new Uint8Array([0x0a, 0x01, 0x61]));
  });
});
