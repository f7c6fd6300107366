/**
 * The one writer of the delta payload (src/backup/delta-write.ts), which the sidecar ships and the tests
 * encode with: its bytes pinned by hand for every kind of field, held to Go's encoding/json rules (omitempty,
 * the struct's field order, base64 []byte) on generated events, and read back by the parser unchanged. That
 * the Go tool's own payloads come out byte for byte: test/backup/delta-format.test.ts.
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { DeltaPayloadParser } from '../../src/backup/delta-parse.js';
import { deltaEventJsonLength, deltaPayloadLength, encodeDeltaEvent } from '../../src/backup/delta-write.js';
import { DeltaBuffer, deltaPayloadBatches } from '../../src/snapshotter/delta-buffer.js';

const T = '2026-11-21T00:03:00.91252605Z';

function event(fields: Partial<DeltaEvent>): DeltaEvent {
  return {
    type: 'PUT',
    key: Buffer.alloc(0),
    value: Buffer.alloc(0),
    createRevision: 0,
    modRevision: 0,
    version: 0,
    lease: '0',
    time: T,
    ...fields,
  };
}

/** An element as Go's encoding/json writes `{etcdEvent: clientv3.Event, time}` (and our leaseTTL after it). */
function goJson(ev: DeltaEvent, leaseTTL?: number): string {
  const kv: Record<string, unknown> = {};
  if (ev.key.length > 0) kv.key = ev.key.toString('base64');
  if (ev.createRevision !== 0) kv.create_revision = ev.createRevision;
  if (ev.modRevision !== 0) kv.mod_revision = ev.modRevision;
  if (ev.version !== 0) kv.version = ev.version;
  if (ev.value.length > 0) kv.value = ev.value.toString('base64');
  // An int64 a JavaScript number cannot carry: a placeholder, replaced by its digits.
  if (ev.lease !== '0' && ev.lease !== '') kv.lease = '\u0000lease';
  const etcdEvent = ev.type === 'DELETE' ? { type: 1, kv } : { kv };
  const element = leaseTTL === undefined ? { etcdEvent, time: ev.time } : { etcdEvent, time: ev.time, leaseTTL };
  return JSON.stringify(element).replace('"\\u0000lease"', ev.lease);
}

/** Deterministic events with every field combination, base64 padding, number length and lease form. */
function generated(count: number, seed: number): DeltaEvent[] {
  let s = seed;
  const next = (n: number): number => {
    s = (s * 1_103_515_245 + 12_345) % 2_147_483_648;
    return s % n;
  };
  const bytes = (n: number): Buffer => Buffer.from(Array.from({ length: n }, () => next(256)));
  const numbers = [0, 1, 9, 10, 99, 123_456, 2 ** 53 - 1];
  return Array.from({ length: count }, (): DeltaEvent => {
    const type = next(2) === 0 ? 'PUT' : 'DELETE';
    return {
      type,
      key: bytes(next(7)),
      value: bytes(next(3) === 0 ? 0 : next(300)),
      createRevision: numbers[next(numbers.length)]!,
      modRevision: numbers[next(numbers.length)]!,
      version: numbers[next(numbers.length)]!,
      lease: ['0', '', '7', '-42', '7668682366694035557', '-9223372036854775808'][next(6)]!,
      time: ['2026-01-02T03:04:05Z', T, 'zeit-\u00e4-\u2603'][next(3)]!,
    };
  });
}

