/**
 * A replayed revision as etcd's KV.Txn, through the generated code: one unconditional transaction of puts (with
 * their lease) and single-key deletes, and the revision etcd gave it. Shared by the one transport's txn
 * (calls.ts) and the lean path (lean-txns.ts), so both send the same bytes.
 */
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { EtcdError } from './errors.js';
import {
  RequestOpSchema,
  TxnRequestSchema,
  TxnResponseSchema,
  type RequestOp,
  type TxnRequest,
} from './gen/etcd/api/etcdserverpb/rpc_pb.js';
import type { ReplayOp } from './types.js';

export function txnRequestOf(ops: readonly ReplayOp[]): TxnRequest {
  return create(TxnRequestSchema, { success: ops.map(toRequestOp) });
}

/** The TxnRequest as one gRPC message (uncompressed flag, big-endian length, the message). */
export function framedTxnRequest(ops: readonly ReplayOp[]): Buffer {
  const body = toBinary(TxnRequestSchema, txnRequestOf(ops));
  const out = Buffer.allocUnsafe(5 + body.length);
  out[0] = 0;
  out.writeUInt32BE(body.length, 1);
  out.set(body, 5);
  return out;
}

/** The header revision of a TxnResponse (the message without its gRPC prefix): the transaction's revision. */
export function revisionOfTxnResponse(message: Uint8Array): number {
  return headerRevision(fromBinary(TxnResponseSchema, message, { readUnknownFields: false }).header?.revision);
}

export function headerRevision(revision: bigint | undefined): number {
  const r = Number(revision ?? 0n);
  if (r <= 0) throw new EtcdError('E_ETCD_REQUEST', 'KV.Txn: etcd answered without a header revision');
  return r;
}

/** A lease ID (decimal int64, as DeltaEvent.lease names it) as the int64 etcd takes. */
export function leaseIdOf(id: string): bigint {
  if (!/^-?\d{1,20}$/.test(id)) throw new EtcdError('E_ETCD_REQUEST', `not a lease id: ${JSON.stringify(id)}`);
  return BigInt.asIntN(64, BigInt(id));
}

function toRequestOp(op: ReplayOp): RequestOp {
  if (op.request_put) {
    const { key, value, lease } = op.request_put;
    const put = { key, value, lease: lease === undefined || lease === '' || lease === '0' ? 0n : leaseIdOf(lease) };
    return create(RequestOpSchema, { request: { case: 'requestPut', value: put } });
  }
  if (op.request_delete_range) {
    return create(RequestOpSchema, { request: { case: 'requestDeleteRange', value: { key: op.request_delete_range.key } } });
  }
  throw new EtcdError('E_ETCD_REQUEST', 'a replay operation must be a put or a delete');
}
