/**
 * Leader delegation (upstream `delegateReqToLeader`): a sidecar without a snapshotter forwards snapshot
 * requests to the leading sidecar, after checking that the leader's `/healthz` says `{"health":true}`.
 * Maintenance requests (ours) go the same way from a follower.
 */
import { EtcdbrError } from '../errors.js';
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders } from 'node:http';
import type { RequestOptions as HttpsRequestOptions } from 'node:https';
import { pipeline } from 'node:stream/promises';
import { nodeHttp, nodeHttps } from '@etcdbrctl/snapstore';
import type { Logger } from '../log.js';
import type { Exchange } from './http-router.js';
import { errorMessage, sendError } from './respond.js';
import type { LeaderProxy } from './types.js';

export interface DelegationOptions {
  leaderProxy: LeaderProxy | undefined;
  /** Trusted CA for https leaders; undefined = Node's default roots. */
  ca: Buffer | undefined;
  /**
   * This sidecar's own certificate and key, presented to an https leader that requires client certificates
   * (`--api-client-ca-file`): the followers' forwarded requests then pass the leader's mutual TLS.
   */
  clientCert?: { cert: Buffer; key: Buffer } | undefined;
  healthTimeoutMs: number;
  logger: Logger;
}

/**
 * Set on forwarded requests. A sidecar that receives a forwarded request and cannot serve it either
 * (no snapshotter, not leading) refuses it instead of forwarding again, so a stale leader view can never
 * make requests loop.
 */
export const FORWARDED_HEADER = 'x-etcdbrctl-forwarded';

/** Proxied answers up to this size are buffered and sent in one write, like our own answers. */
const BUFFER_LIMIT = 1024 * 1024;

/** Longest request body forwarded to the leader (the API's requests carry none). */
const REQUEST_BODY_LIMIT = 1024 * 1024;

/** Longest `/healthz` body we read from a leader; the real one is 16 bytes. */
const HEALTH_BODY_LIMIT = 64 * 1024;

/** RFC 9110 §7.6.1 hop-by-hop fields, plus those Go's ReverseProxy also drops. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

function withoutHopByHop(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const listed = new Set(
    String(headers['connection'] ?? '')
      .split(',')
      .map((t) => t.trim().toLowerCase())
      .filter((t) => t !== ''),
  );
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || listed.has(name)) continue;
    out[name] = value;
  }
  return out;
}

function trimBase(base: string): string {
  return base.replace(/\/+$/, '');
}

function requestFn(url: URL): ReturnType<typeof nodeHttp>['request'] {
  if (url.protocol === 'http:') return nodeHttp().request;
  if (url.protocol === 'https:') return nodeHttps().request;
  throw new EtcdbrError('E_INVALID_INPUT', `unsupported scheme ${JSON.stringify(url.protocol)} in leader URL ${url.href}`);
}

function tlsOptions(url: URL, ca: Buffer | undefined, client?: { cert: Buffer; key: Buffer }): HttpsRequestOptions {
  if (url.protocol !== 'https:') return {};
  return { ...(ca !== undefined ? { ca } : {}), ...(client ? { cert: client.cert, key: client.key } : {}) };
}

async function readLimited(res: IncomingMessage, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) {
      res.destroy();
      throw new EtcdbrError('E_FAILED', `response body larger than ${limit} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/**
 * GET `<base>/healthz` and read its JSON `health` field (upstream `IsBackupRestoreHealthy`, which looks at
 * the body, not the status code). Rejects on network errors, timeout or a body that is not that JSON.
 */
export async function isLeaderHealthy(
  base: string,
  ca: Buffer | undefined,
  timeoutMs: number,
  client?: { cert: Buffer; key: Buffer },
  authorization?: string,
): Promise<boolean> {
  const url = new URL(`${trimBase(base)}/healthz`);
  const request = requestFn(url);
  const signal = AbortSignal.timeout(timeoutMs);
  // The caller's bearer token goes along: with --api-open-probes=false the leader's /healthz wants it too.
  const headers = authorization !== undefined ? { authorization } : {};
  const body = await new Promise<Buffer>((resolve, reject) => {
    const req = request(url, { method: 'GET', agent: false, signal, headers, ...tlsOptions(url, ca, client) }, (res) => {
      readLimited(res, HEALTH_BODY_LIMIT).then(resolve, reject);
    });
    req.on('error', (err) => reject(signal.aborted ? new EtcdbrError('E_UNAVAILABLE', `no answer within ${timeoutMs} ms`) : err));
    req.end();
  });
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw new EtcdbrError('E_FAILED', `/healthz answered ${JSON.stringify(body.toString('utf8').slice(0, 200))}, not JSON`);
  }
  if (typeof parsed !== 'object' || parsed === null) throw new EtcdbrError('E_FAILED', '/healthz answered JSON that is not an object');
  return (parsed as { health?: unknown }).health === true;
}

/** Why this sidecar does not serve the request itself, and how it answers when it cannot forward it either. */
export interface Refusal {
  /** Starts every message, e.g. "no snapshotter runs in this sidecar". */
  reason: string;
  status: number;
}

/**
 * Snapshot routes of a sidecar with a store but no snapshotter: a failure before forwarding (etcd or the
 * leading sidecar cannot be reached, no leader, an unhealthy leader, a request forwarded already) is a 503,
 * something to retry. Upstream answers 405 here too, the answer that means "no store" (app.ts), so an
 * operator whose etcd was down was told the sidecar had no store; its clients only look for a 200.
 */
const NO_SNAPSHOTTER: Refusal = { reason: 'no snapshotter runs in this sidecar', status: 503 };

