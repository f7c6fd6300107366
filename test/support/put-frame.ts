/** etcd's Put request as gRPC bytes, encoded by hand: the load generator sends it without a protobuf library. */
function varint(value: number): Buffer {
  const bytes: number[] = [];
  let v = value;
  while (v >= 0x80) {
    bytes.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 128);
  }
  bytes.push(v);
  return Buffer.from(bytes);
}

/** A gRPC message frame (uncompressed flag, big-endian length) around a PutRequest{key, value}. */
export function putFrame(key: Buffer, value: Buffer): Buffer {
  const body = Buffer.concat([Buffer.of(0x0a), varint(key.length), key, Buffer.of(0x12), varint(value.length), value]);
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(body.length, 1);
  return Buffer.concat([prefix, body]);
}
