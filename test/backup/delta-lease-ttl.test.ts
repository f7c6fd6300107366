/**
 * Our lease TTL field of a delta element (`"leaseTTL"` after `"time"`, DeltaEvent.leaseTTL): written by the
 * payload writer, for one event and in the snapshotter's delta buffer (on the first event of a delta naming
 * each lease), read by both parser paths alike, refused with a clear message when it is no TTL etcd grants.
 * (That Go's restorer reads past it: test/backup/go-compat.test.ts and the interop suite.)
 */
import { describe, expect, it } from 'vitest';
import { decodeCanonicalElement } from '../../src/backup/delta-element.js';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { deltaEventJsonLength, encodeDeltaEvent } from '../../src/backup/delta-write.js';
import { decodeElementJson, DeltaPayloadDecoder } from '../../src/backup/delta-parse.js';
import { DeltaBuffer, deltaPayloadBytes } from '../../src/snapshotter/delta-buffer.js';

const TIME = '2026-11-28T10:00:00.123456789Z';
const BIG_LEASE = '8070450532247928833';

function put(rev: number, key: string, lease: string, leaseTTL?: number): DeltaEvent {
  return {
    type: 'PUT',
    key: Buffer.from(key),
    value: Buffer.from(`v${rev}`),
    createRevision: rev,
    modRevision: rev,
    version: 1,
    lease,
    time: TIME,
    ...(leaseTTL !== undefined ? { leaseTTL } : {}),
  };
}

function bothPaths(json: string): [DeltaEvent | undefined, DeltaEvent] {
  const buf = Buffer.from(json);
  return [decodeCanonicalElement(buf, 0, buf.length), decodeElementJson(json, 'test event')];
}

describe('the lease TTL field of a delta element', () => {
  it('is written after the time, counted by the length, and read back by both parser paths', () => {
    const ev = put(7, 'k', BIG_LEASE, 3600);
    const json = encodeDeltaEvent(ev);
    expect(json).toBe(
      `{"etcdEvent":{"kv":{"key":"aw==","create_revision":7,"mod_revision":7,"version":1,"value":"djc=","lease":${BIG_LEASE}}},"time":"${TIME}","leaseTTL":3600}`,
    );
    expect(deltaEventJsonLength(ev)).toBe(Buffer.byteLength(json));
    const [fast, general] = bothPaths(json);
    expect(fast).toEqual(ev);
    expect(general).toEqual(ev);
  });

  it('is left out of events without a lease or without a known TTL, which parse without it', () => {
    for (const ev of [put(8, 'a', '0', 60), put(9, 'b', BIG_LEASE), put(10, 'c', '5', 0)]) {
      const json = encodeDeltaEvent(ev);
      expect(json).not.toContain('leaseTTL');
      expect(deltaEventJsonLength(ev)).toBe(Buffer.byteLength(json));
      const [fast, general] = bothPaths(json);
      expect(fast?.leaseTTL).toBeUndefined();
      expect(general.leaseTTL).toBeUndefined();
    }
  });

  it('refuses a TTL etcd could not have granted, naming the event', () => {
    expect(() => encodeDeltaEvent(put(7, 'k', '5', 9_000_000_001))).toThrow(/invalid lease TTL 9000000001 of lease 5/);
    expect(() => encodeDeltaEvent(put(7, 'k', '5', 1.5))).toThrow(/invalid lease TTL/);
    for (const bad of ['-3', '1.5', '"60"', '9000000001']) {
      const json = `{"etcdEvent":{"kv":{"key":"aw==","mod_revision":7,"lease":5}},"time":"${TIME}","leaseTTL":${bad}}`;
      // The fast path leaves it to the general one, which says what is wrong.
      expect(decodeCanonicalElement(Buffer.from(json), 0, json.length), bad).toBeUndefined();
      expect(() => decodeElementJson(json, 'delta Incr-1-2: event 0'), bad).toThrow(
        /delta Incr-1-2: event 0: leaseTTL .* is not a lease TTL \(whole seconds from 1 to 9000000000\)/,
      );
    }
  });

  it('is written by the delta buffer on the first event of a delta naming each lease whose TTL is known', async () => {
    const events = [
      put(5, 'a', BIG_LEASE),
      put(6, 'b', '0'),
      put(7, 'c', BIG_LEASE),
      put(8, 'd', '77'),
      put(9, 'e', '88'),
      put(10, 'f', '77'),
    ];
    const b = new DeltaBuffer();
    for (const e of events) b.append(e);
    const p = b.take()!;
    expect([...p.leases].sort()).toEqual([BIG_LEASE, '77', '88'].sort());
    // 88's TTL is not known: no field for it.
    p.leaseTtls = new Map([
      [BIG_LEASE, 8],
      ['77', 3600],
    ]);
    const expected = [{ ...events[0]!, leaseTTL: 8 }, events[1]!, events[2]!, { ...events[3]!, leaseTTL: 3600 }, events[4]!, events[5]!];
    const bytes = deltaPayloadBytes(p);
    const json = bytes.subarray(0, bytes.length - 32).toString();
    expect(json).toBe(`[${expected.map(encodeDeltaEvent).join(',')}]`);
    // Written twice (a save that starts over), the same bytes.
    expect(deltaPayloadBytes(p).equals(bytes)).toBe(true);
    const decoded: DeltaEvent[] = [];
    const d = new DeltaPayloadDecoder('delta');
    d.write(bytes, (ev) => decoded.push(ev));
    d.end();
    expect(decoded).toEqual(expected);
  });
});
