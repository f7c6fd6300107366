/**
 * Just enough protobuf wire-format decoding for etcd's WAL and snapshot files (walpb, raftpb, snappb,
 * etcdserverpb.Metadata). The messages are tiny and fixed, so a generated codec would be all weight.
 * Errors follow what Go's unmarshalers reject: truncated varints and lengths, and unknown wire types.
 */
import { CodedError } from '../errors.js';

export class ProtoError extends CodedError {
  readonly code = 'E_PROTOBUF';
  override readonly name = 'ProtoError';
}

export const WIRE_VARINT = 0;
export const WIRE_FIXED64 = 1;
export const WIRE_BYTES = 2;
export const WIRE_FIXED32 = 5;

const TWO_32 = 4294967296;

/**
 * A forward-only reader over `buf[start, end)`. `next()` steps to the next field; read its value with
 * exactly one of the value methods, or `skip()` it.
 */
export class ProtoReader {
  pos: number;
  field = 0;
  wire = 0;
  // The last varint as two unsigned 32-bit halves, so 64-bit ids survive without BigInt on the hot path.
  private lo = 0;
  private hi = 0;

  constructor(
    readonly buf: Uint8Array,
    start = 0,
    readonly end = buf.length,
  ) {
    this.pos = start;
  }

  /** Advances to the next field; false at the end of the message. */
  next(): boolean {
    if (this.pos >= this.end) return false;
    this.readVarint();
    if (this.hi !== 0 || this.lo > 0x1fffffff * 8 + 7) throw new ProtoError('field tag overflows 32 bits');
    this.field = this.lo >>> 3;
    this.wire = this.lo & 7;
    if (this.field === 0) throw new ProtoError('illegal field number 0');
    return true;
  }

  private readVarint(): void {
    const buf = this.buf;
    let lo = 0;
    let hi = 0;
    let shift = 0;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new ProtoError('truncated varint');
      const b = buf[this.pos++]!;
      if (shift < 28) {
        lo |= (b & 0x7f) << shift;
      } else if (shift === 28) {
        lo |= (b & 0x0f) << 28;
        hi |= (b & 0x7f) >>> 4;
      } else {
        hi |= (b & 0x7f) << (shift - 32);
      }
      if ((b & 0x80) === 0) {
        this.lo = lo >>> 0;
        this.hi = hi >>> 0;
        return;
      }
      shift += 7;
    }
    throw new ProtoError('varint longer than 10 bytes');
  }

  private expect(wire: number): void {
    if (this.wire !== wire) throw new ProtoError(`wrong wire type ${this.wire} for field ${this.field}`);
  }

  /**
   * A varint field as a number. No index, term or revision gets to 2^53: a value there is corrupt, and throws
   * with the value as stored (exact, not rounded through a number) and `name` (default: the field number).
   */
  uint64(name?: string): number {
    this.expect(WIRE_VARINT);
    this.readVarint();
    if (this.hi >= 0x200000) {
      const value = (BigInt(this.hi) << 32n) | BigInt(this.lo);
      throw new ProtoError(`${name ?? `field ${this.field}`} ${value} is out of range (2^53 or more)`);
    }
    return this.hi * TWO_32 + this.lo;
  }

  /** A varint field as an exact unsigned 64-bit BigInt (member and cluster ids use the full range). */
  uint64Big(): bigint {
    this.expect(WIRE_VARINT);
    this.readVarint();
    return (BigInt(this.hi) << 32n) | BigInt(this.lo);
  }

  /** A varint field truncated to its low 32 bits, as Go does for uint32 and enum fields. */
  uint32(): number {
    this.expect(WIRE_VARINT);
    this.readVarint();
    return this.lo;
  }

  /** A length-delimited field: its [start, end) in `buf`, without copying. */
  bytes(): [number, number] {
    this.expect(WIRE_BYTES);
    this.readVarint();
    if (this.hi !== 0 || this.lo > this.end - this.pos) throw new ProtoError(`field ${this.field}: length beyond message`);
    const start = this.pos;
    this.pos += this.lo;
    return [start, this.pos];
  }

  skip(): void {
    switch (this.wire) {
      case WIRE_VARINT:
        this.readVarint();
        return;
      case WIRE_FIXED64:
        this.advance(8);
        return;
      case WIRE_BYTES:
        this.bytes();
        return;
      case WIRE_FIXED32:
        this.advance(4);
        return;
      default:
        // Groups (3, 4) are not used by any of these messages; 6 and 7 are invalid.
        throw new ProtoError(`unsupported wire type ${this.wire} for field ${this.field}`);
    }
  }

  private advance(n: number): void {
    if (this.end - this.pos < n) throw new ProtoError(`field ${this.field}: truncated`);
    this.pos += n;
  }
}
