import { describe, expect, it } from 'vitest';
import { LeaseTtls } from '../../src/snapshotter/lease-ttls.js';
import { recordingLogger } from '../support/logger.js';

/** A lookup that answers from `ttls` (0: etcd has no such lease), counting calls; `fail` rejects. */
function scripted(ttls: Record<string, number>, fail = new Set<string>()) {
  const calls: string[] = [];
  const lookup = (lease: string): Promise<number> => {
    calls.push(lease);
    return fail.has(lease) ? Promise.reject(new Error('etcd away')) : Promise.resolve(ttls[lease] ?? 0);
  };
  return { calls, lookup };
}

describe('the granted TTLs of the leases the watch sees', () => {
  it('asks etcd once per lease ID, from the first event naming it, and gives a delta the TTLs of its leases', async () => {
    const { calls, lookup } = scripted({ '10': 8, '11': 3600 });
    const t = new LeaseTtls(lookup, recordingLogger());
    for (const lease of ['0', '10', '10', '11', '0', '10', '12']) t.note(lease);
    expect(calls).toEqual(['10', '11', '12']);
    expect(await t.of(['10', '11', '12', '0'])).toEqual(
      new Map([
        ['10', 8],
        ['11', 3600],
      ]),
    );
    // 12 is gone from etcd (TTL unknown): remembered as such, not asked again.
    t.note('12');
    expect(await t.of(['12'])).toEqual(new Map());
    expect(calls).toEqual(['10', '11', '12']);
  });

  it('asks again after a failed lookup, and forgets the oldest lease over its limit', async () => {
    const fail = new Set(['20']);
    const { calls, lookup } = scripted({ '20': 60, '21': 5, '22': 6, '23': 7 }, fail);
    const log = recordingLogger();
    const t = new LeaseTtls(lookup, log, 2);
    t.note('20');
    expect(await t.of(['20'])).toEqual(new Map());
    expect(log.lines.some((l) => l.level === 'debug' && /TTL of a lease/.test(l.msg))).toBe(true);
    fail.clear();
    t.note('20');
    expect(await t.of(['20'])).toEqual(new Map([['20', 60]]));
    expect(calls).toEqual(['20', '20']);
    for (const lease of ['21', '22', '23']) t.note(lease);
    expect(t.size).toBe(2);
    // 20 and 21 were forgotten: a delta naming 21 asks for it again.
    expect(await t.of(['21'])).toEqual(new Map([['21', 5]]));
    expect(calls).toEqual(['20', '20', '21', '22', '23', '21']);
  });

  it('a delta waits for its lookups together, not one after another', async () => {
    const asked: string[] = [];
    const answer = new Map<string, (ttl: number) => void>();
    const t = new LeaseTtls(
      (lease) =>
        new Promise<number>((resolve) => {
          asked.push(lease);
          answer.set(lease, resolve);
        }),
      recordingLogger(),
    );
    const ttls = t.of(['30', '31']);
    // Both asked before either answered.
    expect(asked).toEqual(['30', '31']);
    answer.get('31')!(5);
    answer.get('30')!(6);
    expect(await ttls).toEqual(
      new Map([
        ['30', 6],
        ['31', 5],
      ]),
    );
  });
});
