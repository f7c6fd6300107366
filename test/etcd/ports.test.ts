import { createServer, type Server } from 'node:net';
import { describe, expect, it } from 'vitest';
import { ephemeralPortRange, freePort } from '../../src/etcd/ports.js';

const listen = (port: number): Promise<Server> =>
  new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(port, '127.0.0.1', () => resolve(srv));
  });
const close = (srv: Server): Promise<void> => new Promise((resolve) => srv.close(() => resolve()));

describe('freePort', () => {
  it('gives a port that can be listened on, below the ephemeral range where the system has one', async () => {
    const range = await ephemeralPortRange();
    const ports = await Promise.all(Array.from({ length: 10 }, () => freePort()));
    for (const port of ports) {
      if (range && range.low > 11_000) expect(port).toBeLessThan(range.low);
      const srv = await listen(port);
      await close(srv);
    }
  });

  it('never hands out a port another process listens on', async () => {
    const range = await ephemeralPortRange();
    // Occupy many ports of the range freePort picks from; it must step around them.
    const taken: Server[] = [];
    const low = 10_000;
    const high = range && range.low > 11_000 ? range.low : 65_000;
    for (let p = low; p < Math.min(high, low + 400); p++) {
      try {
        taken.push(await listen(p));
      } catch {
        // already in use by someone else: just as good
      }
    }
    try {
      for (let i = 0; i < 20; i++) {
        const port = await freePort();
        const srv = await listen(port);
        await close(srv);
      }
    } finally {
      await Promise.all(taken.map(close));
    }
  });
});
