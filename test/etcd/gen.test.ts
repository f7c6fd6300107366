/**
 * The protobuf code generated from etcd's .proto files (src/etcd/gen): what is checked in is what
 * `npm run proto` (scripts/gen-proto.mjs) gives from proto/, and it carries etcd's 64-bit ids whole.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { MemberListResponseSchema, MemberRemoveRequestSchema } from '../../src/etcd/gen/etcd/api/etcdserverpb/rpc_pb.js';
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
      const bytes = toBinary(MemberRemoveRequestSchema, create(MemberRemoveRequestSchema, { ID: BigInt(`0x${hex}`) }));
      // Read back by the project's own protobuf reader, not the generated code.
      const r = new ProtoReader(Buffer.from(bytes));
      expect(r.next()).toBe(true);
      expect(r.field).toBe(1);
      expect(r.uint64Big().toString(16)).toBe(hex);
      expect(r.next()).toBe(false);
      expect(fromBinary(MemberRemoveRequestSchema, bytes).ID.toString(16)).toBe(hex);
    }
  });

  it('decoding skips fields it does not know (a newer etcd)', () => {
    const member = Buffer.from([0x08, 0x05, 0x12, 0x02, 0x6d, 0x31, 0xf8, 0x06, 0x07, 0x28, 0x01]); // ID 5, name m1, field 111 = 7, isLearner
    const list = Buffer.concat([Buffer.from([0x12, member.length]), member]);
    const res = fromBinary(MemberListResponseSchema, list, { readUnknownFields: false });
    expect(res.members.map((m) => [m.ID, m.name, m.isLearner])).toEqual([[5n, 'm1', true]]);
  });
});
