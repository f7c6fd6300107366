/**
 * The sidecar's HTTP API (upstream `pkg/server/httpAPI.go` `RegisterHandler`): health, on-demand
 * snapshots with delegation to the leading sidecar, the latest snapshot set, Prometheus metrics and,
 * when enabled, profiling. Routes accept every method, as Go's ServeMux does.
 */
import { EtcdbrError } from '../errors.js';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { latestSet, nodeHttp, nodeHttps, snapshotToJSON } from '@etcdbrctl/snapstore';
import type { Snapshot } from '@etcdbrctl/snapstore';
import { ApiAuth } from './api-auth.js';
import type { CompactTarget } from '../cluster/on-demand.js';
import { registerProfilingRoutes } from './debug.js';
import type { Profiling } from './debug.js';
import { delegateToLeader } from './proxy.js';
import type { DelegationOptions, Refusal } from './proxy.js';
import { Exchange, Routes, requestPath } from './http-router.js';
import { errorMessage, parseGoBool, send, sendError, sendJson } from './respond.js';
import { httpStatusOf } from './error-status.js';
import type { HttpServerDeps, SnapshotterControl } from './types.js';

export interface HttpServer {
  /** Starts listening on `config.port` (0 = any free port). */
  listen(): Promise<{ port: number; url: string }>;
  /** Stops the server; open connections are closed at once, as upstream's `server.Close()`. */
  close(): Promise<void>;
}

