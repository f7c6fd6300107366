import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { DeltaPayloadParser } from '../../src/backup/delta-parse.js';
import { DeltaBuffer } from '../../src/snapshotter/delta-buffer.js';

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
    const jsonLength = p.payload.length - 32;
    const b2 = new DeltaBuffer();
    for (const e of events) b2.append(e);
    expect(b2.size).toBe(jsonLength - 1);
    const parsed: DeltaEvent[] = [];
    const parser = new DeltaPayloadParser();
    parser.on('data', (e: DeltaEvent) => parsed.push(e));
    await pipeline(Readable.from([p.payload]), parser);
    expect(parsed.map((e) => e.key.toString())).toEqual(['a', 'b', 'c']);
    expect(b.isEmpty).toBe(true);
  });
});
