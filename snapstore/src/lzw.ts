/**
 * LZW as Go's compress/lzw writes it with order LSB and 8-bit literals (upstream's `.Z` policy): no header,
 * codes packed least-significant-bit first, 0-255 literals, 256 clear, 257 end of stream, new codes from 258,
 * width 9 growing to 12. It is not the Unix `compress` format, and no npm library speaks it.
 *
 * The encoder reproduces Go's writer exactly (same codes, same clear points, same padding), so the bytes we
 * write for an input are the bytes upstream writes for it. The decoder follows Go's reader, including its
 * acceptance of streams without a leading clear code and of a full ("frozen") table.
 */
import { Transform } from 'node:stream';
import type { TransformCallback, TransformOptions } from 'node:stream';
import { InternalError } from './internal-errors.js';
import { PacedDecoder } from './paced-decoder.js';

const CLEAR = 256;
const EOF = 257;
const FIRST_WIDTH = 9;
const MAX_WIDTH = 12;
/** Go's writer emits a clear code when its next code would reach this value. */
const MAX_CODE = (1 << MAX_WIDTH) - 1;
/** Open-addressing table for (prefix code, byte) -> code; 4x the code space keeps probe chains short. */
const HASH_SIZE = 4 << MAX_WIDTH;
const HASH_MASK = HASH_SIZE - 1;
/** No code pending: nothing has been written yet (Go's `invalidCode`). */
const NO_CODE = -1;

const OUT_SIZE = 64 * 1024;
/** Output smaller than this is kept until more accumulates, so tiny input writes don't become tiny chunks. */
const PUSH_THRESHOLD = 16 * 1024;
/** Longest string one decoded code can expand to is 4096 - 258 + 1 bytes; keep that much room free. */
const DECODE_ROOM = 1 << MAX_WIDTH;
/** Why the decoder's hot loop returned. */
const STOP_INPUT = 0;
const STOP_FULL = 1;
const STOP_INVALID = 2;

function asBuffer(chunk: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  return Buffer.from(String(chunk));
}

/** Streaming LZW encoder, byte-identical to Go's `lzw.NewWriter(w, lzw.LSB, 8)`. */
export class LzwEncoder extends Transform {
  private readonly table = new Int32Array(HASH_SIZE);
  /** The code for the longest match so far (Go's savedCode). */
  private code = NO_CODE;
  /** Last code assigned; the next new string gets hi + 1. */
  private hi = EOF;
  private overflow = 1 << FIRST_WIDTH;
  private width = FIRST_WIDTH;
  private bits = 0;
  private nBits = 0;
  private out = Buffer.allocUnsafe(OUT_SIZE);
  private outPos = 0;
  /** Start of the part of `out` not pushed yet. */
  private outStart = 0;

  constructor(options?: TransformOptions) {
    super(options);
  }

  override _transform(chunk: unknown, _encoding: BufferEncoding, callback: TransformCallback): void {
    try {
      this.encode(asBuffer(chunk));
      if (this.outPos - this.outStart >= PUSH_THRESHOLD) this.pushOut();
    } catch (err) {
      callback(err as Error);
      return;
    }
    callback();
  }

  override _flush(callback: TransformCallback): void {
    this.reserve(8);
    if (this.code === NO_CODE) {
      // Empty input: Go still writes the starting clear code.
      this.emit1(CLEAR);
    } else {
      this.emit1(this.code);
      // Go's Close bumps hi after the last code, which may widen the code or even emit a clear before EOF.
      this.bumpHi();
    }
    this.emit1(EOF);
    if (this.nBits > 0) {
      this.out[this.outPos++] = this.bits & 0xff;
      this.bits = 0;
      this.nBits = 0;
    }
    this.pushOut();
    callback();
  }

