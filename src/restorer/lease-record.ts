/**
 * etcd's record of a lease in the backend's `lease` bucket (etcd server/lease/leasepb/lease.proto):
 * `leasepb.Lease{ID = 1, TTL = 2, RemainingTTL = 3}`, all int64 varints, proto3 (zero fields left out). The
 * ID is the bucket key's too (src/backend/schema.ts `leaseKey`); TTL is the granted TTL in seconds, RemainingTTL
 * what a lease checkpoint kept of it (0: none, the lease starts over from TTL when etcd starts).
 */
import { CodedError } from '../errors.js';
import { ProtoReader } from '../encoding/protobuf.js';
import { varintSize, writeVarint } from '../encoding/protobuf-write.js';

export class LeaseRecordError extends CodedError {
  readonly code = 'E_LEASE_RECORD';
  override readonly name = 'LeaseRecordError';
}

export interface LeaseRecord {
  /** Decimal int64, as DeltaEvent.lease. */
  id: string;
  ttl: number;
  remainingTtl: number;
}

/** The value etcd stores for a lease (`remainingTtl` 0: no checkpoint). */
export function encodeLeaseRecord(id: string, ttl: number, remainingTtl = 0): Buffer {
  const bits = BigInt.asUintN(64, BigInt(id));
  const fields: Array<[number, number | bigint]> = [
    [0x08, bits],
    [0x10, ttl],
    [0x18, remainingTtl],
  ];
  let size = 0;
  for (const [, v] of fields) if (v !== 0 && v !== 0n) size += 1 + varintSize(v);
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const [tag, v] of fields) {
    if (v === 0 || v === 0n) continue;
    out[at++] = tag;
    at = writeVarint(out, at, v);
  }
  return out;
}

/** Reads a lease value; `where` names it in errors. */
export function decodeLeaseRecord(value: Buffer, where: string): LeaseRecord {
  const out: LeaseRecord = { id: '0', ttl: 0, remainingTtl: 0 };
  try {
    const r = new ProtoReader(value);
    while (r.next()) {
      if (r.field === 1) out.id = BigInt.asIntN(64, r.uint64Big()).toString();
      else if (r.field === 2) out.ttl = Number(BigInt.asIntN(64, r.uint64Big()));
      else if (r.field === 3) out.remainingTtl = Number(BigInt.asIntN(64, r.uint64Big()));
      else r.skip();
    }
  } catch (err) {
    throw new LeaseRecordError(`${where}: not a leasepb.Lease: ${(err as Error).message}`, { cause: err });
  }
  return out;
}
