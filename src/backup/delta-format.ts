/**
 * The delta snapshot payload of etcd-backup-restore, byte for byte (upstream
 * `pkg/snapshot/snapshotter/snapshotter.go` `handleDeltaWatchEvents`, `TakeDeltaSnapshot`):
 * a compact JSON array of `{"etcdEvent":{...},"time":"..."}` elements as Go's encoding/json writes
 * `clientv3.Event` (omitempty everywhere, `type` 1 for DELETE and absent for PUT, base64 key/value),
 * followed by 32 raw bytes of sha256 over the JSON.
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

/** Encodes one element exactly as Go's encoding/json would. */
export function encodeDeltaEvent(ev: DeltaEvent): string {
  let kv = '';
  const add = (field: string) => {
    kv += kv.length === 0 ? field : `,${field}`;
  };
  if (ev.key.length > 0) add(`"key":"${ev.key.toString('base64')}"`);
  if (ev.createRevision !== 0) add(`"create_revision":${ev.createRevision}`);
  if (ev.modRevision !== 0) add(`"mod_revision":${ev.modRevision}`);
  if (ev.version !== 0) add(`"version":${ev.version}`);
  if (ev.value.length > 0) add(`"value":"${ev.value.toString('base64')}"`);
  if (hasLease(ev)) add(`"lease":${ev.lease}`);
  const type = ev.type === 'DELETE' ? '"type":1,' : '';
  const ttl = hasLeaseTtl(ev) ? `,"leaseTTL":${ev.leaseTTL}` : '';
  return `{"etcdEvent":{${type}"kv":{${kv}}},"time":"${ev.time}"${ttl}}`;
}

/**
 * The UTF-8 length of `encodeDeltaEvent(ev)`, counted without building it: what the delta buffer accounts
 * against the memory limit while it holds the event in a compact form. Throws as the encoder does.
 */
export function deltaEventJsonLength(ev: DeltaEvent): number {
  let kv = 0;
  let fields = 0;
  const add = (bytes: number): void => {
    kv += bytes;
    fields += 1;
  };
  if (ev.key.length > 0) add(8 + base64Length(ev.key.length)); // "key":"…"
  if (ev.createRevision !== 0) add(18 + String(ev.createRevision).length); // "create_revision":n
  if (ev.modRevision !== 0) add(15 + String(ev.modRevision).length); // "mod_revision":n
  if (ev.version !== 0) add(10 + String(ev.version).length); // "version":n
  if (ev.value.length > 0) add(10 + base64Length(ev.value.length)); // "value":"…"
  if (hasLease(ev)) add(8 + ev.lease.length); // "lease":n
  if (fields > 1) kv += fields - 1; // the commas between fields
  // ,"leaseTTL":n
  const ttl = hasLeaseTtl(ev) ? 12 + String(ev.leaseTTL).length : 0;
  // {"etcdEvent":{ [type":1,] "kv":{ … }} ,"time":" … "}
  return 14 + (ev.type === 'DELETE' ? 9 : 0) + 6 + kv + 2 + 9 + Buffer.byteLength(ev.time, 'utf8') + 2 + ttl;
}

/** The largest TTL etcd grants (its `MaxLeaseTTL`, 9,000,000,000 s): a recorded TTL above it is not one etcd gave. */
export const MAX_LEASE_TTL_SECONDS = 9_000_000_000;

/** Whether the event carries its lease's TTL; throws for one that is not a TTL etcd could have granted. */
function hasLeaseTtl(ev: DeltaEvent): boolean {
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

function base64Length(bytes: number): number {
  return 4 * Math.ceil(bytes / 3);
}

/** Whether the event names a lease; throws for a lease ID that is not an int64 (it would break the JSON). */
function hasLease(ev: DeltaEvent): boolean {
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

const originNanos = BigInt(Math.round(performance.timeOrigin * 1e6));

/** Now, with the sub-millisecond precision the performance clock offers. */
export function nowRfc3339Nano(): string {
  return formatRfc3339Nano(originNanos + BigInt(Math.round(performance.now() * 1e6)));
}