  private encode(input: Buffer): void {
    const n = input.length;
    if (n === 0) return;
    let i = 0;
    if (this.code === NO_CODE) {
      this.reserve(8);
      this.emit1(CLEAR);
      this.code = input[0]!;
      i = 1;
    }
    const table = this.table;
    let code = this.code;
    let hi = this.hi;
    let overflow = this.overflow;
    let width = this.width;
    let bits = this.bits;
    let nBits = this.nBits;
    while (i < n) {
      // Each input byte emits at most two codes (a code and a clear), i.e. at most 3 bytes.
      if (this.out.length - this.outPos < 64) {
        this.pushOut();
        this.out = Buffer.allocUnsafe(OUT_SIZE);
        this.outPos = 0;
        this.outStart = 0;
      }
      const out = this.out;
      let op = this.outPos;
      const end = Math.min(n, i + Math.floor((out.length - op - 8) / 3));
      outer: for (; i < end; i++) {
        const lit = input[i]!;
        const key = (code << 8) | lit;
        let h = ((key >>> 12) ^ key) & HASH_MASK;
        let t = table[h]!;
        while (t !== 0) {
          if (t >>> 12 === key) {
            code = t & MAX_CODE;
            continue outer;
          }
          h = (h + 1) & HASH_MASK;
          t = table[h]!;
        }
        // Fewer than 8 bits were pending and width >= 9: one byte is always complete, a second maybe.
        bits |= code << nBits;
        nBits += width - 8;
        out[op++] = bits;
        bits >>>= 8;
        if (nBits >= 8) {
          out[op++] = bits;
          bits >>>= 8;
          nBits -= 8;
        }
        code = lit;
        hi++;
        if (hi === overflow) {
          width++;
          overflow <<= 1;
        }
        if (hi === MAX_CODE) {
          bits |= CLEAR << nBits;
          nBits += width;
          while (nBits >= 8) {
            out[op++] = bits & 0xff;
            bits >>>= 8;
            nBits -= 8;
          }
          width = FIRST_WIDTH;
          hi = EOF;
          overflow = 1 << FIRST_WIDTH;
          table.fill(0);
          continue;
        }
        // h is the empty slot where the probe ended. key << 12 may set bit 31; Int32Array keeps it.
        table[h] = (key << 12) | hi;
      }
      this.outPos = op;
    }
    this.code = code;
    this.hi = hi;
    this.overflow = overflow;
    this.width = width;
    this.bits = bits;
    this.nBits = nBits;
  }

  /** Go's incHi: next code number, widening at powers of two and clearing when the table is full. */
  private bumpHi(): void {
    this.hi++;
    if (this.hi === this.overflow) {
      this.width++;
      this.overflow <<= 1;
    }
    if (this.hi === MAX_CODE) {
      this.emit1(CLEAR);
      this.width = FIRST_WIDTH;
      this.hi = EOF;
      this.overflow = 1 << FIRST_WIDTH;
      this.table.fill(0);
    }
  }

  /** Slow-path single code write; the caller has reserved room. */
  private emit1(code: number): void {
    this.bits |= code << this.nBits;
    this.nBits += this.width;
    while (this.nBits >= 8) {
      this.out[this.outPos++] = this.bits & 0xff;
      this.bits >>>= 8;
      this.nBits -= 8;
    }
  }

  private reserve(bytes: number): void {
    if (this.out.length - this.outPos >= bytes) return;
    this.pushOut();
    this.out = Buffer.allocUnsafe(OUT_SIZE);
    this.outPos = 0;
    this.outStart = 0;
  }

  private pushOut(): void {
    if (this.outPos > this.outStart) {
      // Later writes go past outPos, so the pushed slice is never overwritten.
      this.push(this.out.subarray(this.outStart, this.outPos));
      this.outStart = this.outPos;
    }
  }
}

export interface LzwDecoderOptions extends TransformOptions {
  /**
   * Builds the error reported for a corrupt or truncated stream from a message without codec prefix (lets callers
   * attach object names and codes). Default: an InternalError `lzw: <message>`.
   */
  makeError?: (message: string) => Error;
}

/**
 * Streaming LZW decoder for Go's LSB/8 stream. Errors when the stream ends before the end-of-stream code or
 * contains a code that is not defined yet. Bytes after the end-of-stream code are ignored, as Go does.
 *
 * One input chunk can expand a lot (up to ~1300x), so output is produced in bounded pieces and decoding
 * pauses while the readable side is full, resuming from `_read`.
 */
export class LzwDecoder extends PacedDecoder {
  private readonly prefix = new Uint16Array(1 << MAX_WIDTH);
  private readonly suffix = new Uint8Array(1 << MAX_WIDTH);
  private readonly length = new Uint16Array(1 << MAX_WIDTH);
  /** First byte of each code's string (needed for the code == hi case without walking the chain). */
  private readonly first = new Uint8Array(1 << MAX_WIDTH);
  private readonly makeError: (message: string) => Error;

  private width = FIRST_WIDTH;
  /** Next code to be assigned. */
  private hi = EOF;
  private overflow = 1 << FIRST_WIDTH;
  /** Previous code, or NO_CODE right after a clear / while the table is frozen. */
  private last = NO_CODE;
  private bits = 0;
  private nBits = 0;
  private sawEof = false;
  private codesRead = 0;
  private badCode = 0;

  private out = Buffer.allocUnsafe(OUT_SIZE);
  private outPos = 0;
  private outStart = 0;

  /** How far into `input` decoding has got. */
  private inPos = 0;

  constructor(options: LzwDecoderOptions = {}) {
    const { makeError, ...rest } = options;
    super(rest);
    this.makeError = makeError ?? ((message) => new InternalError('E_CORRUPT_STREAM', `lzw: ${message}`));
    for (let c = 0; c < CLEAR; c++) {
      this.length[c] = 1;
      this.first[c] = c;
      this.suffix[c] = c;
    }
  }

