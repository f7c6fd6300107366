/**
 * The events of a delta snapshot (`DeltaEvent`: one `clientv3.Event` of etcd's watch and when it arrived) and
 * the rules their fields keep: int64 lease IDs, lease TTLs etcd could have granted, Go's RFC3339Nano times.
 * The payload's bytes are written by delta-write.ts and read by delta-parse.ts.
 */
import { EtcdbrError } from '../errors.js';

export type EventType = 'PUT' | 'DELETE';

export interface DeltaEvent {
  type: EventType;
  key: Buffer;
  /** Empty for deletes and for puts of an empty value. */
  value: Buffer;
  createRevision: number;
  modRevision: number;
  version: number;
  /**
   * Lease ID as a decimal int64 string ("0" = none). Lease IDs exceed 2^53, so they never pass through
   * a JavaScript number.
   */
  lease: string;
  /** Wall-clock receive time, RFC 3339 with up to nanosecond precision (kept verbatim when decoded). */
  time: string;
  /**
   * Ours: the TTL in seconds etcd granted the event's lease, as the sidecar asked etcd when it saw the lease
   * (`"leaseTTL"` beside `"time"`, written on the first event of a delta naming the lease). A restore gives
   * the lease that TTL. Absent or 0: not known (every Go-written delta; Go's json.Unmarshal ignores the field).
   */
  leaseTTL?: number;
}

const INT64_RE = /^-?\d{1,19}$/;

/** The largest TTL etcd grants (its `MaxLeaseTTL`, 9,000,000,000 s): a recorded TTL above it is not one etcd gave. */
export const MAX_LEASE_TTL_SECONDS = 9_000_000_000;

/** Whether the event carries its lease's TTL; throws (E_INVALID_INPUT) for one that is not a TTL etcd could have granted. */
export function hasLeaseTtl(ev: DeltaEvent): boolean {
  const ttl = ev.leaseTTL;
  if (ttl === undefined || ttl === 0 || !hasLease(ev)) return false;
  if (!isLeaseTtl(ttl))
    throw new EtcdbrError('E_INVALID_INPUT', `invalid lease TTL ${ttl} of lease ${ev.lease}: not 1..${MAX_LEASE_TTL_SECONDS} seconds`);
  return true;
}

/** A TTL in seconds etcd could have granted: a whole number from 1 to MAX_LEASE_TTL_SECONDS. */
export function isLeaseTtl(ttl: number): boolean {
  return Number.isSafeInteger(ttl) && ttl >= 1 && ttl <= MAX_LEASE_TTL_SECONDS;
}

/** Whether the event names a lease; throws (E_INVALID_INPUT) for a lease ID that is not an int64 (it would break the JSON). */
export function hasLease(ev: DeltaEvent): boolean {
  if (ev.lease === '0' || ev.lease === '') return false;
  if (!INT64_RE.test(ev.lease)) throw new EtcdbrError('E_INVALID_INPUT', `invalid lease ID ${JSON.stringify(ev.lease)}: not an int64`);
  return true;
}

/**
 * Go's time.Time JSON form (RFC3339Nano): fractional seconds with trailing zeros dropped, no dot when
 * zero. `nanos` is nanoseconds since the epoch as a bigint so sub-millisecond precision survives.
 */
export function formatRfc3339Nano(nanos: bigint): string {
  const ms = Number(nanos / 1_000_000n);
  const base = new Date(ms).toISOString().slice(0, 19); // YYYY-MM-DDTHH:MM:SS
  let frac = (((nanos % 1_000_000_000n) + 1_000_000_000n) % 1_000_000_000n).toString().padStart(9, '0');
  frac = frac.replace(/0+$/, '');
  return `${base}${frac ? `.${frac}` : ''}Z`;
}

/** The performance clock's origin in epoch nanoseconds; read at the first use (the global loads node:perf_hooks). */
let originNanos: bigint | undefined;

/** Now, with the sub-millisecond precision the performance clock offers. */
export function nowRfc3339Nano(): string {
  originNanos ??= BigInt(Math.round(performance.timeOrigin * 1e6));
  return formatRfc3339Nano(originNanos + BigInt(Math.round(performance.now() * 1e6)));
}
