/**
 * Which leases a restore creates (restored-leases.ts), how their records and the keys' KeyValues are written
 * (lease-record.ts, mvcc.ts: byte for byte what etcd writes, read back from a real etcd's backend), and how the
 * created leases join the base's in the `lease` bucket (lease-bucket.ts).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { Cursor } from '../../src/bbolt/cursor.js';
import { BoltDB } from '../../src/bbolt/db.js';
import type { WriterEntry } from '../../src/bbolt/writer.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { KEY_BUCKET, LEASE_BUCKET, leaseIdOfKey, leaseKey } from '../../src/backend/schema.js';
import { topLevelBuckets } from '../../src/restorer/backend-copy.js';
import { noLeases, withCreatedLeases } from '../../src/restorer/lease-bucket.js';
import { decodeLeaseRecord, encodeLeaseRecord } from '../../src/restorer/lease-record.js';
import { encodePutValue } from '../../src/restorer/mvcc.js';
import { LeaseRefs, leasesToCreate } from '../../src/restorer/restored-leases.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcdBinaries } from '../support/etcd.js';

const never = () => false;

describe("a restored key's lease field", () => {
  const put = (lease: string) =>
    encodePutValue({ key: Buffer.from('k'), createRevision: 2, modRevision: 3, version: 1, value: Buffer.from('v'), lease });
  const fields = '0a016b' + '1002' + '1803' + '2001' + '2a0176';

  it("is the ID's int64 bits as a varint, a negative ID in 10 bytes, the same however often it is written", () => {
    expect(put('7587866312380825347').toString('hex')).toBe(`${fields}3083fef2c4d786e1a669`);
    expect(put('-1').toString('hex')).toBe(`${fields}30ffffffffffffffffff01`);
    // Made once per ID and copied: a second event of the lease gets the same bytes, in a buffer of its own.
    const a = put('-1');
    const b = put('-1');
    expect(b.equals(a)).toBe(true);
    a.fill(0);
    expect(put('-1').toString('hex')).toBe(`${fields}30ffffffffffffffffff01`);
    expect(put('0').toString('hex')).toBe(fields);
  });
});

describe('the leases a restore creates', () => {
  it('are those the keys name at the end, with the TTL a delta recorded or the default', () => {
    const refs = new LeaseRefs<string>();
    refs.put('a', '10', 8);
    refs.put('b', '10', undefined);
    refs.put('c', '11', undefined);
    refs.put('d', '12', 60);
    refs.put('e', '13', undefined);
    // c moves to lease 12, d leaves its lease, e is deleted (its lease revoked or expired): 11 and 13 are named
    // by no key any more, 12 by c.
    refs.put('c', '12', undefined);
    refs.put('d', '0', undefined);
    refs.delete('e');
    expect(leasesToCreate(refs, never, 3600)).toEqual([
      { id: '10', ttl: 8, source: 'recorded' },
      { id: '12', ttl: 60, source: 'recorded' },
    ]);
    refs.delete('a');
    refs.delete('b');
    expect(leasesToCreate(refs, never, 3600)).toEqual([{ id: '12', ttl: 60, source: 'recorded' }]);
    refs.put('f', '14', undefined);
    expect(leasesToCreate(refs, (id) => id === '12', 3600)).toEqual([{ id: '14', ttl: 3600, source: 'default' }]);
  });

  it('cost nothing for a chain without leases, and come in bbolt order (IDs as unsigned 64 bits)', () => {
    const refs = new LeaseRefs<number>();
    for (let i = 0; i < 100; i++) refs.put(i, '0', undefined);
    expect(refs.tracking).toBe(false);
    for (const id of ['-1', '8070450532247928833', '5', '-9223372036854775808']) refs.put(Number(id.length), id, undefined);
    const ids = leasesToCreate(refs, never, 1).map((l) => l.id);
    expect(ids).toEqual(['5', '8070450532247928833', '-9223372036854775808', '-1']);
    expect(ids.map((id) => leaseKey(id).toString('hex'))).toEqual(ids.map((id) => leaseKey(id).toString('hex')).sort());
    expect(ids.map((id) => leaseIdOfKey(leaseKey(id)))).toEqual(ids);
  });

  it('join the base lease bucket in key order; a lease the base has keeps its record', async () => {
    const base: WriterEntry[][] = [
      [
        { key: leaseKey('3'), value: encodeLeaseRecord('3', 600) },
        { key: leaseKey('7'), value: encodeLeaseRecord('7', 7200, 100) },
      ],
    ];
    async function* baseEntries(): AsyncGenerator<WriterEntry[]> {
      yield* base;
    }
    const counts = noLeases();
    const out: WriterEntry[] = [];
    const created = [
      { id: '1', ttl: 8, source: 'recorded' as const },
      { id: '7', ttl: 9, source: 'default' as const },
      { id: '9', ttl: 3600, source: 'default' as const },
    ];
    for await (const batch of withCreatedLeases(baseEntries(), () => created, counts)) out.push(...batch);
    expect(out.map((e) => [leaseIdOfKey(e.key), decodeLeaseRecord(e.value, 'test')])).toEqual([
      ['1', { id: '1', ttl: 8, remainingTtl: 0 }],
      ['3', { id: '3', ttl: 600, remainingTtl: 0 }],
      ['7', { id: '7', ttl: 7200, remainingTtl: 100 }],
      ['9', { id: '9', ttl: 3600, remainingTtl: 0 }],
    ]);
    expect(counts).toEqual({ recorded: 1, defaulted: 1, base: 2 });
  });

  it('a lease record that is not a leasepb.Lease is refused naming where it is', () => {
    expect(() => decodeLeaseRecord(Buffer.from([0x08, 0xff]), 'db: lease bucket key 00')).toThrow(
      /db: lease bucket key 00: not a leasepb.Lease/,
    );
  });
});

describe('what a restore writes is what etcd writes', () => {
  it("a lease record and a leased key's KeyValue, byte for byte, as in a real etcd's backend", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-lease-bytes-'));
    const etcd = await startLocalEtcd({
      binaries: await etcdBinaries(),
      dataDir: join(dir, 'data'),
      extraArgs: [...SINGLE_MEMBER_RAFT_ARGS],
    });
    const leases = [
      { id: '8070450532247928833', ttl: 3600 },
      { id: '12345', ttl: 8 },
    ];
    try {
      const client = new Etcd3({ hosts: etcd.clientUrl });
      try {
        for (const l of leases) await client.leaseClient.leaseGrant({ ID: l.id, TTL: l.ttl });
        await client.put('/leased').value('v').lease(leases[0]!.id);
      } finally {
        client.close();
      }
    } finally {
      await etcd.stop();
    }
    const db = await BoltDB.open(join(dir, 'data', 'member', 'snap', 'db'));
    try {
      const buckets = await topLevelBuckets(db);
      const leaseBucket = buckets.find((b) => b.name.equals(LEASE_BUCKET))!;
      const stored: Array<[string, string]> = [];
      for await (const e of new Cursor(db, leaseBucket.bucket)) stored.push([e.key.toString('hex'), e.value.toString('hex')]);
      const ours = leases.map((l): [string, string] => [leaseKey(l.id).toString('hex'), encodeLeaseRecord(l.id, l.ttl).toString('hex')]);
      expect(stored).toEqual(ours.sort((a, b) => a[0].localeCompare(b[0])));

      let last: Buffer | undefined;
      for await (const e of new Cursor(db, buckets.find((b) => b.name.equals(KEY_BUCKET))!.bucket)) last = Buffer.from(e.value);
      const rev = 2; // the put, the first revision after etcd's own
      expect(last!.toString('hex')).toBe(
        encodePutValue({
          key: Buffer.from('/leased'),
          createRevision: rev,
          modRevision: rev,
          version: 1,
          value: Buffer.from('v'),
          lease: leases[0]!.id,
        }).toString('hex'),
      );
    } finally {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
