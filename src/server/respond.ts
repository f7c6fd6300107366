import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * Response helpers that reproduce what upstream's Go handlers put on the wire. Every body is sent as one
 * string with Content-Length, so headers and body leave in a single write (etcd-wrapper reads fail when
 * they are split, docs/design-decisions.md "Wire rules etcd-wrapper depends on").
 */

/**
 * Upstream writes `json.Marshal` output without setting a Content-Type, so Go sniffs
 * `text/plain; charset=utf-8`; and Marshal, unlike json.NewEncoder, adds no trailing newline.
 */
export const GO_SNIFFED_TEXT = 'text/plain; charset=utf-8';

export function sendJson(reply: FastifyReply, status: number, value: unknown): FastifyReply {
  return reply.code(status).header('content-type', GO_SNIFFED_TEXT).send(JSON.stringify(value));
}

/** Go's `http.Error`: the message plus a newline, as text, not to be sniffed. */
export function sendError(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.code(status).header('content-type', GO_SNIFFED_TEXT).header('x-content-type-options', 'nosniff').send(`${message}\n`);
}

/**
 * The first value of a query parameter, '' when absent (Go's `URL.Query().Get`). Parsed from the raw
 * URL so repeated keys behave as in Go and not as fastify's array form.
 */
export function queryParam(request: FastifyRequest, name: string): string {
  const url = new URL(request.raw.url ?? '/', 'http://localhost');
  return url.searchParams.get(name) ?? '';
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