  override _transform(chunk: unknown, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (this.sawEof) {
      callback();
      return;
    }
    this.inPos = 0;
    this.decodeChunk(asBuffer(chunk), callback);
  }

  override _flush(callback: TransformCallback): void {
    if (!this.sawEof) {
      const detail = this.codesRead === 0 ? 'no codes at all' : `after ${this.codesRead} codes`;
      callback(this.makeError(`unexpected end of stream (end-of-stream code 257 missing, ${detail})`));
      return;
    }
    this.pushOut();
    callback();
  }

  /** Returns true when paused for backpressure; the state is saved so a later call continues exactly there. */
  protected decode(): boolean {
    for (;;) {
      const status = this.decodeSome();
      if (status === STOP_FULL) {
        const more = this.outPos > this.outStart ? this.push(this.out.subarray(this.outStart, this.outPos)) : true;
        this.out = Buffer.allocUnsafe(OUT_SIZE);
        this.outPos = 0;
        this.outStart = 0;
        if (!more) return true;
        continue;
      }
      if (status === STOP_INVALID) {
        throw this.makeError(`invalid code ${this.badCode} (next code to be assigned is ${this.hi}, width ${this.width})`);
      }
      if (this.sawEof || this.outPos - this.outStart >= PUSH_THRESHOLD) this.pushOut();
      return false;
    }
  }

  /**
   * The hot loop: decodes codes from the current chunk into `out` until the chunk is used up, the
   * end-of-stream code arrives, `out` lacks room for a longest-possible string, or a code is invalid.
   * State lives in locals while looping and is written back once at the end.
   */
  private decodeSome(): number {
    const input = this.input;
    if (input === null) return STOP_INPUT;
    const n = input.length;
    const { prefix, suffix, length, first, out } = this;
    const roomLimit = out.length - DECODE_ROOM;
    let ip = this.inPos;
    let width = this.width;
    let hi = this.hi;
    let overflow = this.overflow;
    let last = this.last;
    let bits = this.bits;
    let nBits = this.nBits;
    let op = this.outPos;
    let codes = 0;
    let status = STOP_INPUT;

    for (;;) {
      if (op > roomLimit) {
        status = STOP_FULL;
        break;
      }
      if (nBits < width) {
        // At most 11 bits are pending, so 16 more still fit in 32; one refill then covers the widest code.
        if (ip + 1 < n) {
          bits |= (input[ip]! | (input[ip + 1]! << 8)) << nBits;
          nBits += 16;
          ip += 2;
        } else {
          while (nBits < width && ip < n) {
            bits |= input[ip++]! << nBits;
            nBits += 8;
          }
          if (nBits < width) break; // chunk used up mid-code; the bits wait for the next chunk
        }
      }
      const code = bits & ((1 << width) - 1);
      bits >>>= width;
      nBits -= width;
      codes++;

      if (code < CLEAR) {
        out[op++] = code;
        if (last !== NO_CODE) {
          prefix[hi] = last;
          suffix[hi] = code;
          length[hi] = length[last]! + 1;
          first[hi] = first[last]!;
        }
      } else if (code === CLEAR) {
        width = FIRST_WIDTH;
        hi = EOF;
        overflow = 1 << FIRST_WIDTH;
        last = NO_CODE;
        continue;
      } else if (code === EOF) {
        this.sawEof = true;
        break;
      } else if (code <= hi) {
        let c = code;
        let len: number;
        let p: number;
        if (code === hi && last !== NO_CODE) {
          // Not defined yet: it is last's string followed by last's first byte.
          len = length[last]! + 1;
          out[op + len - 1] = first[last]!;
          c = last;
          p = op + len - 2;
        } else {
          len = length[c]!;
          p = op + len - 1;
        }
        while (c > EOF) {
          out[p--] = suffix[c]!;
          c = prefix[c]!;
        }
        out[p] = c;
        if (last !== NO_CODE) {
          prefix[hi] = last;
          suffix[hi] = c;
          length[hi] = length[last]! + 1;
          first[hi] = first[last]!;
        }
        op += len;
      } else {
        this.badCode = code;
        status = STOP_INVALID;
        break;
      }
      last = code;
      hi++;
      if (hi >= overflow) {
        if (width === MAX_WIDTH) {
          // Table full and no clear from the writer: keep decoding with a frozen table, as Go does.
          last = NO_CODE;
          hi--;
        } else {
          width++;
          overflow <<= 1;
        }
      }
    }
    this.inPos = ip;
    this.width = width;
    this.hi = hi;
    this.overflow = overflow;
    this.last = last;
    this.bits = bits;
    this.nBits = nBits;
    this.outPos = op;
    this.codesRead += codes;
    return status;
  }

  private pushOut(): void {
    if (this.outPos > this.outStart) {
      this.push(this.out.subarray(this.outStart, this.outPos));
      this.outStart = this.outPos;
    }
  }
}
