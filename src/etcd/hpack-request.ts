/**
 * The HPACK (RFC 7541) the lean client (lean-h2.ts) needs to send a gRPC request's headers, and no more: the
 * block is made of static-table entries and literals "without indexing", unhuffmanned, so the server's
 * decoder needs no state from us and one block per path serves every call to it. The client never decodes
 * the server's headers (see lean-h2.ts), so there is no decoder here.
 */

/** Appends an HPACK integer (RFC 7541 §5.1) with a `prefixBits` prefix under the pattern `flags`. */
export function hpackInteger(out: number[], value: number, prefixBits: number, flags: number): void {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out.push(flags | value);
    return;
  }
  out.push(flags | max);
  let rest = value - max;
  while (rest >= 0x80) {
    out.push((rest & 0x7f) | 0x80);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
}

/** Appends an HPACK string literal (RFC 7541 §5.2) without Huffman coding; `text` is Latin-1, as header values are. */
export function hpackString(out: number[], text: string): void {
  const bytes = Buffer.from(text, 'latin1');
  hpackInteger(out, bytes.length, 7, 0x00);
  for (const b of bytes) out.push(b);
}

/** RFC 7541 Appendix A indexes of the static-table entries the request uses. */
const METHOD_POST = 3;
const SCHEME_HTTP = 6;
const AUTHORITY = 1;
const PATH = 4;
const CONTENT_TYPE = 31;
/** An indexed header field (RFC 7541 §6.1): the whole entry, name and value, from the table. */
const INDEXED = 0x80;
/** A literal header field without indexing (RFC 7541 §6.2.2): a 4-bit name index, 0 when the name follows as a literal. */
const LITERAL_NOT_INDEXED = 0x00;

/** The header block of a gRPC request to `path` at `authority` (host:port). */
export function grpcRequestHeaderBlock(path: string, authority: string): Buffer {
  const out: number[] = [];
  out.push(INDEXED | METHOD_POST);
  out.push(INDEXED | SCHEME_HTTP);
  hpackInteger(out, PATH, 4, LITERAL_NOT_INDEXED);
  hpackString(out, path);
  hpackInteger(out, AUTHORITY, 4, LITERAL_NOT_INDEXED);
  hpackString(out, authority);
  hpackInteger(out, CONTENT_TYPE, 4, LITERAL_NOT_INDEXED);
  hpackString(out, 'application/grpc');
  out.push(LITERAL_NOT_INDEXED); // a new name: "te" is not in the static table
  hpackString(out, 'te');
  hpackString(out, 'trailers');
  return Buffer.from(out);
}
