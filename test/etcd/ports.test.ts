import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ephemeralPortRange, freePort, keptPorts, pickablePort, saveKeptPorts } from '../../src/etcd/ports.js';
import { cleanupAfterEach } from '../support/cleanups.js';

const cleanups = cleanupAfterEach();

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

describe('ports fetch refuses', () => {
  it("are never picked: Node's fetch will not connect to 10080 (the Fetch Standard's bad ports), which lies in our range", async () => {
    // Why it matters: a local etcd there answers, but its readiness probe (fetch) never sees it.
    const refused = await fetch('http://127.0.0.1:10080/').catch((err: unknown) => err as Error & { cause?: Error });
    expect(refused).toBeInstanceOf(Error);
    expect((refused as Error & { cause?: Error }).cause?.message).toBe('bad port');
    expect(pickablePort(10080)).toBe(false);
    expect(pickablePort(6000)).toBe(false);
    expect(pickablePort(10081)).toBe(true);
    expect(pickablePort(2379)).toBe(true);
  });

  it('moves a saved port that fetch refuses, as one another process holds', async () => {
    const file = join(await cleanups.tempDir('etcdbr-ports-'), 'ports.json');
    await saveKeptPorts(file, { client: 10080 });
    const kept = await keptPorts(file, ['client']);
    expect(kept.moved).toEqual(['client']);
    expect(pickablePort(kept.ports.client)).toBe(true);
  });
});

describe('keptPorts', () => {
  it('gives new free ports the first time, the saved ones while they are free, new ones for those taken', async () => {
    const file = join(await cleanups.tempDir('etcdbr-ports-'), 'ports.json');
    const first = await keptPorts(file, ['client', 'peer']);
    expect(first.moved).toEqual([]);
    expect(first.ports.client).not.toBe(first.ports.peer);
    await saveKeptPorts(file, first.ports);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(first.ports);

    expect(await keptPorts(file, ['client', 'peer'])).toEqual({ ports: first.ports, moved: [] });

    // Another process listens on the saved peer port: that one alone moves.
    const srv = await listen(first.ports.peer);
    try {
      const again = await keptPorts(file, ['client', 'peer']);
      expect(again.moved).toEqual(['peer']);
      expect(again.ports.client).toBe(first.ports.client);
      expect(again.ports.peer).not.toBe(first.ports.peer);
    } finally {
      await close(srv);
    }

    // A name never saved gets a new port without counting as moved; a file we cannot use saves nothing.
    expect((await keptPorts(file, ['client', 'server'])).moved).toEqual([]);
    writeFileSync(file, 'not json');
    expect((await keptPorts(file, ['client'])).moved).toEqual([]);
  });

  it('names the file it cannot save the ports in', async () => {
    const file = join(await cleanups.tempDir('etcdbr-ports-'), 'missing', 'ports.json');
    await expect(saveKeptPorts(file, { client: 1 })).rejects.toThrow(`cannot save the ports in ${file}`);
  });
});
