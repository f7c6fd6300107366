/**
 * An HTTP proxy in front of a real S3 server (s3rver) whose faults the test switches at run time:
 *
 * - `up`: every request is forwarded unchanged (the Host header too, so SigV4 signatures stay valid);
 * - `down`: an outage; connections in flight are cut and every new request has its connection destroyed,
 *   which clients see as a network error and retry;
 * - `deny-writes`: reads are forwarded, writes (PUT/POST/DELETE) get 403 AccessDenied, which S3 clients
 *   treat as final (a bucket policy or credentials without write permission look like this);
 * - `hold-writes`: reads are forwarded, writes wait unanswered (a store that is very slow to take an upload)
 *   and are forwarded as they are once the mode changes.
 *
 * The port stays the same across modes, so the client under test never needs to be reconfigured.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export type StoreFaultMode = 'up' | 'down' | 'deny-writes' | 'hold-writes';

export interface FaultyStoreProxy {
  endpoint: string;
  readonly mode: StoreFaultMode;
  setMode(mode: StoreFaultMode): void;
  /** Requests answered with a fault, per mode, since the start. */
  faulted: Record<Exclude<StoreFaultMode, 'up'>, number>;
  /** Write requests held now (`hold-writes`). */
  readonly held: number;
  stop(): Promise<void>;
}

const ACCESS_DENIED =
  '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied (test fault)</Message></Error>';

export async function startFaultyStoreProxy(target: string): Promise<FaultyStoreProxy> {
  const t = new URL(target);
  let mode: StoreFaultMode = 'up';
  const faulted = { down: 0, 'deny-writes': 0, 'hold-writes': 0 };
  const upstreams = new Set<http.ClientRequest>();
  let held: Array<() => void> = [];

  const server = http.createServer((req, res) => {
    if (mode === 'hold-writes' && req.method !== 'GET' && req.method !== 'HEAD') {
      faulted['hold-writes']++;
      // The body stays unread (TCP pushes back on the client) until the request is forwarded.
      req.pause();
      held.push(() => forward(req, res));
      return;
    }
    forward(req, res);
  });

  function forward(req: http.IncomingMessage, res: http.ServerResponse): void {
    if (mode === 'down') {
      faulted.down++;
      req.socket.destroy();
      return;
    }
    if (mode === 'deny-writes' && req.method !== 'GET' && req.method !== 'HEAD') {
      faulted['deny-writes']++;
      // Drain the body first so the client reads the answer instead of an EPIPE.
      req.resume();
      req.on('end', () => {
        res.writeHead(403, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(ACCESS_DENIED) });
        res.end(ACCESS_DENIED);
      });
      return;
    }
    const upstream = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstreams.add(upstream);
    upstream.on('close', () => upstreams.delete(upstream));
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.destroy();
    });
    req.on('error', () => upstream.destroy());
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  }
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    endpoint: `http://127.0.0.1:${port}`,
    get mode() {
      return mode;
    },
    get held() {
      return held.length;
    },
    setMode(next) {
      mode = next;
      if (next !== 'hold-writes') {
        const release = held;
        held = [];
        for (const r of release) r();
      }
      if (next === 'down') {
        // An outage also breaks what is in flight and the idle keep-alive connections.
        for (const u of upstreams) u.destroy();
        server.closeAllConnections();
      }
    },
    faulted,
    async stop() {
      for (const u of upstreams) u.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
