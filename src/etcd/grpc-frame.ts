/**
 * A generated message as gRPC carries it, in a module of its own so that the lean path (lean-txns.ts) frames its
 * transactions without loading the transport (grpc.ts) and node:http2.
 */

/**
 * A generated message's binary codec (`RangeRequest` in gen/): what a transport needs of it. Decoding skips
 * fields it does not know: nothing here re-encodes a response, and keeping them costs memory.
 */
export interface MessageCodec<T> {
  encode(message: T): { finish(): Uint8Array };
  decode(bytes: Uint8Array): T;
}

/** A gRPC message: uncompressed flag, big-endian length, the encoded message. */
export function frame<T>(codec: MessageCodec<T>, message: T): Buffer {
  const body = codec.encode(message).finish();
  const out = Buffer.allocUnsafe(5 + body.length);
  out[0] = 0;
  out.writeUInt32BE(body.length, 1);
  out.set(body, 5);
  return out;
}