/** `revision=<n>` or `keep=<n>` of `/maintenance/compact`, or what is wrong with them. */
function compactTarget(x: Exchange): CompactTarget | string {
  const out: CompactTarget = {};
  for (const key of ['revision', 'keep'] as const) {
    const raw = x.query(key);
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
/** How long an idle keep-alive connection stays open: longer than the wrapper's and Prometheus's poll periods. */
const KEEP_ALIVE_TIMEOUT_MS = 72_000;
const DEFAULT_LEADER_HEALTH_TIMEOUT_MS = 5_000;

/** Routes on which upstream does not set the TLS security headers (promhttp and pprof handlers); also not on a 404. */
function skipsSecurityHeaders(path: string, found: boolean): boolean {
  return !found || path === '/metrics' || path.startsWith('/debug/');
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
  let identity: { cert: Buffer; key: Buffer } | undefined;
  if (tls) {
    identity = { cert: await readTlsFile(config.serverCert, 'cert'), key: await readTlsFile(config.serverKey, 'key') };
    logger.info('TLS enabled: serving HTTPS');
  }
  const routes = new Routes();

  routes.all('/healthz', async (x) => sendJson(x.res, health.status, { health: health.status === 200 }));

  routes.all('/metrics', async (x) => {
    let text: string;
    try {
      text = await metrics.registry.metrics();
    } catch (err) {
      sendError(x.res, 500, `collecting metrics failed: ${errorMessage(err)}`);
      return;
    }
    send(x.res, 200, metrics.registry.contentType, text);
  });

  const delegation: DelegationOptions = {
    leaderProxy: deps.leaderProxy,
    ca: tls ? deps.proxyCa : undefined,
    clientCert: identity && deps.auth?.clientCa ? identity : undefined,
    healthTimeoutMs: deps.leaderHealthTimeoutMs ?? DEFAULT_LEADER_HEALTH_TIMEOUT_MS,
    logger,
  };

  /**
   * Upstream's gate for every snapshot route: this sidecar's snapshotter if it runs; otherwise forward to
   * the leader when a store is configured (a follower; 503 when it cannot, proxy.ts), else 405 (no store).
   */
  const withSnapshotter = async (x: Exchange, what: string, run: (ssr: SnapshotterControl) => Promise<void>): Promise<void> => {
    const ssr = deps.snapshots();
    if (ssr !== undefined) return run(ssr);
    if (deps.store() !== undefined) return delegateToLeader(x, delegation);
    const message = `cannot serve ${what}: no snapshotter runs and no storage provider is configured`;
    logger.warn(message);
    sendError(x.res, 405, message);
  };

  // Ours: maintenance on demand (DEP-05), run by the leading sidecar; a follower forwards the request there,
  // as snapshot requests are. Compaction discards history and a defragmentation blocks each member for a
  // while, so these routes exist only behind API authentication (checked here before forwarding, and again
  // by the leader).
  for (const operation of ['defrag', 'compact'] as const) {
    routes.all(`/maintenance/${operation}`, async (x) => {
      if (!auth.enabled) {
        sendError(x.res, 403, 'maintenance routes need API authentication: configure --api-client-ca-file or --api-token-file');
        return;
      }
      const leading = deps.maintenance?.();
      if (!leading) return delegateToLeader(x, delegation, NOT_LEADING);
      if (x.method === 'GET') return sendJson(x.res, 200, leading.control.status()[operation] ?? null);
      if (x.method !== 'POST') return sendError(x.res, 405, `use POST to start a ${operation}, GET for the last outcome`);
      try {
        let outcome;
        if (operation === 'defrag') outcome = await leading.control.defrag(leading.signal);
        else {
          const target = compactTarget(x);
          if (typeof target === 'string') return sendError(x.res, 400, target);
          outcome = await leading.control.compact(target);
        }
        sendJson(x.res, outcome.state === 'succeeded' ? 200 : 500, outcome);
      } catch (err) {
        const status = httpStatusOf(err);
        sendError(x.res, status, status < 500 ? errorMessage(err) : `${operation} failed: ${errorMessage(err)}`);
      }
    });
  }

  routes.all('/snapshot/full', async (x) => {
    const raw = x.query('final');
    // Go treats an empty value as absent.
    const isFinal = raw === '' ? false : parseGoBool(raw);
    if (isFinal === undefined) {
      sendError(
        x.res,
        400,
        `invalid value ${JSON.stringify(raw)} for query parameter "final": want a boolean (1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)`,
      );
      return;
    }
    return withSnapshotter(x, 'an out-of-schedule full snapshot', async (ssr) => {
      let snap: Snapshot;
      try {
        snap = await ssr.triggerFullSnapshot(isFinal);
      } catch (err) {
        logger.warn({ err }, 'skipped triggering an out-of-schedule full snapshot');
        sendError(x.res, 500, `out-of-schedule full snapshot failed: ${errorMessage(err)}`);
        return;
      }
      sendJson(x.res, 200, snapshotToJSON(snap));
    });
  });

  routes.all('/snapshot/delta', async (x) =>
    withSnapshotter(x, 'an out-of-schedule delta snapshot', async (ssr) => {
      let snap: Snapshot | undefined;
      try {
        snap = await ssr.triggerDeltaSnapshot();
      } catch (err) {
        logger.warn({ err }, 'skipped triggering an out-of-schedule delta snapshot');
        sendError(x.res, 500, `out-of-schedule delta snapshot failed: ${errorMessage(err)}`);
        return;
      }
      // No events: no object was written, and Go marshals the nil snapshot as `null`.
      sendJson(x.res, 200, snap === undefined ? null : snapshotToJSON(snap));
    }),
  );

  // Ours: scrubs the newest chain as `etcdbrctl verify` does and answers with its report (200 whether or not
  // the backups restore: `restorable` says; 500 when the store cannot be read). Any member with a store can
  // verify; a request during a scrub gets that scrub's report.
  routes.all('/snapshot/verify', async (x) => {
    const scrubber = deps.scrubber;
    if (scrubber === undefined) return sendError(x.res, 405, 'cannot verify backups: no storage provider is configured');
    let report;
    try {
      report = await scrubber.scrubNow();
    } catch (err) {
      logger.warn({ err }, 'backup verification could not read the store');
      sendError(x.res, 500, `backup verification failed: ${errorMessage(err)}`);
      return;
    }
    sendJson(x.res, 200, report);
  });

  routes.all('/snapshot/latest', async (x) =>
    withSnapshotter(x, 'the latest snapshot metadata', async () => {
      const store = deps.store();
      if (store === undefined) return sendError(x.res, 500, 'cannot list snapshots: no storage provider is configured');
      let list: Snapshot[];
      try {
        list = await store.list();
      } catch (err) {
        logger.warn({ err }, 'unable to fetch the latest snapshots from the store');
        sendError(x.res, 500, `listing snapshots failed: ${errorMessage(err)}`);
        return;
      }
      const { full, deltas } = latestSet(list);
      // Upstream's GetLatestFullSnapshotAndDeltaSnapList updates these two gauges as a side effect.
      metrics.snapstoreLatestDeltasTotal.set(deltas.length);
      const first = deltas[0];
      const last = deltas[deltas.length - 1];
      metrics.snapstoreLatestDeltasRevisionsTotal.set(
        first !== undefined && last !== undefined ? last.lastRevision - first.startRevision : 0,
      );
      sendJson(x.res, 200, {
        fullSnapshot: full === undefined ? null : snapshotToJSON(full),
        // Go marshals an empty (nil) slice as null.
        deltaSnapshots: deltas.length === 0 ? null : deltas.map(snapshotToJSON),
      });
    }),
  );

  let profiling: Profiling | undefined;
  if (config.enableProfiling) profiling = registerProfilingRoutes(routes, logger);

  deps.extraRoutes?.(routes);

  /** Every request: security headers, authentication, the route, and a typed error turned into its status. */
  const serve = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const started = performance.now();
    const url = req.url ?? '/';
    // The wrapper polls every second: these lines stay at debug.
    logger.debug({ method: req.method, url }, 'incoming request');
    res.once('finish', () => logger.debug({ statusCode: res.statusCode, responseTime: performance.now() - started }, 'request completed'));
    const path = requestPath(url);
    if (path === undefined) return sendError(res, 400, `invalid URL escape in ${JSON.stringify(url.split('?', 1)[0])}`);
    const handler = routes.find(path);
    try {
      if (tls && !skipsSecurityHeaders(path, handler !== undefined)) {
        res.setHeader('strict-transport-security', 'max-age=31536000');
        res.setHeader('content-security-policy', "default-src 'self'");
      }
      if (auth.enabled) {
        // Decided on the path as sent, not decoded: an escaped probe path is not an open probe.
        const rawPath = url.split('?', 1)[0] ?? url;
        const decision = await auth.decide(rawPath, req.socket, req.headers.authorization);
        if (!decision.allowed) {
          if (decision.status === 401) res.setHeader('www-authenticate', 'Bearer');
          logger.warn({ url: rawPath, ip: req.socket.remoteAddress, status: decision.status }, 'API request refused');
          return sendError(res, decision.status, decision.message);
        }
      }
      if (handler === undefined) return sendError(res, 404, '404 page not found');
      await handler(new Exchange(req, res, path));
    } catch (err) {
      const status = httpStatusOf(err);
      if (status >= 500) logger.error({ err, url }, 'request failed');
      if (!res.headersSent) sendError(res, status, errorMessage(err));
      else res.destroy();
    }
  };
  const listener = (req: IncomingMessage, res: ServerResponse): void => void serve(req, res);
  const server: Server = identity
    ? nodeHttps.createServer(
        {
          ...identity,
          // Mutual TLS: ask every client for a certificate, but decide per request (the probes stay open), so a
          // client without one still completes the handshake and gets a 401 that says what is missing.
          ...(deps.auth?.clientCa ? { ca: deps.auth.clientCa, requestCert: true, rejectUnauthorized: false } : {}),
        },
        listener,
      )
    : nodeHttp.createServer(listener);
  server.headersTimeout = READ_HEADER_TIMEOUT_MS;
  // No deadline for a whole request: a full snapshot on demand answers when it is stored.
  server.requestTimeout = 0;
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;

  const listenOn = (host: string): Promise<void> =>
    new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      server.once('error', onError);
      server.listen({ port: config.port, host }, () => {
        server.off('error', onError);
        resolve();
      });
    });

  const listenOnce = async (): Promise<{ port: number; url: string }> => {
    const host = deps.host;
    let bound: string;
    if (host !== undefined) {
      await listenOn(host);
      bound = host;
    } else {
      // Upstream listens on all interfaces; fall back to IPv4 where the kernel has no IPv6.
      try {
        await listenOn('::');
        bound = '::';
      } catch (err) {
        const code = (err as { code?: unknown }).code;
        if (code !== 'EAFNOSUPPORT' && code !== 'EADDRNOTAVAIL') throw err;
        await listenOn('0.0.0.0');
        bound = '0.0.0.0';
      }
    }
    const port = (server.address() as AddressInfo).port;
    const scheme = tls ? 'https' : 'http';
    const urlHost = host === undefined || host === '::' || host === '0.0.0.0' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
    logger.info({ address: `${scheme}://${bound.includes(':') ? `[${bound}]` : bound}:${port}` }, 'HTTP server listening');
    return { port, url: `${scheme}://${urlHost}:${port}` };
  };

  let closed: Promise<void> | undefined;
  return {
    async listen() {
      try {
        return await listenOnce();
      } catch (err) {
        throw listenError(err, config.port, deps.host);
      }
    },
    close() {
      closed ??= (async () => {
        await profiling?.abortAll();
        if (!server.listening) return;
        const done = new Promise<void>((resolve) => server.close(() => resolve()));
        // Upstream closes connections on stop instead of waiting for in-flight requests.
        server.closeAllConnections();
        await done;
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