describe('the delta payload writer', () => {
  it('writes each kind of element byte for byte as pinned here', () => {
    const cases: Array<[DeltaEvent, string]> = [
      [
        event({ key: Buffer.from('/a'), value: Buffer.from('xyz'), createRevision: 5, modRevision: 9, version: 2 }),
        `{"etcdEvent":{"kv":{"key":"L2E=","create_revision":5,"mod_revision":9,"version":2,"value":"eHl6"}},"time":"${T}"}`,
      ],
      // Base64 with two padding characters, a put of an empty value (no "value"), a key of three bytes (none).
      [
        event({ key: Buffer.from([0xfb]), createRevision: 1, modRevision: 1, version: 1 }),
        `{"etcdEvent":{"kv":{"key":"+w==","create_revision":1,"mod_revision":1,"version":1}},"time":"${T}"}`,
      ],
      [
        event({ key: Buffer.from('abc'), value: Buffer.from([0xff, 0xfe, 0xfd, 0xfc]), modRevision: 2 ** 53 - 1 }),
        `{"etcdEvent":{"kv":{"key":"YWJj","mod_revision":9007199254740991,"value":"//79/A=="}},"time":"${T}"}`,
      ],
      // A delete: type 1, and only the key and its revision.
      [
        event({ type: 'DELETE', key: Buffer.from([0, 0xff, 1]), modRevision: 42, time: '2026-01-02T03:04:05Z' }),
        '{"etcdEvent":{"type":1,"kv":{"key":"AP8B","mod_revision":42}},"time":"2026-01-02T03:04:05Z"}',
      ],
      // Leases: int64 digits as they are, negative ones too; with its TTL (ours) after the time.
      [
        event({ key: Buffer.from('k'), modRevision: 3, lease: '-9223372036854775808' }),
        `{"etcdEvent":{"kv":{"key":"aw==","mod_revision":3,"lease":-9223372036854775808}},"time":"${T}"}`,
      ],
      [
        event({ key: Buffer.from('k'), modRevision: 3, lease: '7668682366694035557', leaseTTL: 9_000_000_000 }),
        `{"etcdEvent":{"kv":{"key":"aw==","mod_revision":3,"lease":7668682366694035557}},"time":"${T}","leaseTTL":9000000000}`,
      ],
      // "" and "0" name no lease; a TTL without a lease is not written.
      [event({ modRevision: 4, lease: '', leaseTTL: 60 }), `{"etcdEvent":{"kv":{"mod_revision":4}},"time":"${T}"}`],
      // Nothing at all but the time, which is written as it came (UTF-8).
      [event({ time: 'zeit-\u00e4-\u2603' }), '{"etcdEvent":{"kv":{}},"time":"zeit-\u00e4-\u2603"}'],
    ];
    for (const [ev, json] of cases) {
      expect(encodeDeltaEvent(ev)).toBe(json);
      expect(deltaEventJsonLength(ev)).toBe(Buffer.byteLength(json));
    }
  });

  it("writes 2,000 generated elements as Go's encoding/json does, and counts their length without writing them", () => {
    for (const ev of generated(2_000, 3)) {
      const expected = goJson(ev);
      expect(encodeDeltaEvent(ev)).toBe(expected);
      expect(deltaEventJsonLength(ev)).toBe(Buffer.byteLength(expected));
    }
  });

  it('counts the digits of revisions and versions at every power of ten up to 2^53', () => {
    const numbers = [1, 2 ** 53 - 1];
    for (let p = 10; p < 2 ** 53; p *= 10) numbers.push(p - 1, p, p + 1);
    for (const n of numbers) {
      const ev = event({ key: Buffer.from('k'), createRevision: n, modRevision: n, version: n });
      expect(deltaEventJsonLength(ev)).toBe(Buffer.byteLength(encodeDeltaEvent(ev)));
    }
  });

  it('writes the payload as the sidecar saves it: the JSON array, then the sha256 of the JSON, pinned here', () => {
    const b = new DeltaBuffer();
    b.append(event({ key: Buffer.from('a'), value: Buffer.from('1'), createRevision: 2, modRevision: 2, version: 1 }));
    b.append(event({ type: 'DELETE', key: Buffer.from('a'), modRevision: 3 }));
    const p = b.take()!;
    const bytes = Buffer.concat([...deltaPayloadBatches(p)]);
    const json = `[{"etcdEvent":{"kv":{"key":"YQ==","create_revision":2,"mod_revision":2,"version":1,"value":"MQ=="}},"time":"${T}"},{"etcdEvent":{"type":1,"kv":{"key":"YQ==","mod_revision":3}},"time":"${T}"}]`;
    expect(bytes.subarray(0, -32).toString()).toBe(json);
    expect(bytes.subarray(-32).toString('hex')).toBe(createHash('sha256').update(json).digest('hex'));
    expect(bytes.length).toBe(p.byteLength);
    expect(p.byteLength).toBe(deltaPayloadLength(json.length - 1)); // what the buffer accounted: all but the `]`
  });

  it('is read back by the parser as the events written, lease TTLs on the first event naming each lease', async () => {
    const events = generated(2_000, 17);
    const b = new DeltaBuffer();
    for (const ev of events) b.append(ev);
    const p = b.take()!;
    p.leaseTtls = new Map([
      ['7', 30],
      ['7668682366694035557', 3600],
    ]);
    const expected = events.map((ev) => ({ ...ev, lease: ev.lease === '' ? '0' : ev.lease }));
    for (const lease of p.leaseTtls.keys()) {
      const first = expected.findIndex((ev) => ev.lease === lease);
      expected[first] = { ...expected[first]!, leaseTTL: p.leaseTtls.get(lease)! };
    }
    // Pieces of 1 KiB, as they go into the compressor and the store.
    const parsed: DeltaEvent[] = [];
    const parser = new DeltaPayloadParser('round trip');
    parser.on('data', (ev: DeltaEvent) => parsed.push(ev));
    await pipeline(Readable.from(deltaPayloadBatches(p, 1024)), parser);
    expect(parsed).toEqual(expected);
    const json = Buffer.concat([...deltaPayloadBatches(p)])
      .subarray(0, -32)
      .toString();
    expect(json).toBe(`[${expected.map((ev) => goJson(ev, ev.leaseTTL)).join(',')}]`);
  });
});
