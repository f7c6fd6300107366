/**
 * The online replay's transactions on the lean HTTP/2 client (lean-h2.ts), encoded and decoded by the same
 * generated code as every other call (replay-codec.ts). The lean client does not decode gRPC statuses: a
 * refusal is a LeanCallError without etcd's words, and the caller (src/restorer/replay-txns.ts) sends the
 * transaction again through the client's one transport to learn them.
 */
import { EtcdError } from './errors.js';
import { LeanH2 } from './lean-h2.js';
import { framedTxnRequest, revisionOfTxnResponse } from './replay-codec.js';
import type { CallOptions, LeanTxns, ReplayOp, SignalOptions } from './types.js';

const TXN_PATH = '/etcdserverpb.KV/Txn';

export async function openLeanTxns(clientUrl: string): Promise<LeanTxns> {
  const lean = await LeanH2.connect(clientUrl);
  return {
    async txn(ops: readonly ReplayOp[], opts: CallOptions & SignalOptions = {}): Promise<number> {
      const framed = await lean.call(TXN_PATH, framedTxnRequest(ops), opts);
      if (framed.length < 5 || framed[0] !== 0 || framed.readUInt32BE(1) !== framed.length - 5) {
        throw new EtcdError('E_ETCD_REQUEST', 'KV.Txn: the answer is not one uncompressed gRPC message');
      }
      return revisionOfTxnResponse(framed.subarray(5));
    },
    close: () => lean.close(),
  };
}