/** Forwards the request to the leader if it is healthy; a failure before forwarding answers `why.status`. */
export async function delegateToLeader(x: Exchange, opts: DelegationOptions, why: Refusal = NO_SNAPSHOTTER): Promise<void> {
  const request = x.req;
  const refuse = (message: string): void => {
    opts.logger.warn({ url: x.url }, message);
    sendError(x.res, why.status, message);
  };
  if (request.headers[FORWARDED_HEADER] !== undefined) {
    return refuse(`${why.reason} and the request was already forwarded once; not forwarding again`);
  }
  if (opts.leaderProxy === undefined) {
    return refuse(`${why.reason} and no way to find the leading sidecar is configured`);
  }
  let leader: string | undefined;
  try {
    leader = await opts.leaderProxy.findLeaderUrl();
  } catch (err) {
    return refuse(`${why.reason} and the leading sidecar could not be found: ${errorMessage(err)}`);
  }
  if (leader === undefined) {
    return refuse(`${why.reason} and there is no leading sidecar right now`);
  }
  try {
    if (!(await isLeaderHealthy(leader, opts.ca, opts.healthTimeoutMs, opts.clientCert, request.headers.authorization))) {
      return refuse(`${why.reason} and the leading sidecar ${leader} is not healthy`);
    }
  } catch (err) {
    return refuse(`${why.reason} and the health of the leading sidecar ${leader} is unknown: ${errorMessage(err)}`);
  }
  opts.logger.info({ leader, url: x.url }, 'forwarding the request to the leading backup-restore sidecar');
  return forward(x, leader, opts);
}

/**
 * The request body to forward: undefined when the request has none or is a GET or HEAD (Go's ReverseProxy
 * would pass it on; nothing in the API sends one).
 */
async function requestBody(request: IncomingMessage): Promise<Buffer | undefined> {
  if (request.method === 'GET' || request.method === 'HEAD') return undefined;
  if (request.headers['content-length'] === undefined && request.headers['transfer-encoding'] === undefined) return undefined;
  const tooLarge = () => new EtcdbrError('E_INVALID_INPUT', `the request body is larger than ${REQUEST_BODY_LIMIT} bytes`);
  if (Number(request.headers['content-length']) > REQUEST_BODY_LIMIT) throw tooLarge();
  // Read to the end even past the limit: the connection stays usable for the 413.
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size <= REQUEST_BODY_LIMIT) chunks.push(chunk);
  }
  if (size > REQUEST_BODY_LIMIT) throw tooLarge();
  return Buffer.concat(chunks);
}

/**
 * Reverse-proxies the request (method, path, query, body) and relays the answer. A failure to reach the
 * leader is a 502, as Go's ReverseProxy answers; a failure after the answer started aborts the connection.
 */
async function forward(x: Exchange, leader: string, opts: DelegationOptions): Promise<void> {
  const { req: request, res: reply } = x;
  const target = new URL(`${trimBase(leader)}${x.url}`);
  const headers = withoutHopByHop(request.headers);
  delete headers['host'];
  const prior = request.headers['x-forwarded-for'];
  headers['x-forwarded-for'] = prior === undefined ? x.ip : `${String(prior)}, ${x.ip}`;
  headers[FORWARDED_HEADER] = '1';
  let body: Buffer | undefined;
  try {
    body = await requestBody(request);
  } catch (err) {
    sendError(reply, 413, `not forwarded to the leading sidecar: ${errorMessage(err)}`);
    return;
  }
  if (body !== undefined) headers['content-length'] = String(body.length);
  else delete headers['content-length'];

  const upstream = requestFn(target)(target, {
    method: request.method,
    headers,
    agent: false,
    ...tlsOptions(target, opts.ca, opts.clientCert),
  });
  // A client that goes away must not leave a request to the leader behind.
  const onClientGone = (): void => {
    if (!reply.writableFinished) upstream.destroy();
  };
  reply.once('close', onClientGone);

  let res: IncomingMessage;
  try {
    res = await new Promise<IncomingMessage>((resolve, reject) => {
      upstream.once('response', resolve);
      upstream.once('error', reject);
      upstream.end(body);
    });
  } catch (err) {
    reply.off('close', onClientGone);
    const message = `forwarding the request to the leading sidecar ${leader} failed: ${errorMessage(err)}`;
    opts.logger.warn({ url: x.url }, message);
    sendError(reply, 502, message);
    return;
  }

  // Raw writes from here on: the leader's headers and bytes go out unchanged, plus ours (security headers).
  const outHeaders: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) outHeaders[name] = value;
  Object.assign(outHeaders, withoutHopByHop(res.headers));
  const status = res.statusCode ?? 502;
  const length = Number(res.headers['content-length']);
  try {
    if (Number.isSafeInteger(length) && length <= BUFFER_LIMIT) {
      const buffered = await readLimited(res, BUFFER_LIMIT);
      reply.writeHead(status, outHeaders);
      reply.end(request.method === 'HEAD' ? undefined : buffered);
    } else {
      reply.writeHead(status, outHeaders);
      await pipeline(res, reply);
    }
  } catch (err) {
    opts.logger.warn({ url: x.url, err }, "relaying the leading sidecar's answer failed");
    if (!reply.headersSent) {
      reply.writeHead(502, { 'content-type': 'text/plain; charset=utf-8' });
      reply.end(`relaying the answer of the leading sidecar ${leader} failed: ${errorMessage(err)}\n`);
    } else {
      reply.destroy();
    }
  } finally {
    reply.off('close', onClientGone);
  }
}
