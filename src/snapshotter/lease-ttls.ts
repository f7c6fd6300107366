/**
 * The granted TTL of the leases the watch's events name, for the delta JSON (`"leaseTTL"`, DeltaEvent.leaseTTL):
 * a restore gives a lease granted after the full snapshot the TTL its source had, where a delta alone knows only
 * the lease's ID. etcd is asked once per lease ID (Lease.LeaseTimeToLive), as soon as an event names it: a short
 * lease may be gone by the time the delta is saved. The asking happens beside the watch, never in its way: the
 * event path only notes the ID, and a save waits for the answers its events need.
 */
import type { Logger } from '@etcdbrctl/snapstore';
import { isLeaseTtl } from '../backup/delta-format.js';
import { asError } from '../errors.js';

/** Asks etcd for the granted TTL of a lease; resolves with 0 when etcd no longer has it. */
export type GrantedTtlLookup = (lease: string) => Promise<number>;

/**
 * The most lease IDs remembered: beyond them the oldest is forgotten (and asked again should it come back). A
 * cluster holds few leases at a time (Kubernetes shares one per minute for its events), so this bounds memory
 * without costing lookups.
 */
export const MAX_REMEMBERED_LEASES = 10_000;

/** 0 for a lease whose TTL is not known (etcd did not have it, or did not answer). */
type Known = number;

/** How long one lookup may take: a delta save waits for the lookups of its leases. */
export const LEASE_LOOKUP_TIMEOUT_MS = 5_000;

export class LeaseTtls {
  private readonly known = new Map<string, Known | Promise<Known>>();

  constructor(
    private readonly lookup: GrantedTtlLookup,
    private readonly logger: Logger,
    private readonly limit = MAX_REMEMBERED_LEASES,
  ) {}

  /** Called from the event path for each event's lease ID: starts the one lookup of an ID not seen yet. */
  note(lease: string): void {
    if (lease === '0' || lease === '' || this.known.has(lease)) return;
    void this.ask(lease);
  }

  /**
   * The known TTLs of `leases` (a delta's), once the lookups of them have answered; an ID forgotten since
   * (over the limit) is asked again. Never rejects: an unknown TTL is left out.
   */
  async of(leases: Iterable<string>): Promise<Map<string, number>> {
    // Every lookup asked for first, then waited for together: a save waits for the slowest, not for their sum.
    const pending: Array<[string, Known | Promise<Known>]> = [];
    for (const lease of leases) {
      if (lease === '0' || lease === '') continue;
      pending.push([lease, this.known.get(lease) ?? this.ask(lease)]);
    }
    const out = new Map<string, number>();
    for (const [lease, known] of pending) {
      const ttl = await known;
      if (ttl > 0) out.set(lease, ttl);
    }
    return out;
  }

  /** Lease IDs remembered (for tests and diagnostics). */
  get size(): number {
    return this.known.size;
  }

  private ask(lease: string): Promise<Known> {
    let failed = false;
    const pending = this.lookup(lease).then(
      (ttl) => (isLeaseTtl(ttl) ? ttl : 0),
      (err: unknown) => {
        // A lookup that failed (etcd away, a timeout) leaves the TTL unknown (a restore then uses its default),
        // and is forgotten: the next event or delta naming the lease asks again.
        this.logger.debug({ lease, err: asError(err).message }, 'could not ask etcd for the TTL of a lease');
        failed = true;
        return 0;
      },
    );
    this.known.set(lease, pending);
    void pending.then((ttl) => {
      // Only if still the entry this lookup made (not forgotten and asked again meanwhile).
      if (this.known.get(lease) !== pending) return;
      if (failed) this.known.delete(lease);
      else this.known.set(lease, ttl);
    });
    if (this.known.size > this.limit) {
      const oldest = this.known.keys().next().value;
      if (oldest !== undefined) this.known.delete(oldest);
    }
    return pending;
  }
}
