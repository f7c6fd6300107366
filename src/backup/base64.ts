/**
 * Standard base64 (RFC 4648 §4, padded) decoded straight from bytes, as Go's encoding/json writes []byte
 * fields. The delta parser reads keys and values from the raw JSON bytes with it: no string per field and no
 * call into native code per key, which is what a delta's hundreds of thousands of short keys cost before.
 *
 * Strict: a length that is not a multiple of 4, a character outside the alphabet or padding anywhere but at
 * the end gives undefined / false, so the caller can fall back to its general path (which decides what such
 * input means) instead of guessing here. A long field is decoded by Node instead (see NATIVE_DECODE_CHARS):
 * what it accepts there the general path, Node's decoder too, reads the same way.
 */

/** Alphabet value of each byte, -1 outside the alphabet. */
const VALUE = new Int8Array(256).fill(-1);
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
for (let i = 0; i < ALPHABET.length; i++) VALUE[ALPHABET.charCodeAt(i)] = i;
const PAD = 0x3d; // '='

/** How many '=' end src[start, end) (0 to 2), when its length allows padding at all. */
function padding(src: Uint8Array, start: number, end: number): number {
  if (end - start < 4 || src[end - 1] !== PAD) return 0;
  return src[end - 2] === PAD ? 2 : 1;
}

/** Whether src[start, end) is strict padded base64 (checked, not decoded). */
export function isBase64(src: Uint8Array, start: number, end: number): boolean {
  if ((end - start) % 4 !== 0) return false;
  const body = end - padding(src, start, end);
  let bad = 0;
  for (let i = start; i < body; i++) bad |= VALUE[src[i]!]!;
  return bad >= 0;
}

/**
 * From this many characters on (144 bytes decoded), Node's native decoder beats the loop below by 2-3x, string
 * and all (measured on 50-1,000-byte values); below it, the string costs more than the loop. Values are most
 * of a realistic delta's bytes.
 */
const NATIVE_DECODE_CHARS = 192;

/**
 * Decodes src[start, end) (padded base64) into a new Buffer, or undefined when it is not. Small results come
 * from Node's shared pool, as Buffer.from would give them.
 */
export function decodeBase64(src: Uint8Array, start: number, end: number): Buffer | undefined {
  const n = end - start;
  if (n % 4 !== 0) return undefined;
  const pad = padding(src, start, end);
  const length = (n / 4) * 3 - pad;
  if (n >= NATIVE_DECODE_CHARS) return decodeNatively(src, start, end, length);
  const out = Buffer.allocUnsafe(length);
  // Whole quanta (the padded last one apart); an invalid character's -1 makes `bad` negative.
  const whole = end - (pad > 0 ? 4 : 0);
  let bad = 0;
  let o = 0;
  let i = start;
  for (; i < whole; i += 4) {
    const a = VALUE[src[i]!]!;
    const b = VALUE[src[i + 1]!]!;
    const c = VALUE[src[i + 2]!]!;
    const d = VALUE[src[i + 3]!]!;
    bad |= a | b | c | d;
    const v = (a << 18) | (b << 12) | (c << 6) | d;
    out[o++] = v >>> 16;
    out[o++] = (v >>> 8) & 0xff;
    out[o++] = v & 0xff;
  }
  if (pad > 0) {
    // "xx==" holds one byte, "xxx=" two.
    const a = VALUE[src[i]!]!;
    const b = VALUE[src[i + 1]!]!;
    const c = pad === 1 ? VALUE[src[i + 2]!]! : 0;
    bad |= a | b | c;
    const v = (a << 18) | (b << 12) | (c << 6);
    out[o++] = v >>> 16;
    if (pad === 1) out[o] = (v >>> 8) & 0xff;
  }
  return bad < 0 ? undefined : out;
}

/**
 * Node's decoder skips what is not base64 and stops at padding, so any such character leaves the result
 * shorter than `length`: undefined then, as from the loop. It also reads the URL-safe alphabet; so does the
 * general path (Buffer.from), which the loop leaves such fields to, so both give the same bytes.
 */
function decodeNatively(src: Uint8Array, start: number, end: number, length: number): Buffer | undefined {
  const bytes = Buffer.isBuffer(src) ? src : Buffer.from(src.buffer, src.byteOffset, src.byteLength);
  const text = bytes.toString('latin1', start, end);
  const out = Buffer.from(text, 'base64');
  return out.length === length ? out : undefined;
}
