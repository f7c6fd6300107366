/**
 * The sidecar's HTTP API (upstream `pkg/server/httpAPI.go` `RegisterHandler`): one server (TLS, API
 * authentication, security headers, typed errors to statuses, listen and close) and the route families, each in
 * its module: probes and metrics (probe-routes.ts), snapshots (snapshot-routes.ts), maintenance
 * (maintenance-routes.ts), profiling when enabled (debug.ts), and what the caller adds (the etcd-wrapper's
 * init-routes.ts). Routes accept every method, as Go's ServeMux does.
 */
import { EtcdbrError } from '../errors.js';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { nodeHttp, nodeHttps } from '@etcdbrctl/snapstore';
import { ApiAuth } from './api-auth.js';
import { registerProfilingRoutes } from './debug.js';
import type { Profiling } from './debug.js';
import type { DelegationOptions } from './proxy.js';
import { Exchange, Routes, requestPath } from './http-router.js';
import { errorMessage, sendError } from './respond.js';
import { httpStatusOf } from './error-status.js';
import { registerMaintenanceRoutes } from './maintenance-routes.js';
import { registerProbeRoutes } from './probe-routes.js';
import { registerSnapshotRoutes } from './snapshot-routes.js';
import type { HttpServerDeps } from './types.js';

export interface HttpServer {
  /** Starts listening on `config.port` (0 = any free port). */
  listen(): Promise<{ port: number; url: string }>;
  /** Stops the server; open connections are closed at once, as upstream's `server.Close()`. */
  close(): Promise<void>;
}

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
  const { config, logger } = deps;
  // Upstream: TLS only when both files are given.
  const tls = config.serverCert !== '' && config.serverKey !== '';

  const auth = new ApiAuth(deps.auth ?? { openProbes: true });
  let identity: { cert: Buffer; key: Buffer } | undefined;
  if (tls) {
    identity = { cert: await readTlsFile(config.serverCert, 'cert'), key: await readTlsFile(config.serverKey, 'key') };
    logger.info('TLS enabled: serving HTTPS');
  }
  const routes = new Routes();

  const delegation: DelegationOptions = {
    leaderProxy: deps.leaderProxy,
    ca: tls ? deps.proxyCa : undefined,
    clientCert: identity && deps.auth?.clientCa ? identity : undefined,
    healthTimeoutMs: deps.leaderHealthTimeoutMs ?? DEFAULT_LEADER_HEALTH_TIMEOUT_MS,
    logger,
  };
  registerProbeRoutes(routes, deps);
  registerMaintenanceRoutes(routes, deps, auth, delegation);
  registerSnapshotRoutes(routes, deps, delegation);

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
    ? nodeHttps().createServer(
        {
          ...identity,
          // Mutual TLS: ask every client for a certificate, but decide per request (the probes stay open), so a
          // client without one still completes the handshake and gets a 401 that says what is missing.
          ...(deps.auth?.clientCa ? { ca: deps.auth.clientCa, requestCert: true, rejectUnauthorized: false } : {}),
        },
        listener,
      )
    : nodeHttp().createServer(listener);
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
