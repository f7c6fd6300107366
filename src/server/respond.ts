import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

/**
 * Response helpers that reproduce what upstream's Go handlers put on the wire. Every body is sent as one
 * string with Content-Length, so headers and body leave in a single write (etcd-wrapper reads fail when
 * they are split, docs/design-decisions.md "Wire rules etcd-wrapper depends on"). For a HEAD request Node
 * sends the headers alone.
 */

/**
 * Upstream writes `json.Marshal` output without setting a Content-Type, so Go sniffs
 * `text/plain; charset=utf-8`; and Marshal, unlike json.NewEncoder, adds no trailing newline.
 */
export const GO_SNIFFED_TEXT = 'text/plain; charset=utf-8';

/** The whole answer at once; headers set earlier on `res` (security headers) go along. */
export function send(res: ServerResponse, status: number, contentType: string, body: string, headers: OutgoingHttpHeaders = {}): void {
  res.writeHead(status, { ...headers, 'content-type': contentType, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  send(res, status, GO_SNIFFED_TEXT, JSON.stringify(value));
}

/** Go's `http.Error`: the message plus a newline, as text, not to be sniffed. */
export function sendError(res: ServerResponse, status: number, message: string): void {
  send(res, status, GO_SNIFFED_TEXT, `${message}\n`, { 'x-content-type-options': 'nosniff' });
}

const GO_TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const GO_FALSE = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

/** Go's `strconv.ParseBool`; undefined for anything it rejects. */
export function parseGoBool(value: string): boolean | undefined {
  if (GO_TRUE.has(value)) return true;
  if (GO_FALSE.has(value)) return false;
  return undefined;
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
