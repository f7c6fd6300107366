/** A minimal WAL writer for tests: frames, padding and the CRC chain as etcd's encoder produces them. */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32c } from '../../src/encoding/crc32c.js';
import { walName } from '../../src/wal/names.js';

export function varint(v: number | bigint): Buffer {
  let x = BigInt(v);
  const out: number[] = [];
  do {
    let b = Number(x & 0x7fn);
    x >>= 7n;
    if (x > 0n) b |= 0x80;
    out.push(b);
  } while (x > 0n);
  return Buffer.from(out);
}

export function fieldVarint(field: number, v: number | bigint): Buffer {
  return Buffer.concat([varint(field << 3), varint(v)]);
}

export function fieldBytes(field: number, data: Buffer): Buffer {
  return Buffer.concat([varint((field << 3) | 2), varint(data.length), data]);
}

export const entry = (index: number, term = 1, data = Buffer.from('payload')): Buffer =>
  Buffer.concat([fieldVarint(1, 0), fieldVarint(2, term), fieldVarint(3, index), fieldBytes(4, data)]);
export const hardState = (term: number, vote: bigint, commit: number): Buffer =>
  Buffer.concat([fieldVarint(1, term), fieldVarint(2, vote), fieldVarint(3, commit)]);
export const walSnapshot = (index: number, term: number): Buffer =>
  index === 0 && term === 0 ? Buffer.alloc(0) : Buffer.concat([fieldVarint(1, index), fieldVarint(2, term)]);
export const metadata = (nodeId: bigint, clusterId: bigint): Buffer => Buffer.concat([fieldVarint(1, nodeId), fieldVarint(2, clusterId)]);

export class TestWal {
  crc = 0;
  segments: { seq: number; index: number; frames: Buffer[] }[] = [];

  /** Starts a segment the way etcd's cut does: crc record with the running crc, then metadata. */
  segment(index: number, meta: Buffer): this {
    this.segments.push({ seq: this.segments.length, index, frames: [] });
    this.raw(4, Buffer.alloc(0), this.crc);
    return this.record(1, meta);
  }

  record(type: number, data: Buffer): this {
    this.crc = crc32c(data, this.crc);
    return this.raw(type, data, this.crc);
  }

  /** A record with an explicit crc field (crc records, or deliberately wrong ones). */
  raw(type: number, data: Buffer, crc: number): this {
    const rec = Buffer.concat([fieldVarint(1, type), fieldVarint(2, crc), data.length ? fieldBytes(3, data) : Buffer.alloc(0)]);
    const pad = (8 - (rec.length % 8)) % 8;
    const len = Buffer.alloc(8);
    len.writeUInt32LE(rec.length, 0);
    if (pad) len.writeUInt32LE(((0x80 | pad) << 24) >>> 0, 4);
    this.segments[this.segments.length - 1]!.frames.push(Buffer.concat([len, rec, Buffer.alloc(pad)]));
    return this;
  }

  /** Writes the segments; each is padded with `zeros` bytes of preallocated space. */
  async write(dir: string, zeros = 4096): Promise<string[]> {
    const names: string[] = [];
    for (const s of this.segments) {
      const name = walName(s.seq, s.index);
      await writeFile(join(dir, name), Buffer.concat([...s.frames, Buffer.alloc(zeros)]));
      names.push(name);
    }
    return names;
  }
}
