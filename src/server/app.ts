/**
 * The sidecar's HTTP API (upstream `pkg/server/httpAPI.go` `RegisterHandler`): health, on-demand
 * snapshots with delegation to the leading sidecar, the latest snapshot set, Prometheus metrics and,
 * when enabled, profiling. Routes accept every method, as Go's ServeMux does.
 */
import { EtcdbrError } from '../errors.js';
import { readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { fastify, LogController } from 'fastify';
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import { latestSet, snapshotToJSON } from '@etcdbrctl/snapstore';
import type { Snapshot } from '@etcdbrctl/snapstore';
import { ApiAuth } from './api-auth.js';
import type { CompactTarget } from '../cluster/on-demand.js';
import { registerProfilingRoutes } from './debug.js';
import type { Profiling } from './debug.js';
import { delegateToLeader } from './proxy.js';
import type { DelegationOptions, Refusal } from './proxy.js';
import { errorMessage, parseGoBool, queryParam, sendError, sendJson } from './respond.js';
import { httpStatusOf } from './error-status.js';
import type { HttpServerDeps, SnapshotterControl } from './types.js';

export interface HttpServer {
  app: FastifyInstance;
  /** Starts listening on `config.port` (0 = any free port). */
  listen(): Promise<{ port: number; url: string }>;
  /** Stops the server; open connections are closed at once, as upstream's `server.Close()`. */
  close(): Promise<void>;
}

/** `revision=<n>` or `keep=<n>` of `/maintenance/compact`, or what is wrong with them. */
function compactTarget(request: FastifyRequest): CompactTarget | string {
  const out: CompactTarget = {};
  for (const key of ['revision', 'keep'] as const) {
    const raw = queryParam(request, key);
    if (raw === '') continue;
    if (!/^\d+$/.test(raw)) return `invalid value ${JSON.stringify(raw)} for query parameter "${key}": want a non-negative integer`;
    out[key] = Number(raw);
  }
  return out;
}

/**
 * A follower asked for maintenance that it cannot forward (no leader, an unhealthy one, or the request was
 * forwarded already): 503, as the leader may be back in a moment.
 */
const NOT_LEADING: Refusal = { reason: 'this sidecar does not lead the cluster', status: 503 };

/** Upstream's `ReadHeaderTimeout` against slow-header clients. */
const READ_HEADER_TIMEOUT_MS = 5_000;
const DEFAULT_LEADER_HEALTH_TIMEOUT_MS = 5_000;

/** Fastify logs every request at info; the wrapper polls every second, so those lines go to debug. */
class QuietLogController extends LogController {
  override incomingRequest(request: FastifyRequest): void {
    request.log.debug({ method: request.method, url: request.url }, 'incoming request');
  }

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    if (error) request.log.error({ err: error, statusCode: reply.statusCode }, 'request errored');
    else request.log.debug({ statusCode: reply.statusCode, responseTime: reply.elapsedTime }, 'request completed');
  }
}

/** Routes on which upstream does not set the TLS security headers (promhttp and pprof handlers). */
function skipsSecurityHeaders(routeUrl: string | undefined): boolean {
  return routeUrl === undefined || routeUrl === '/metrics' || routeUrl.startsWith('/debug/');
}

async function readTlsFile(path: string, what: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    throw new EtcdbrError(
      'E_INVALID_INPUT',
      `cannot read the server TLS ${what} ${JSON.stringify(path)} (--server-${what}): ${errorMessage(err)}`,
    );
  }
}

