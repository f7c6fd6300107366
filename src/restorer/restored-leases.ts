/**
 * Which leases a restore creates, and with which TTL (docs/how-it-works.md "How a restore works", Leases;
 * `compact` writes them the same way into the compacted snapshot). The
 * deltas name each key's lease, and ours the lease's granted TTL (DeltaEvent.leaseTTL); a lease revoke or
 * expiry shows only as deletes of its keys. So a lease is created when a key's newest event at the restored
 * revision is a put naming it, and the base snapshot's lease bucket does not hold it already (those stay as
 * etcd's snapshot restore left them): with the TTL a delta recorded, else the restore's default
 * (`--restored-lease-ttl`; never forever, so a key of a lease gone in the source does not outlive it for good).
 *
 * Both replay paths feed the same tracker, event by event: the offline one keyed by the key's row
 * (key-states.ts), the online one by the key. It holds one entry per key whose newest put names a lease
 * (none for a chain without leases), a count per lease and the TTLs the deltas recorded.
 */

import type { RestorationConfig } from '../config/types.js';

/**
 * `--restored-lease-ttl` in seconds: the TTL a restore (and `compact`) gives a lease whose TTL neither the
 * base full snapshot nor a delta holds. The flag is validated as whole seconds; the rounding only keeps a config file's value an integer.
 */
export function restoredLeaseTtlSeconds(rc: Pick<RestorationConfig, 'restoredLeaseTtl'>): number {
  return Math.round(rc.restoredLeaseTtl / 1000);
}

/** A lease to create: its ID (decimal int64) and TTL in seconds. */
export interface RestoredLease {
  id: string;
  ttl: number;
  /** Where the TTL came from: a delta's record, or the restore's default. */
  source: 'recorded' | 'default';
}

/** A lease live keys name: its ID, kept once however many keys name it, and how many do. */
interface Named {
  id: string;
  keys: number;
}

export class LeaseRefs<K> {
  /** The lease of each key whose newest event is a put naming one (the lease's one entry, not a copy of its ID). */
  private readonly leaseOf = new Map<K, Named>();
  /** The leases live keys name, by ID. */
  private readonly named = new Map<string, Named>();
  /** The granted TTLs the deltas recorded. */
  private readonly ttls = new Map<string, number>();

  /** A put of `key` naming `lease` ('0': none), with the TTL its event recorded (if any). */
  put(key: K, lease: string, ttl: number | undefined): void {
    if (lease === '0' || lease === '') {
      // Nothing to do for a chain (or a key) without leases: the common case costs one size check.
      if (this.leaseOf.size > 0) this.drop(key);
      return;
    }
    if (ttl !== undefined && ttl > 0) this.ttls.set(lease, ttl);
    const before = this.leaseOf.get(key);
    if (before?.id === lease) return;
    if (before !== undefined) this.release(before);
    let entry = this.named.get(lease);
    if (entry === undefined) {
      entry = { id: lease, keys: 0 };
      this.named.set(lease, entry);
    }
    entry.keys++;
    this.leaseOf.set(key, entry);
  }

  /** A delete of `key`. */
  delete(key: K): void {
    if (this.leaseOf.size > 0) this.drop(key);
  }

  /** Whether some key's newest put names a lease (else a put without one has nothing to update). */
  get tracking(): boolean {
    return this.leaseOf.size > 0;
  }

  /** Whether any live key names `lease` now. */
  referenced(lease: string): boolean {
    return this.named.has(lease);
  }

  /** The TTL a delta recorded for `lease`, if any. */
  recordedTtl(lease: string): number | undefined {
    return this.ttls.get(lease);
  }

  /** The leases live keys name now, in no particular order. */
  referencedLeases(): IterableIterator<string> {
    return this.named.keys();
  }

  private drop(key: K): void {
    const before = this.leaseOf.get(key);
    if (before === undefined) return;
    this.leaseOf.delete(key);
    this.release(before);
  }

  private release(entry: Named): void {
    entry.keys--;
    if (entry.keys === 0) this.named.delete(entry.id);
  }
}

/**
 * The leases to create (pure): every lease live keys name, but those the base already holds (`inBase`), each
 * with its recorded TTL or `defaultTtl`. Sorted by their bucket key (the ID's int64 bits, big-endian, compared
 * as unsigned bytes), the order bbolt keeps them in.
 */
export function leasesToCreate(refs: LeaseRefs<unknown>, inBase: (id: string) => boolean, defaultTtl: number): RestoredLease[] {
  const out: RestoredLease[] = [];
  for (const id of refs.referencedLeases()) {
    if (inBase(id)) continue;
    const recorded = refs.recordedTtl(id);
    out.push(recorded !== undefined ? { id, ttl: recorded, source: 'recorded' } : { id, ttl: defaultTtl, source: 'default' });
  }
  return out.sort((a, b) => compareLeaseIds(a.id, b.id));
}

/** Orders lease IDs as bbolt orders their keys: by their 64 bits as an unsigned number. */
export function compareLeaseIds(a: string, b: string): number {
  const x = BigInt.asUintN(64, BigInt(a));
  const y = BigInt.asUintN(64, BigInt(b));
  return x < y ? -1 : x > y ? 1 : 0;
}
