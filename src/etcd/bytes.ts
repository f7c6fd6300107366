/**
 * Bytes fields as Buffers. The generated decoder hands out views of the response message (a Buffer, so the
 * views are Buffers too) for fields that were present, and a plain empty Uint8Array for absent ones; the rest
 * of the project takes Buffers.
 */
const EMPTY = Buffer.alloc(0);

export function asBuffer(bytes: Uint8Array): Buffer {
  if (Buffer.isBuffer(bytes)) return bytes;
  return bytes.length === 0 ? EMPTY : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
}
