import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { DeltaPayloadParser } from '../../src/backup/delta-parse.js';
import { createHash } from 'node:crypto';
import { DeltaBuffer, deltaPayloadBatches, deltaPayloadBytes, releaseDeltaPayload } from '../../src/snapshotter/delta-buffer.js';
import { encodeDeltaEvent } from '../../src/backup/delta-format.js';

function put(rev: number, key: string, value: string): DeltaEvent {
  return {
    type: 'PUT',
    key: Buffer.from(key),
    value: Buffer.from(value),
    createRevision: rev,
    modRevision: rev,
    version: 1,
    lease: '0',
    time: '2026-11-21T00:00:00.5Z',
  };
}

describe('delta buffer', () => {
  it('is empty until an event arrives and yields nothing then', () => {
    const b = new DeltaBuffer();
    expect(b.isEmpty).toBe(true);
    expect(b.take()).toBeUndefined();
  });

  it('counts bytes as upstream does and yields a payload the parser accepts', async () => {
    const b = new DeltaBuffer();
    const events = [put(5, 'a', 'x'), put(6, 'b', 'yy'), put(6, 'c', '')];
    for (const e of events) b.append(e);
    const p = b.take()!;
    expect(p.firstRevision).toBe(5);
    expect(p.lastRevision).toBe(6);
    expect(p.events).toBe(3);
    // size before take = JSON length without the closing bracket
    const bytes = deltaPayloadBytes(p);
    expect(bytes.length).toBe(p.byteLength);
    const jsonLength = p.byteLength - 32;
    const b2 = new DeltaBuffer();
    for (const e of events) b2.append(e);
    expect(b2.size).toBe(jsonLength - 1);
    const parsed: DeltaEvent[] = [];
    const parser = new DeltaPayloadParser();
    parser.on('data', (e: DeltaEvent) => parsed.push(e));
    await pipeline(Readable.from([bytes]), parser);
    expect(parsed.map((e) => e.key.toString())).toEqual(['a', 'b', 'c']);
    expect(b.isEmpty).toBe(true);
  });

  it('is exactly the upstream JSON array followed by its sha256, however it is batched', () => {
    const events = Array.from({ length: 500 }, (_, i) => put(10 + i, `/registry/k${i}`, 'v'.repeat(i % 97)));
    const b = new DeltaBuffer();
    for (const e of events) b.append(e);
    const p = b.take()!;
    const json = Buffer.from(`[${events.map(encodeDeltaEvent).join(',')}]`);
    const expected = Buffer.concat([json, createHash('sha256').update(json).digest()]);
    expect(deltaPayloadBytes(p).equals(expected)).toBe(true);
    for (const batch of [1, 100, 4096, 1 << 20]) {
      const pieces = [...deltaPayloadBatches(p, batch)];
      expect(Buffer.concat(pieces).equals(expected)).toBe(true);
      // Batches never exceed the batch size unless one piece alone does.
      const largest = Math.max(...p.chunks.map((c) => c.length));
      for (const piece of pieces) expect(piece.length).toBeLessThanOrEqual(Math.max(batch, largest));
    }
  });

  it('starts a fresh hash after take', () => {
    const b = new DeltaBuffer();
    b.append(put(1, 'a', 'x'));
    b.take();
    b.append(put(2, 'b', 'y'));
    const p = b.take()!;
    const json = Buffer.from(`[${encodeDeltaEvent(put(2, 'b', 'y'))}]`);
    expect(deltaPayloadBytes(p).subarray(-32).equals(createHash('sha256').update(json).digest())).toBe(true);
  });

  it('holds what it accounts: the serialised events in a few slabs, not one object per event', () => {
    // ~3 MiB of kube-sized events: the memory the buffer holds is the accounted size plus at most one
    // slab's unused tail (1 MiB), and the payload is a handful of pieces rather than one per event.
    const b = new DeltaBuffer();
    const events = Array.from({ length: 10_000 }, (_, i) => put(100 + i, `/registry/pods/ns/p${i}`, 'v'.repeat(200 + (i % 50))));
    for (const e of events) b.append(e);
    expect(b.heldBytes).toBeGreaterThanOrEqual(b.size);
    expect(b.heldBytes - b.size).toBeLessThanOrEqual(1024 * 1024);
    const size = b.size;
    const p = b.take()!;
    expect(p.byteLength).toBe(size + 1 + 32);
    expect(p.events).toBe(10_000);
    expect(p.chunks.length).toBeLessThanOrEqual(Math.ceil(size / (1024 * 1024)) + 8);
    const json = Buffer.from(`[${events.map(encodeDeltaEvent).join(',')}]`);
    expect(deltaPayloadBytes(p).subarray(0, -32).equals(json)).toBe(true);
    expect(b.heldBytes).toBe(0);
  });

  it("frees a stored payload's slabs at once, and only them: the next delta's buffer is untouched", () => {
    const b = new DeltaBuffer();
    for (let i = 0; i < 5_000; i++) b.append(put(100 + i, `/registry/pods/ns/p${i}`, 'v'.repeat(300)));
    const stored = b.take()!;
    b.append(put(6_000, '/registry/next', 'n'));
    const slabs = stored.slabs!;
    expect(slabs.length).toBeGreaterThan(1);
    releaseDeltaPayload(stored);
    releaseDeltaPayload(stored); // twice changes nothing
    // Every slab (and every chunk cut from one) is empty now: its memory went back.
    expect(slabs.map((s) => s.length)).toEqual(slabs.map(() => 0));
    expect(stored.chunks.slice(0, -2).every((c) => c.length === 0)).toBe(true);
    // The closing bracket and the digest were never slabs.
    expect(stored.chunks.at(-2)!.toString()).toBe(']');
    expect(stored.chunks.at(-1)!.length).toBe(32);
    const next = b.take()!;
    expect(deltaPayloadBytes(next).subarray(0, -32).toString()).toBe(`[${encodeDeltaEvent(put(6_000, '/registry/next', 'n'))}]`);
  });
});
