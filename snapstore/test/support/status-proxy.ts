/**
 * An HTTP proxy in front of a real store backend (emulator or wire fake) that answers every request whose
 * URL contains `marker` with an injected status, and forwards everything else unchanged (the Host header
 * too, so signatures stay valid). The body of an injected answer is plain text, so no vendor error code
 * decides the outcome: the status alone does, which is what the provider conformance case for failure
 * codes checks. `stall` instead makes matching requests hang as a store that accepted them and then went
 * silent: `'answer'` never answers, `'body'` forwards the request and sends the backend's status and headers
 * but holds the body (the socket stays open, no byte follows), which is what the stall case checks.
 * `releaseHeld()` forwards the requests `'answer'` holds, as a store whose answer comes late.
 *
 * Nothing it forwards reaches the backend after the test is done with it: `stop()` waits until the backend
 * has answered every request already on its way there. Backends are shared by the tests of a file, which count
 * the requests a step makes; a fetch the stall case had given up on once reached the GCS fake after the next
 * test had started counting (an extra `GET ?alt=media` beside its one upload).
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
  /**
   * Requests held by `stall` since the start: with `'answer'` counted as they arrive (never forwarded), with
   * `'body'` once the backend has answered and the client has the status and headers (the backend has seen it).
   */
  stalled: number;
  /** Client connections open now. */
  connections(): number;
  /** Forwards the requests held by `stall: 'answer'` (answered late) and stops holding new ones. */
  releaseHeld(): void;
  /** Drops the requests still held, waits until the backend has answered every forwarded one, then closes. */
  stop(): Promise<void>;
}

export async function startStatusProxy(target: string, marker: string): Promise<StatusProxy> {
  const t = new URL(target);
  /** Requests sent on to the backend and not yet closed, each with when the backend answered (or it failed). */
  const upstreams = new Map<http.ClientRequest, Promise<void>>();
  const track = (upstream: http.ClientRequest): void => {
    const settled = new Promise<void>((resolve) => {
      upstream.once('response', () => resolve());
      upstream.once('error', () => resolve());
      upstream.once('close', () => resolve());
    });
    upstreams.set(upstream, settled);
    upstream.once('close', () => upstreams.delete(upstream));
  };
  const held: (() => void)[] = [];
  const server = http.createServer((req, res) => {
    const matches = (req.url ?? '').includes(marker);
    if (state.stall !== undefined && matches) {
      req.resume();
      if (state.stall === 'answer') {
        state.stalled++;
        held.push(() => forward(req, res));
        return;
      }
      const upstream = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        res.flushHeaders();
        // Counted only now: a test that waits for the hold then knows the backend has the request.
        state.stalled++;
        // The body is read and dropped, so the backend finishes its answer (and records it) now; the client
        // gets nothing more until stop() cuts the connection.
        up.resume();
      });
      track(upstream);
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
    track(upstream);
    // A client that goes away in the middle of its body leaves a request the backend would wait on forever.
    req.once('close', () => {
      if (!req.complete) upstream.destroy();
    });
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
      held.splice(0);
      // No new connections from here; resolves once the last connection is gone.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.all(upstreams.values());
      for (const u of upstreams.keys()) u.destroy();
      server.closeAllConnections();
      await closed;
    },
  };
  return state;
}
