import { Transform, type TransformCallback } from 'node:stream';

/** Counts the bytes that pass through unchanged (e.g. a stored object's size, before decompression). */
export class ByteCounter extends Transform {
  bytes = 0;
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    cb(null, chunk);
  }
}
