/**
 * The restored backend's `lease` bucket (restored-leases.ts decides what goes in): the base's records as etcd's
 * snapshot restore left them, with the leases the restore creates merged in, in bbolt's key order.
 */
import type { WriterEntry } from '../bbolt/writer.js';
import { leaseKey } from '../backend/schema.js';
import { encodeLeaseRecord } from './lease-record.js';
import type { RestoredLease } from './restored-leases.js';

/** What the restore wrote into the `lease` bucket. */
export interface LeaseCounts {
  /** Leases created with the TTL a delta recorded. */
  recorded: number;
  /** Leases created with the restore's default TTL (no delta recorded theirs: a Go-written chain). */
  defaulted: number;
  /** Leases of the base kept as they were. */
  base: number;
}

export function noLeases(): LeaseCounts {
  return { recorded: 0, defaulted: 0, base: 0 };
}

/**
 * The base's `lease` entries with `created()` merged in. `created` is asked only when the bucket is written:
 * the `key` bucket, written before it (bbolt's name order), is where the replay learns which leases are named.
 * A lease the base holds keeps the base's record (its TTL, and a checkpointed remaining TTL).
 */
export async function* withCreatedLeases(
  base: AsyncIterable<WriterEntry[]>,
  created: () => readonly RestoredLease[],
  counts: LeaseCounts,
): AsyncGenerator<WriterEntry[]> {
  const todo = created().map((l) => ({ key: leaseKey(l.id), lease: l }));
  let next = 0;
  const take = (out: WriterEntry[], below: Buffer | undefined): void => {
    while (next < todo.length && (below === undefined || Buffer.compare(todo[next]!.key, below) <= 0)) {
      const { key, lease } = todo[next++]!;
      if (below !== undefined && key.equals(below)) continue;
      out.push({ key, value: encodeLeaseRecord(lease.id, lease.ttl) });
      if (lease.source === 'recorded') counts.recorded++;
      else counts.defaulted++;
    }
  };
  for await (const batch of base) {
    const out: WriterEntry[] = [];
    for (const e of batch) {
      take(out, e.key);
      out.push(e);
      counts.base++;
    }
    yield out;
  }
  const rest: WriterEntry[] = [];
  take(rest, undefined);
  if (rest.length > 0) yield rest;
}
