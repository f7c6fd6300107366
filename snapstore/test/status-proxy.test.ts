/**
 * The stall proxy the provider tests share a backend through (support/status-proxy.ts): a request it forwards
 * reaches the backend before the test is done with it. Once it did not: the conformance stall case gave up on
 * a held fetch and stopped the proxy while the fetch was still on its way, and the GCS fake, shared by the
 * file, recorded it during the next test, which counts its requests ("GET null" beside its one upload, seen
 * in a full `npm test` at high load).
 *
 * The backend here reads nothing until the test lets it (its sockets paused), which stretches the window the
 * load opened to as long as the test needs.
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { startStatusProxy, type StatusProxy } from './support/status-proxy.js';
import { waitFor } from '../../test/support/wait.js';

interface SlowBackend {
  url: string;
  /** The paths of the requests it has read so far. */
  seen: string[];
  /** Resolves when a connection arrives (its socket is paused: nothing of it is read). */
  connected: Promise<void>;
  /** Lets it read and answer. */
  resume(): void;
  close(): Promise<void>;
}

async function slowBackend(): Promise<SlowBackend> {
  const seen: string[] = [];
  const sockets: Socket[] = [];
  let reading = false;
  const server = http.createServer((req, res) => {
    seen.push(req.url ?? '');
    res.writeHead(200, { 'content-length': '5' });
    res.end('hello');
  });
  const connected = new Promise<void>((resolve) =>
    server.on('connection', (socket) => {
      sockets.push(socket);
      if (!reading) socket.pause();
      resolve();
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    connected,
    resume() {
      reading = true;
      for (const s of sockets) s.resume();
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const undos: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (undos.length > 0) await undos.pop()?.();
});

async function setUp(): Promise<{ backend: SlowBackend; proxy: StatusProxy; get(path: string): http.ClientRequest }> {
  const backend = await slowBackend();
  undos.push(() => backend.close());
  const proxy = await startStatusProxy(backend.url, 'marker');
  // After a test that stopped it too: a second stop() finds nothing left to wait for.
  undos.push(async () => {
    backend.resume();
    await proxy.stop();
  });
  const get = (path: string): http.ClientRequest => {
    const req = http.get(`${proxy.url}${path}`, (res) => res.resume());
    req.on('error', () => undefined); // the proxy cuts held answers off when it stops
    return req;
  };
  return { backend, proxy, get };
}

describe('the stall proxy', () => {
  it("counts a held body only once the backend has the request, so a test that waits for the hold knows it's there", async () => {
    const { backend, proxy, get } = await setUp();
    proxy.stall = 'body';
    get('/o/marker?alt=media');
    await backend.connected;
    // The proxy has the request and has sent it on; the backend has not read it yet.
    expect(proxy.stalled).toBe(0);
    backend.resume();
    await waitFor(() => proxy.stalled === 1, 'the body to be held', 10_000, 5);
    expect(backend.seen).toEqual(['/o/marker?alt=media']);
  });

  it('stop() resolves only when the backend has every request it forwarded', async () => {
    const { backend, proxy, get } = await setUp();
    proxy.stall = 'body';
    get('/o/marker?alt=media');
    await backend.connected;
    let seenAtStop: string[] | undefined;
    const stopped = proxy.stop().then(() => void (seenAtStop = [...backend.seen]));
    backend.resume();
    await stopped;
    expect(seenAtStop).toEqual(['/o/marker?alt=media']);
  });

  it('stop() drops the answers it holds: they never reach the backend', async () => {
    const { backend, proxy, get } = await setUp();
    backend.resume();
    proxy.stall = 'answer';
    get('/o/marker?alt=media');
    await waitFor(() => proxy.stalled === 1, 'the answer to be held', 10_000, 5);
    await proxy.stop();
    expect(backend.seen).toEqual([]);
  });
});
