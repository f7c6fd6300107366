/**
 * An HTTP proxy in front of a real store backend (emulator or wire fake) that answers every request whose
 * URL contains `marker` with an injected status, and forwards everything else unchanged (the Host header
 * too, so signatures stay valid). The body of an injected answer is plain text, so no vendor error code
 * decides the outcome: the status alone does, which is what the provider conformance case for failure
 * codes checks. `stall` instead makes matching requests hang as a store that accepted them and then went
 * silent: `'answer'` never answers, `'body'` forwards the request and sends the backend's status and headers
 * but holds the body (the socket stays open, no byte follows), which is what the stall case checks.
 * `releaseHeld()` forwards the requests `'answer'` holds, as a store whose answer comes late.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface StatusProxy {
  /** `http://127.0.0.1:PORT`, plus the target's path (e.g. an Azurite account) when it has one. */
  url: string;
  /** The status injected for matching requests; undefined forwards them too. */
  status: number | undefined;
  /** Requests answered with an injected status since the start. */
  injected: number;
  /** Holds matching requests instead (wins over `status`); undefined forwards them. */
  stall: 'answer' | 'body' | undefined;
  /** Requests held by `stall` since the start. */
  stalled: number;
  /** Client connections open now. */
  connections(): number;
  /** Forwards the requests held by `stall: 'answer'` (answered late) and stops holding new ones. */
  releaseHeld(): void;
  stop(): Promise<void>;
}

export async function startStatusProxy(target: string, marker: string): Promise<StatusProxy> {
  const t = new URL(target);
  const upstreams = new Set<http.ClientRequest>();
  const held: (() => void)[] = [];
  const server = http.createServer((req, res) => {
    const matches = (req.url ?? '').includes(marker);
    if (state.stall !== undefined && matches) {
      state.stalled++;
      req.resume();
      if (state.stall === 'answer') {
        held.push(() => forward(req, res));
        return;
      }
      const upstream = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        res.flushHeaders();
        // The body is read and dropped, so the backend finishes its answer (and records it) now; the client
        // gets nothing more until stop() cuts the connection.
        up.resume();
      });
      upstreams.add(upstream);
      upstream.on('close', () => upstreams.delete(upstream));
      upstream.on('error', () => res.destroy());
      upstream.end();
      return;
    }
    if (state.status !== undefined && matches) {
      state.injected++;
      const body = `injected fault ${state.status}`;
      // Drain the body first so the client reads the answer instead of an EPIPE.
      req.resume();
      req.on('end', () => {
        res.writeHead(state.status ?? 500, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
      return;
    }
    forward(req, res);
  });
  const forward = (req: http.IncomingMessage, res: http.ServerResponse): void => {
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
    // A held request's body was already drained (and is empty for the GETs held here).
    if (req.readableEnded) upstream.end();
    else req.pipe(upstream);
  };
  let open = 0;
  server.on('connection', (socket) => {
    open++;
    socket.once('close', () => open--);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const path = t.pathname === '/' ? '' : t.pathname.replace(/\/$/, '');
  const state: StatusProxy = {
    url: `http://127.0.0.1:${port}${path}`,
    status: undefined,
    injected: 0,
    stall: undefined,
    stalled: 0,
    connections: () => open,
    releaseHeld() {
      state.stall = undefined;
      for (const go of held.splice(0)) go();
    },
    async stop() {
      for (const u of upstreams) u.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return state;
}
