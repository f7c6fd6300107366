import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { DeltaPayloadParser } from '../../src/backup/delta-parse.js';
import { createHash } from 'node:crypto';
import { DeltaBuffer, deltaPayloadBatches, deltaPayloadBytes, releaseDeltaPayload } from '../../src/snapshotter/delta-buffer.js';
import { encodeDeltaEvent } from '../../src/backup/delta-write.js';

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
      // Batches never exceed the batch size unless one event (with its separator and the closing bracket) does.
      const largest = Math.max(...events.map((e) => encodeDeltaEvent(e).length)) + 2;
      for (const piece of pieces) expect(piece.length).toBeLessThanOrEqual(Math.max(batch, largest));
      expect(pieces.at(-1)!.length).toBe(32);
    }
    // Written out again, the same bytes: a save that starts over sends what the first attempt sent.
    expect(deltaPayloadBytes(p).equals(expected)).toBe(true);
  });

  it('writes 2,000 generated events as it writes each alone (encodeDeltaEvent), every field combination, padding and number length, each event a piece of its own or batched', () => {
    let seed = 11; // a small LCG, so a failure names a reproducible case
    const next = (n: number): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      return seed % n;
    };
    const bytes = (n: number): Buffer => Buffer.from(Array.from({ length: n }, () => next(256)));
    const numbers = [0, 1, 9, 10, 99, 123_456, 2 ** 53 - 1];
    const events = Array.from({ length: 2_000 }, (): DeltaEvent => ({
      type: next(2) === 0 ? 'PUT' : 'DELETE',
      key: bytes(next(7)),
      value: bytes(next(3) === 0 ? 0 : next(300)),
      createRevision: numbers[next(numbers.length)]!,
      modRevision: numbers[next(numbers.length)]!,
      version: numbers[next(numbers.length)]!,
      lease: ['0', '', '7', '-42', '7668682366694035557', '-9223372036854775808'][next(6)]!,
      time: ['2026-01-02T03:04:05Z', '2026-11-21T00:03:00.91252605Z', 'zeit-\u00e4-\u2603'][next(3)]!,
    }));
    const b = new DeltaBuffer();
    for (const e of events) b.append(e);
    const p = b.take()!;
    const json = Buffer.from(`[${events.map(encodeDeltaEvent).join(',')}]`);
    const expected = Buffer.concat([json, createHash('sha256').update(json).digest()]);
    for (const batch of [1, 64 * 1024]) expect(Buffer.concat([...deltaPayloadBatches(p, batch)]).equals(expected)).toBe(true);
  });

  it('writes out every kind of event as it writes each alone: deletes, leases, empty and large values, any time text', () => {
    const events: DeltaEvent[] = [
      { ...put(7, '', ''), createRevision: 0, version: 0 },
      {
        type: 'DELETE',
        key: Buffer.from([0, 0xff, 1]),
        value: Buffer.alloc(0),
        createRevision: 0,
        modRevision: 8,
        version: 0,
        lease: '0',
        time: 't',
      },
      { ...put(9, '/registry/leases/a', 'held'), lease: '7668682366694035557' },
      { ...put(9, '/registry/leases/b', 'held'), lease: '' },
      // Larger than a slab ever grows: a slab of its own.
      { ...put(10, '/registry/configmaps/big', ''), value: Buffer.alloc(1_500_000, 0xa5), version: 2 ** 53 - 1 },
      { ...put(11, '/registry/x', 'after the big one'), time: '2026-11-21T00:03:00.91252605Z \u00e4\u2603' },
    ];
    const b = new DeltaBuffer();
    for (const e of events) b.append(e);
    const json = Buffer.from(`[${events.map(encodeDeltaEvent).join(',')}]`);
    expect(b.size).toBe(json.length - 1);
    const p = b.take()!;
    expect([p.firstRevision, p.lastRevision, p.events]).toEqual([7, 11, 6]);
    expect(deltaPayloadBytes(p).equals(Buffer.concat([json, createHash('sha256').update(json).digest()]))).toBe(true);
  });

  it('refuses an event the JSON cannot carry and keeps what it had', () => {
    const b = new DeltaBuffer();
    b.append(put(5, 'a', 'x'));
    expect(() => b.append({ ...put(6, 'b', 'y'), lease: '12x' })).toThrow(/invalid lease ID "12x"/);
    expect(b.size).toBe(encodeDeltaEvent(put(5, 'a', 'x')).length + 1);
    expect(deltaPayloadBytes(b.take()!).subarray(0, -32).toString()).toBe(`[${encodeDeltaEvent(put(5, 'a', 'x'))}]`);
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

  it('holds less than it accounts: compact records in a few slabs, not the JSON nor one object per event', () => {
    // ~3 MiB of JSON in kube-sized events: the buffer holds the keys and values as they are (base64 makes
    // them a third longer in the JSON) in a handful of slabs of up to 1 MiB, not one piece per event.
    const b = new DeltaBuffer();
    const events = Array.from({ length: 10_000 }, (_, i) => put(100 + i, `/registry/pods/ns/p${i}`, 'v'.repeat(200 + (i % 50))));
    for (const e of events) b.append(e);
    const json = Buffer.from(`[${events.map(encodeDeltaEvent).join(',')}]`);
    expect(b.size).toBe(json.length - 1);
    expect(b.heldBytes).toBeLessThan(0.75 * b.size);
    const size = b.size;
    const p = b.take()!;
    expect(p.byteLength).toBe(size + 1 + 32);
    expect(p.events).toBe(10_000);
    expect(p.slabs.length).toBeLessThanOrEqual(Math.ceil(size / (1024 * 1024)) + 8);
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
    // Every slab (and every record view cut from one) is empty now: its memory went back.
    expect(slabs.map((s) => s.length)).toEqual(slabs.map(() => 0));
    expect(stored.records.every((r) => r.length === 0)).toBe(true);
    // A released payload is never written out as an empty delta.
    expect(() => deltaPayloadBytes(stored)).toThrow(/revisions 100-5099 was released before it was written/);
    const next = b.take()!;
    expect(deltaPayloadBytes(next).subarray(0, -32).toString()).toBe(`[${encodeDeltaEvent(put(6_000, '/registry/next', 'n'))}]`);
  });
});
