/**
 * Protobuf wire-format writing for the few messages we encode by hand (etcd's TxnRequest in
 * src/etcd/txn-wire.ts, mvccpb.KeyValue in src/restorer/mvcc.ts); protobuf.ts beside it reads. Values are
 * non-negative integers below 2^53 (lengths, revisions, versions), so a varint is at most 8 bytes and plain
 * number arithmetic is exact.
 */

/** Bytes the varint encoding of `n` takes. */
export function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    size++;
  }
  return size;
}

/** Writes `n` as a varint at `at`; returns the position after it. */
export function writeVarint(buf: Buffer, at: number, n: number): number {
  while (n >= 0x80) {
    // Division, not `>>> 7`: shifts truncate n to 32 bits, and revisions can pass 2^32.
    buf[at++] = (n % 0x80) | 0x80;
    n = Math.floor(n / 0x80);
  }
  buf[at++] = n;
  return at;
}
