/**
 * The write load of the interop cases: what a Kubernetes etcd sees and what the delta format must carry.
 * Puts of small and ~100 KiB values, overwrites (versions climb), single, prefix and range deletes
 * (tombstones), a delete and re-create (the version restarts at 1), multi-op transactions (several events in
 * one revision), leased keys and a lease revoke (deletes in one revision), non-UTF-8 keys and values, an empty
 * value. Deterministic: the same `round` writes the same bytes.
 */
import { Range, type Etcd3 } from 'etcd3';

const KiB = 1024;

/** A value of `size` bytes that differs per key and round and compresses like real data would (partly). */
function value(tag: string, size: number): Buffer {
  const head = Buffer.from(`${tag}:`);
  const out = Buffer.alloc(Math.max(size, head.length));
  head.copy(out);
  let x = [...tag].reduce((h, ch) => (h * 31 + ch.charCodeAt(0)) >>> 0, 7);
  for (let i = head.length; i < out.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    // Half text-like, half noise: gzip has something to do, but not everything.
    out[i] = i % 2 === 0 ? 0x61 + ((x >>> 16) % 26) : (x >>> 24) & 0xff;
  }
  return out;
}

/** One round of the mixed load under `/r<round>/`; returns etcd's revision after it. */
export async function mixedWrites(c: Etcd3, round: number, opts: { keys?: number; bigValues?: number } = {}): Promise<number> {
  const p = `/registry/r${round}`;
  const keys = opts.keys ?? 40;
  for (let i = 0; i < keys; i++) await c.put(`${p}/pods/p${String(i).padStart(3, '0')}`).value(value(`${p}/${i}`, 150 + ((i * 97) % 2000)));
  for (let i = 0; i < (opts.bigValues ?? 2); i++) await c.put(`${p}/big/b${i}`).value(value(`${p}/big${i}`, 100 * KiB));
  // Overwrites: the version climbs, create revision stays.
  for (let v = 0; v < 6; v++) await c.put(`${p}/configmaps/hot`).value(`hot-${round}-${v}`);
  // Single, prefix and range deletes.
  await c.delete().key(`${p}/pods/p001`);
  await c.delete().prefix(`${p}/pods/p01`);
  await c.delete().range(new Range(`${p}/pods/p020`, `${p}/pods/p024`));
  // A transaction: puts and a delete in one revision.
  await c
    .if(`${p}/configmaps/hot`, 'Version', '>', 0)
    .then(c.put(`${p}/txn/a`).value(`a${round}`), c.put(`${p}/txn/b`).value(''), c.delete().key(`${p}/pods/p030`))
    .commit();
  // Delete and re-create: the version starts again at 1.
  await c.delete().key(`${p}/pods/p002`);
  await c.put(`${p}/pods/p002`).value('recreated');
  // Leases: one kept (its keys restore, without the lease where a delta carried them), one revoked.
  const kept = c.lease(7200, { autoKeepAlive: false });
  await kept.put(`${p}/leases/kept`).value(`held-${round}`);
  const revoked = c.lease(7200, { autoKeepAlive: false });
  await revoked.put(`${p}/leases/gone0`).value('x');
  await revoked.put(`${p}/leases/gone1`).value('y');
  await revoked.revoke();
  // Bytes that are not UTF-8, in keys and values, and an empty value.
  await c
    .put(Buffer.concat([Buffer.from(`${p}/bin/`), Buffer.from([0xff, 0x00, 0xc0, round & 0xff])]))
    .value(Buffer.from([0x00, 0xfe, 0x80]));
  await c.put(`${p}/empty`).value('');
  const last = await c.put(`${p}/done`).value(String(round)).exec();
  return Number(last.header.revision);
}
