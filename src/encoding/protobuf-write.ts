/**
 * Protobuf wire-format writing for the records we encode by hand into etcd's files (mvccpb.KeyValue in
 * src/restorer/mvcc.ts and src/verifier/kv-record.ts; etcd's RPC messages are generated, src/etcd/gen);
 * protobuf.ts beside it reads. Values are non-negative integers below 2^53 (lengths, revisions, versions), so a
 * varint is at most 8 bytes and plain number arithmetic is exact; 64-bit ids come as BigInt.
 */

/** Bytes the varint encoding of `n` takes. */
export function varintSize(n: number | bigint): number {
  if (typeof n === 'bigint') return n < 2n ** 53n ? varintSize(Number(n)) : n < 2n ** 56n ? 8 : n < 2n ** 63n ? 9 : 10;
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    size++;
  }
  return size;
}

/** Writes `n` as a varint at `at`; returns the position after it. */
export function writeVarint(buf: Buffer, at: number, n: number | bigint): number {
  if (typeof n === 'bigint') {
    // Member and cluster ids use all 64 bits: the low 49 bits (seven groups) as a number, then the rest.
    if (n < 2n ** 53n) return writeVarint(buf, at, Number(n));
    let low = Number(n & 0x1ffffffffffffn);
    for (let i = 0; i < 7; i++) {
      buf[at++] = (low % 0x80) | 0x80;
      low = Math.floor(low / 0x80);
    }
    return writeVarint(buf, at, Number(n >> 49n));
  }
  while (n >= 0x80) {
    // Division, not `>>> 7`: shifts truncate n to 32 bits, and revisions can pass 2^32.
    buf[at++] = (n % 0x80) | 0x80;
    n = Math.floor(n / 0x80);
  }
  buf[at++] = n;
  return at;
}
