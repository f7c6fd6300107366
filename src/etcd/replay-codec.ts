/**
 * A replayed revision as etcd's KV.Txn, through the generated code: one unconditional transaction of puts (with
 * their lease) and single-key deletes, and the revision etcd gave it. Shared by the one transport's txn
 * (calls.ts) and the lean path (lean-txns.ts), so both send the same bytes.
 */
import { EtcdError } from './errors.js';
import { TxnRequest, TxnResponse, type RequestOp } from './gen/etcd/api/etcdserverpb/rpc_pb.js';
import { frame } from './grpc-frame.js';
import type { ReplayOp } from './types.js';

export function txnRequestOf(ops: readonly ReplayOp[]): TxnRequest {
  return { success: ops.map(toRequestOp) };
}

/** The TxnRequest as one gRPC message (uncompressed flag, big-endian length, the message). */
export function framedTxnRequest(ops: readonly ReplayOp[]): Buffer {
  return frame(TxnRequest, txnRequestOf(ops));
}

/** The header revision of a TxnResponse (the message without its gRPC prefix): the transaction's revision. */
export function revisionOfTxnResponse(message: Uint8Array): number {
  return headerRevision(TxnResponse.decode(message).header?.revision);
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
    return { requestPut: { key, value, lease: lease === undefined || lease === '' || lease === '0' ? 0n : leaseIdOf(lease) } };
  }
  if (op.request_delete_range) return { requestDeleteRange: { key: op.request_delete_range.key } };
  throw new EtcdError('E_ETCD_REQUEST', 'a replay operation must be a put or a delete');
}
