/**
 * The keys' leases on the online replay (restored-leases.ts decides which leases the result has). The replay etcd
 * must not expire a lease while it replays: its own expiry would delete keys at revisions of its own and put the
 * replay out of step. So, before it starts, the base's leases get a TTL longer than any replay
 * (`prepareOnlineLeases`); a lease a put names that the replay etcd does not have is granted with that TTL, by
 * its ID, before the transaction that names it (`OnlineLeases.grantFor`); and once that etcd has stopped, the
 * `lease` bucket is written as the offline replay writes it (`writeRestoredLeaseBucket`): the base's records as
 * they were, the leases the restored keys name with their TTL, nothing of a lease no key names any more.
 */
import { BoltDB } from '../bbolt/db.js';
import type { WriterEntry } from '../bbolt/writer.js';
import type { DeltaEvent } from '../backup/delta-format.js';
import { LEASE_BUCKET, leaseIdOfKey } from '../backend/schema.js';
import { copyEntries, rewriteBucket, topLevelBuckets } from './backend-copy.js';
import { noLeases, withCreatedLeases, type LeaseCounts } from './lease-bucket.js';
import { decodeLeaseRecord, encodeLeaseRecord } from './lease-record.js';
import { LeaseRefs, leasesToCreate } from './restored-leases.js';
import type { ReplayOp } from '../etcd/index.js';

/**
 * The TTL of every lease in the replay etcd while it replays (a year): longer than any replay, and set right
 * before the result is checked (`writeRestoredLeaseBucket`).
 */
export const REPLAY_LEASE_TTL_SECONDS = 365 * 24 * 60 * 60;

/** Grants the lease `id` (decimal int64) with `ttlSeconds` in the replay etcd. */
export type GrantLease = (id: string, ttlSeconds: number) => Promise<void>;

export class OnlineLeases {
  /** The leases live keys name, keyed by the key's bytes as a latin1 string. */
  readonly refs = new LeaseRefs<string>();
  private readonly granted = new Set<string>();

  constructor(
    /** The base's lease records by ID (as etcd's snapshot restore left them), written back at the end. */
    readonly base: ReadonlyMap<string, Buffer>,
    private readonly defaultTtlSeconds: number,
  ) {}

  /** Notes an event the replay commits. */
  note(ev: DeltaEvent): void {
    // A chain (so far) without leased keys costs no key string per event.
    if (ev.lease === '0' && !this.refs.tracking) return;
    const key = ev.key.toString('latin1');
    if (ev.type === 'PUT') this.refs.put(key, ev.lease, ev.leaseTTL);
    else this.refs.delete(key);
  }

  /** Grants, before `ops` are committed, each lease they name that the replay etcd does not have yet. */
  async grantFor(ops: readonly ReplayOp[], grant: GrantLease): Promise<void> {
    for (const op of ops) {
      const lease = op.request_put?.lease;
      if (lease === undefined || lease === '0' || this.base.has(lease) || this.granted.has(lease)) continue;
      await grant(lease, REPLAY_LEASE_TTL_SECONDS);
      this.granted.add(lease);
    }
  }

  /**
   * Writes the `lease` bucket of the stopped replay etcd's backend: the base's records back as they were, the
   * leases the keys name with their TTL (recorded, else the default), no other.
   */
  async writeBucket(dbPath: string, signal?: AbortSignal): Promise<LeaseCounts> {
    const counts = noLeases();
    const created = leasesToCreate(this.refs, (id) => this.base.has(id), this.defaultTtlSeconds);
    const base = this.base;
    await rewriteBucket(
      dbPath,
      LEASE_BUCKET,
      (entries) => withCreatedLeases(baseRecordsOnly(entries, base), () => created, counts),
      signal,
    );
    return counts;
  }
}

/** Of the replay etcd's `lease` bucket, the base's leases with their records as the base had them. */
async function* baseRecordsOnly(entries: AsyncIterable<WriterEntry[]>, base: ReadonlyMap<string, Buffer>): AsyncGenerator<WriterEntry[]> {
  for await (const batch of entries) {
    const out: WriterEntry[] = [];
    for (const e of batch) {
      const record = base.get(leaseIdOfKey(e.key) ?? '');
      if (record) out.push({ key: Buffer.from(e.key), value: record });
    }
    if (out.length > 0) yield out;
  }
}

/**
 * Before the replay etcd starts on `dbPath`: reads the base's lease records and, when there are any, rewrites
 * them with REPLAY_LEASE_TTL_SECONDS (the records themselves are kept, to be written back at the end).
 */
export async function prepareOnlineLeases(dbPath: string, defaultTtlSeconds: number, signal?: AbortSignal): Promise<OnlineLeases> {
  const base = new Map<string, Buffer>();
  const db = await BoltDB.open(dbPath);
  try {
    const bucket = (await topLevelBuckets(db)).find((b) => b.name.equals(LEASE_BUCKET));
    if (bucket) {
      for await (const batch of copyEntries(db, bucket, signal)) {
        for (const e of batch) {
          const where = `${dbPath}: lease bucket key ${e.key.toString('hex')}`;
          base.set(decodeLeaseRecord(e.value, where).id, Buffer.from(e.value));
        }
      }
    }
  } finally {
    await db.close();
  }
  if (base.size > 0) {
    await rewriteBucket(
      dbPath,
      LEASE_BUCKET,
      async function* (entries) {
        for await (const batch of entries) {
          yield batch.map((e) => ({
            key: e.key,
            value: encodeLeaseRecord(decodeLeaseRecord(e.value, dbPath).id, REPLAY_LEASE_TTL_SECONDS),
          }));
        }
      },
      signal,
    );
  }
  return new OnlineLeases(base, defaultTtlSeconds);
}