export async function buildHttpServer(deps: HttpServerDeps): Promise<HttpServer> {
  const { config, logger, metrics, health } = deps;
  // Upstream: TLS only when both files are given.
  const tls = config.serverCert !== '' && config.serverKey !== '';

  const auth = new ApiAuth(deps.auth ?? { openProbes: true });
  const options: FastifyServerOptions & {
    https?: { cert: Buffer; key: Buffer; ca?: Buffer; requestCert?: boolean; rejectUnauthorized?: boolean };
  } = {
    loggerInstance: logger,
    logController: new QuietLogController(),
    // Upstream closes connections on stop instead of waiting for in-flight requests.
    forceCloseConnections: true,
  };
  if (tls) {
    options.https = {
      cert: await readTlsFile(config.serverCert, 'cert'),
      key: await readTlsFile(config.serverKey, 'key'),
      // Mutual TLS: ask every client for a certificate, but decide per request (the probes stay open), so a
      // client without one still completes the handshake and gets a 401 that says what is missing.
      ...(deps.auth?.clientCa ? { ca: deps.auth.clientCa, requestCert: true, rejectUnauthorized: false } : {}),
    };
    logger.info('TLS enabled: serving HTTPS');
  }
  // One instance type for callers, whether the underlying server is http or https.
  const app = fastify(options) as unknown as FastifyInstance;
  app.server.headersTimeout = READ_HEADER_TIMEOUT_MS;

  if (tls) {
    app.addHook('onRequest', async (request, reply) => {
      if (skipsSecurityHeaders(request.routeOptions.url)) return;
      reply.header('strict-transport-security', 'max-age=31536000');
      reply.header('content-security-policy', "default-src 'self'");
    });
  }

  if (auth.enabled) {
    app.addHook('onRequest', async (request, reply) => {
      const path = request.url.split('?', 1)[0] ?? request.url;
      const decision = await auth.decide(path, request.raw.socket, request.headers.authorization);
      if (decision.allowed) return;
      if (decision.status === 401) reply.header('www-authenticate', 'Bearer');
      logger.warn({ url: path, ip: request.ip, status: decision.status }, 'API request refused');
      return sendError(reply, decision.status, decision.message);
    });
  }

  app.setNotFoundHandler((_request, reply) => sendError(reply, 404, '404 page not found'));

  app.setErrorHandler((err: { statusCode?: number; message?: string }, request, reply) => {
    // fastify's own errors (a malformed body, …) carry their status; ours carry a code.
    const status = typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 600 ? err.statusCode : httpStatusOf(err);
    if (status >= 500) request.log.error({ err, url: request.url }, 'request failed');
    return sendError(reply, status, err.message ?? 'internal error');
  });

  app.all('/healthz', async (_request, reply) => sendJson(reply, health.status, { health: health.status === 200 }));

  app.all('/metrics', async (_request, reply) => {
    try {
      const text = await metrics.registry.metrics();
      return reply.code(200).header('content-type', metrics.registry.contentType).send(text);
    } catch (err) {
      return sendError(reply, 500, `collecting metrics failed: ${errorMessage(err)}`);
    }
  });

  const delegation: DelegationOptions = {
    leaderProxy: deps.leaderProxy,
    ca: tls ? deps.proxyCa : undefined,
    clientCert: options.https && deps.auth?.clientCa ? { cert: options.https.cert, key: options.https.key } : undefined,
    healthTimeoutMs: deps.leaderHealthTimeoutMs ?? DEFAULT_LEADER_HEALTH_TIMEOUT_MS,
    logger,
  };

  /**
   * Upstream's gate for every snapshot route: this sidecar's snapshotter if it runs; otherwise forward to
   * the leader when a store is configured (a follower), else 405.
   */
  const withSnapshotter = async (
    request: FastifyRequest,
    reply: FastifyReply,
    what: string,
    run: (ssr: SnapshotterControl) => Promise<FastifyReply>,
  ): Promise<FastifyReply> => {
    const ssr = deps.snapshots();
    if (ssr !== undefined) return run(ssr);
    if (deps.store() !== undefined) return delegateToLeader(request, reply, delegation);
    const message = `cannot serve ${what}: no snapshotter runs and no storage provider is configured`;
    logger.warn(message);
    return sendError(reply, 405, message);
  };

  // Snapshot and maintenance routes live in their own scope so that they can take any request body as raw
  // bytes (to forward it unchanged) without changing body parsing for routes added by extraRoutes.
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

    // Ours: maintenance on demand (DEP-05), run by the leading sidecar; a follower forwards the request
    // there, as snapshot requests are. Compaction discards history and a defragmentation blocks each member
    // for a while, so these routes exist only behind API authentication (checked here before forwarding,
    // and again by the leader).
    for (const operation of ['defrag', 'compact'] as const) {
      scope.all(`/maintenance/${operation}`, async (request, reply) => {
        if (!auth.enabled) {
          return sendError(reply, 403, 'maintenance routes need API authentication: configure --api-client-ca-file or --api-token-file');
        }
        const leading = deps.maintenance?.();
        if (!leading) return delegateToLeader(request, reply, delegation, NOT_LEADING);
        if (request.method === 'GET') return sendJson(reply, 200, leading.control.status()[operation] ?? null);
        if (request.method !== 'POST') return sendError(reply, 405, `use POST to start a ${operation}, GET for the last outcome`);
        try {
          let outcome;
          if (operation === 'defrag') outcome = await leading.control.defrag(leading.signal);
          else {
            const target = compactTarget(request);
            if (typeof target === 'string') return sendError(reply, 400, target);
            outcome = await leading.control.compact(target);
          }
          return sendJson(reply, outcome.state === 'succeeded' ? 200 : 500, outcome);
        } catch (err) {
          const status = httpStatusOf(err);
          return sendError(reply, status, status < 500 ? errorMessage(err) : `${operation} failed: ${errorMessage(err)}`);
        }
      });
    }

    scope.all('/snapshot/full', async (request, reply) => {
      const raw = queryParam(request, 'final');
      // Go treats an empty value as absent.
      const isFinal = raw === '' ? false : parseGoBool(raw);
      if (isFinal === undefined) {
        return sendError(
          reply,
          400,
          `invalid value ${JSON.stringify(raw)} for query parameter "final": want a boolean (1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)`,
        );
      }
      return withSnapshotter(request, reply, 'an out-of-schedule full snapshot', async (ssr) => {
        let snap: Snapshot;
        try {
          snap = await ssr.triggerFullSnapshot(isFinal);
        } catch (err) {
          logger.warn({ err }, 'skipped triggering an out-of-schedule full snapshot');
          return sendError(reply, 500, `out-of-schedule full snapshot failed: ${errorMessage(err)}`);
        }
        return sendJson(reply, 200, snapshotToJSON(snap));
      });
    });

    scope.all('/snapshot/delta', async (request, reply) =>
      withSnapshotter(request, reply, 'an out-of-schedule delta snapshot', async (ssr) => {
        let snap: Snapshot | undefined;
        try {
          snap = await ssr.triggerDeltaSnapshot();
        } catch (err) {
          logger.warn({ err }, 'skipped triggering an out-of-schedule delta snapshot');
          return sendError(reply, 500, `out-of-schedule delta snapshot failed: ${errorMessage(err)}`);
        }
        // No events: no object was written, and Go marshals the nil snapshot as `null`.
        return sendJson(reply, 200, snap === undefined ? null : snapshotToJSON(snap));
      }),
    );

    // Ours: scrubs the newest chain as `etcdbrctl verify` does and answers with its report (200 whether or
    // not the backups restore: `restorable` says; 500 when the store cannot be read). Any member with a
    // store can verify; a request during a scrub gets that scrub's report.
    scope.all('/snapshot/verify', async (_request, reply) => {
      const scrubber = deps.scrubber;
      if (scrubber === undefined) return sendError(reply, 405, 'cannot verify backups: no storage provider is configured');
      try {
        return sendJson(reply, 200, await scrubber.scrubNow());
      } catch (err) {
        logger.warn({ err }, 'backup verification could not read the store');
        return sendError(reply, 500, `backup verification failed: ${errorMessage(err)}`);
      }
    });

    scope.all('/snapshot/latest', async (request, reply) =>
      withSnapshotter(request, reply, 'the latest snapshot metadata', async () => {
        const store = deps.store();
        if (store === undefined) return sendError(reply, 500, 'cannot list snapshots: no storage provider is configured');
        let list: Snapshot[];
        try {
          list = await store.list();
        } catch (err) {
          logger.warn({ err }, 'unable to fetch the latest snapshots from the store');
          return sendError(reply, 500, `listing snapshots failed: ${errorMessage(err)}`);
        }
        const { full, deltas } = latestSet(list);
        // Upstream's GetLatestFullSnapshotAndDeltaSnapList updates these two gauges as a side effect.
        metrics.snapstoreLatestDeltasTotal.set(deltas.length);
        const first = deltas[0];
        const last = deltas[deltas.length - 1];
        metrics.snapstoreLatestDeltasRevisionsTotal.set(
          first !== undefined && last !== undefined ? last.lastRevision - first.startRevision : 0,
        );
        return sendJson(reply, 200, {
          fullSnapshot: full === undefined ? null : snapshotToJSON(full),
          // Go marshals an empty (nil) slice as null.
          deltaSnapshots: deltas.length === 0 ? null : deltas.map(snapshotToJSON),
        });
      }),
    );
  });

  let profiling: Profiling | undefined;
  if (config.enableProfiling) profiling = registerProfilingRoutes(app, logger);

  deps.extraRoutes?.(app);

  const listenOnce = async (): Promise<{ port: number; url: string }> => {
    const host = deps.host;
    let address: string;
    if (host !== undefined) {
      address = await app.listen({ port: config.port, host });
    } else {
      // Upstream listens on all interfaces; fall back to IPv4 where the kernel has no IPv6.
      try {
        address = await app.listen({ port: config.port, host: '::' });
      } catch (err) {
        const code = (err as { code?: unknown }).code;
        if (code !== 'EAFNOSUPPORT' && code !== 'EADDRNOTAVAIL') throw err;
        address = await app.listen({ port: config.port, host: '0.0.0.0' });
      }
    }
    const port = (app.server.address() as AddressInfo).port;
    const scheme = tls ? 'https' : 'http';
    const urlHost = host === undefined || host === '::' || host === '0.0.0.0' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
    logger.info({ address }, 'HTTP server listening');
    return { port, url: `${scheme}://${urlHost}:${port}` };
  };

  let closed: Promise<void> | undefined;
  return {
    app,
    async listen() {
      try {
        return await listenOnce();
      } catch (err) {
        throw listenError(err, config.port, deps.host);
      }
    },
    close() {
      closed ??= (async () => {
        profiling?.abortAll();
        await app.close();
      })();
      return closed;
    },
  };
}

/**
 * A failed listen named after the flag that chose the port: Node's `listen EADDRINUSE: address already in use
 * :::8080` names neither the flag nor what to do.
 */
function listenError(err: unknown, port: number, host: string | undefined): unknown {
  const code = (err as { code?: unknown }).code;
  const where = `${host ?? 'all interfaces'} port ${port}`;
  if (code === 'EADDRINUSE')
    return new EtcdbrError(
      'E_CONFLICT',
      `cannot listen on ${where}: another process uses it; choose another --server-port or stop that process`,
      {
        cause: err,
      },
    );
  if (code === 'EACCES')
    return new EtcdbrError(
      'E_INVALID_INPUT',
      `cannot listen on ${where}: permission denied (ports below 1024 need privileges); choose another --server-port`,
      {
        cause: err,
      },
    );
  return err;
}
