/**
 * The soak's fault proxy in front of s3rver, on a loopback port of its own. Faults switch on and off at run
 * time and overlap:
 *
 * - refuse: the port stops listening (clients get ECONNREFUSED), then listens again on the same port;
 * - reset: each request is cut with a TCP reset, half of them before the upstream sees the body, half after
 *   it answered (the object may be stored while the client sees a failure);
 * - stall: requests are accepted and never answered (a blackhole) until the fault ends, then cut;
 * - latency: every request waits `amount` ms before it is forwarded;
 * - 5xx: the next `amount` requests are answered 500 InternalError or 503 SlowDown.
 *
 * Forwarding keeps the Host header, so SigV4 signatures stay valid.
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { StoreFaults } from './nemesis.js';
import type { Fault } from './schedule.js';

export interface FaultProxy extends StoreFaults {
  endpoint: string;
  /** Requests the proxy answered with a fault, by kind. */
  faulted: Record<'refused' | 'reset' | 'stalled' | 'delayed' | 'errors', number>;
  stop(): Promise<void>;
}

const s3Error = (code: string) =>
  `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>soak fault</Message><RequestId>soak</RequestId></Error>`;

export async function startFaultProxy(target: string): Promise<FaultProxy> {
  const t = new URL(target);
  const active = { refuse: 0, reset: 0, stall: 0, latency: [] as number[], errorsLeft: 0 };
  const faulted = { refused: 0, reset: 0, stalled: 0, delayed: 0, errors: 0 };
  const stalled = new Set<Socket>();
  const sockets = new Set<Socket>();
  let flip = 0;

  const forward = (req: http.IncomingMessage, res: http.ServerResponse, cutAfterAnswer: boolean) => {
    const upstream = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (up) => {
      if (cutAfterAnswer) {
        up.resume();
        up.on('end', () => req.socket.resetAndDestroy());
        return;
      }
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.destroy();
    });
    req.on('error', () => upstream.destroy());
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  };

  const server = http.createServer((req, res) => {
    if (active.stall > 0) {
      faulted.stalled++;
      stalled.add(req.socket);
      req.resume();
      return;
    }
    if (active.errorsLeft > 0) {
      active.errorsLeft--;
      faulted.errors++;
      const [status, code] = flip++ % 2 === 0 ? [500, 'InternalError'] : [503, 'SlowDown'];
      req.resume();
      req.on('end', () => {
        const body = s3Error(code);
        res.writeHead(status, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
      return;
    }
    if (active.reset > 0) {
      faulted.reset++;
      if (flip++ % 2 === 0) {
        req.once('data', () => req.socket.resetAndDestroy());
        req.once('end', () => req.socket.resetAndDestroy());
        return;
      }
      forward(req, res, true);
      return;
    }
    const delay = Math.max(0, ...active.latency);
    if (delay > 0) {
      faulted.delayed++;
      req.pause();
      setTimeout(() => {
        req.resume();
        forward(req, res, false);
      }, delay);
      return;
    }
    forward(req, res, false);
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  const listen = async () => {
    for (;;) {
      try {
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject);
          server.listen(port, '127.0.0.1', () => {
            server.off('error', reject);
            resolve();
          });
        });
        return;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  };
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  return {
    endpoint: `http://127.0.0.1:${port}`,
    faulted,
    async inject(f: Fault) {
      switch (f.kind) {
        case 'store-refuse':
          if (active.refuse++ === 0) {
            server.close();
            for (const s of sockets) s.resetAndDestroy();
          }
          faulted.refused++;
          await sleep(f.durationMs);
          if (--active.refuse === 0) await listen();
          return;
        case 'store-reset':
          active.reset++;
          await sleep(f.durationMs);
          active.reset--;
          return;
        case 'store-stall':
          active.stall++;
          await sleep(f.durationMs);
          if (--active.stall === 0) {
            for (const s of stalled) s.destroy();
            stalled.clear();
          }
          return;
        case 'store-latency':
          active.latency.push(f.amount);
          await sleep(f.durationMs);
          active.latency.splice(active.latency.indexOf(f.amount), 1);
          return;
        case 'store-5xx':
          active.errorsLeft += f.amount;
          return;
        default:
          throw new Error(`${f.kind} is not a store fault`);
      }
    },
    async stop() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => {
        if (!server.listening) resolve();
        else server.close(() => resolve());
      });
    },
  };
}
