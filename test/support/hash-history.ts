/**
 * A history for the hash drill's tests, written through the etcd3 library (a client apart from ours): new
 * keys, overwrites, single and prefix deletes, multi-op transactions (puts and a delete in one revision), keys
 * with leases and a lease revocation that deletes them, a value with non-UTF-8 bytes and an empty one. Each step
 * is one revision; `writeHistory` returns the revision of each step in order.
 */
import type { Etcd3 } from 'etcd3';

const buf = (s: string): Buffer => Buffer.from(s);

/** Writes `rounds` rounds of the mixed history under `prefix`; returns etcd's revision after each write. */
export async function writeHistory(client: Etcd3, prefix: string, rounds = 2): Promise<number[]> {
  const revisions: number[] = [];
  const rev = (r: { header: { revision: string } }): void => void revisions.push(Number(r.header.revision));
  for (let round = 0; round < rounds; round++) {
    const p = `${prefix}${round}/`;
    rev(await client.kv.put({ key: buf(`${p}a`), value: buf('1') }));
    rev(await client.kv.put({ key: buf(`${p}b`), value: buf('2') }));
    rev(await client.kv.put({ key: buf(`${p}a`), value: buf('1-again') }));
    rev(await client.kv.put({ key: buf(`${p}empty`), value: Buffer.alloc(0) }));
    rev(await client.kv.put({ key: buf(`${p}bin`), value: Buffer.from([0xff, 0x00, 0xfe, 0x80]) }));
    rev(
      await client.kv.txn({
        compare: [],
        success: [
          { request_put: { key: buf(`${p}t1`), value: buf('t1') } },
          { request_put: { key: buf(`${p}a`), value: buf('from-txn') } },
          { request_delete_range: { key: buf(`${p}b`) } },
        ],
      }),
    );
    const lease = String((await client.leaseClient.leaseGrant({ TTL: 3600 })).ID);
    rev(await client.kv.put({ key: buf(`${p}leased-1`), value: buf('l1'), lease }));
    rev(await client.kv.put({ key: buf(`${p}leased-2`), value: buf('l2'), lease }));
    const kept = String((await client.leaseClient.leaseGrant({ TTL: 3600 })).ID);
    rev(await client.kv.put({ key: buf(`${p}leased-kept`), value: buf('lk'), lease: kept }));
    rev(await client.leaseClient.leaseRevoke({ ID: lease }));
    rev(await client.kv.put({ key: buf(`${p}d/1`), value: buf('d1') }));
    rev(await client.kv.put({ key: buf(`${p}d/2`), value: buf('d2') }));
    rev(await client.kv.deleteRange({ key: buf(`${p}d/`), range_end: buf(`${p}d0`) }));
    rev(await client.kv.deleteRange({ key: buf(`${p}empty`) }));
    rev(await client.kv.put({ key: buf(`${p}empty`), value: buf('back') }));
  }
  return revisions;
}

/** Deletes every key under `prefix` in one revision; returns it. */
export async function deleteAll(client: Etcd3, prefix: string): Promise<number> {
  const r = await client.kv.deleteRange({
    key: buf(prefix),
    range_end: buf(`${prefix.slice(0, -1)}${String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1)}`),
  });
  return Number(r.header.revision);
}
