/**
 * etcd's KV.Txn request and response as protobuf bytes, encoded and decoded by hand for the replay's lean
 * gRPC path (h2-unary-client.ts): only the shapes a replay sends, an unconditional transaction of puts
 * (key, value, lease) and single-key deletes, and only the response fields it reads. Field numbers are
 * those of etcd's rpc.proto (etcdserverpb): TxnRequest{success = 2}, RequestOp{request_put = 2,
 * request_delete_range = 3}, PutRequest{key = 1, value = 2, lease = 3}, DeleteRangeRequest{key = 1},
 * TxnResponse{header = 1, succeeded = 2}, ResponseHeader{revision = 3}.
 */
import { CodedError } from '../errors.js';
import { varintSize, writeVarint } from '../encoding/protobuf-write.js';

/** One operation of a replayed revision, in the form etcd3's raw KV client takes too. */
export interface ReplayOp {
  /** `lease`: the lease ID as a decimal int64 ('0' or absent: none). */
  request_put?: { key: Buffer; value: Buffer; lease?: string };
  request_delete_range?: { key: Buffer };
}

export class TxnWireError extends CodedError {
  override readonly name = 'TxnWireError';
  readonly code = 'E_ETCD_WIRE';
}

const LEN = 2;
const VARINT = 0;

/** Size of a length-delimited field with a one-byte tag and `len` bytes of content. */
function fieldSize(len: number): number {
  return 1 + varintSize(len) + len;
}

function writeBytesField(buf: Buffer, at: number, tag: number, bytes: Buffer): number {
  buf[at++] = tag;
  at = writeVarint(buf, at, bytes.length);
  bytes.copy(buf, at);
  return at + bytes.length;
}

/** The lease of a put as the varint etcd reads (its int64 bits); 0n for none. */
function leaseBits(put: NonNullable<ReplayOp['request_put']>): bigint {
  const { lease } = put;
  return lease === undefined || lease === '0' || lease === '' ? 0n : BigInt.asUintN(64, BigInt(lease));
}

/** Content size of a PutRequest. */
function putSize(put: NonNullable<ReplayOp['request_put']>, lease: bigint): number {
  const { key, value } = put;
  return fieldSize(key.length) + (value.length > 0 ? fieldSize(value.length) : 0) + (lease !== 0n ? 1 + varintSize(lease) : 0);
}

/** Content size of one RequestOp message. */
function opSize(op: ReplayOp): number {
  if (op.request_put) return fieldSize(putSize(op.request_put, leaseBits(op.request_put)));
  if (op.request_delete_range) return fieldSize(fieldSize(op.request_delete_range.key.length));
  throw new TxnWireError('a replay operation must be a put or a delete');
}

/**
 * A gRPC message (uncompressed flag, big-endian length, then the bytes) of TxnRequest{success: ops},
 * in one buffer.
 */
export function encodeTxnRequest(ops: readonly ReplayOp[]): Buffer {
  let size = 0;
  const sizes = ops.map((op) => opSize(op));
  for (const s of sizes) size += fieldSize(s);
  const buf = Buffer.allocUnsafe(5 + size);
  buf[0] = 0;
  buf.writeUInt32BE(size, 1);
  let at = 5;
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!;
    buf[at++] = (2 << 3) | LEN; // TxnRequest.success
    at = writeVarint(buf, at, sizes[i]!);
    if (op.request_put) {
      const { key, value } = op.request_put;
      const lease = leaseBits(op.request_put);
      buf[at++] = (2 << 3) | LEN; // RequestOp.request_put
      at = writeVarint(buf, at, putSize(op.request_put, lease));
      at = writeBytesField(buf, at, (1 << 3) | LEN, key);
      if (value.length > 0) at = writeBytesField(buf, at, (2 << 3) | LEN, value);
      if (lease !== 0n) {
        buf[at++] = (3 << 3) | VARINT; // PutRequest.lease
        at = writeVarint(buf, at, lease);
      }
    } else {
      const key = op.request_delete_range!.key;
      buf[at++] = (3 << 3) | LEN; // RequestOp.request_delete_range
      at = writeVarint(buf, at, fieldSize(key.length));
      at = writeBytesField(buf, at, (1 << 3) | LEN, key);
    }
  }
  if (at !== buf.length) throw new TxnWireError(`TxnRequest encoding wrote ${at} of ${buf.length} bytes`);
  return buf;
}

export interface TxnOutcome {
  /** The store revision in the response header: the transaction's revision when it wrote. */
  revision: number;
  succeeded: boolean;
}

class Reader {
  constructor(
    private readonly buf: Buffer,
    public at: number,
    private readonly end: number,
  ) {}

  get done(): boolean {
    return this.at >= this.end;
  }

  varint(): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.at >= this.end) throw new TxnWireError('TxnResponse: truncated varint');
      const b = this.buf[this.at++]!;
      value += (b & 0x7f) * scale;
      if (b < 0x80) return value;
      scale *= 128;
    }
    throw new TxnWireError('TxnResponse: varint longer than 10 bytes');
  }

  /** Skips a field's value of wire type `type`. */
  skip(type: number): void {
    if (type === VARINT) this.varint();
    else if (type === LEN) {
      // Not `this.at += this.varint()`: that adds the length to the position before the length was read.
      const len = this.varint();
      this.at += len;
    } else if (type === 1) this.at += 8;
    else if (type === 5) this.at += 4;
    else throw new TxnWireError(`TxnResponse: unsupported wire type ${type}`);
    if (this.at > this.end) throw new TxnWireError('TxnResponse: field runs past the message');
  }
}

/** Reads the revision and `succeeded` from a gRPC-framed TxnResponse. */
export function decodeTxnResponse(message: Buffer): TxnOutcome {
  if (message.length < 5 || message[0] !== 0) throw new TxnWireError('TxnResponse: not an uncompressed gRPC message');
  const r = new Reader(message, 5, 5 + message.readUInt32BE(1));
  let revision = 0;
  let succeeded = false;
  while (!r.done) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const type = tag & 7;
    if (field === 1 && type === LEN) {
      const len = r.varint();
      const header = new Reader(message, r.at, r.at + len);
      while (!header.done) {
        const htag = header.varint();
        if (Math.floor(htag / 8) === 3 && (htag & 7) === VARINT) revision = header.varint();
        else header.skip(htag & 7);
      }
      r.at += len;
    } else if (field === 2 && type === VARINT) {
      succeeded = r.varint() === 1;
    } else r.skip(type);
  }
  if (revision === 0) throw new TxnWireError('TxnResponse: no header revision');
  return { revision, succeeded };
}
