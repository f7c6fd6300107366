import { EtcdbrError } from '../errors.js';
import { randomInt } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:net';

/** Lowest port we pick ourselves: well above the registered services most hosts run. */
const PORT_FLOOR = 10_000;
/** Random picks below the ephemeral range before falling back to the kernel's choice. */
const ATTEMPTS = 20;

/**
 * A free loopback port for a child process (a local etcd) to bind a moment later. There is a window in
 * which another process may take it, so callers that hand the port to a child retry when the child fails
 * to bind.
 *
 * The port is picked at random below the kernel's ephemeral range (Linux: 32768–60999) and checked by
 * binding it. A port from listen(0) lies inside that range, where every outgoing connection of every
 * process on the machine also takes its local port: during the window one of them often does, and the
 * child then fails with "address already in use". Below the range only another listener can collide.
 */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const range = await ephemeralPortRange();
  if (range && range.low - PORT_FLOOR >= 1_000) {
    for (let i = 0; i < ATTEMPTS; i++) {
      const port = PORT_FLOOR + randomInt(range.low - PORT_FLOOR);
      if (await canListen(port, host)) return port;
    }
  }
  return kernelPort(host);
}

/** Linux's `ip_local_port_range`; undefined where it cannot be read (other systems). */
export async function ephemeralPortRange(): Promise<{ low: number; high: number } | undefined> {
  try {
    const [low, high] = (await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')).trim().split(/\s+/).map(Number);
    return low !== undefined && high !== undefined && Number.isInteger(low) && Number.isInteger(high) ? { low, high } : undefined;
  } catch {
    return undefined;
  }
}

function canListen(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen(port, host, () => srv.close(() => resolve(true)));
  });
}

function kernelPort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, host, () => {
      const addr = srv.address();
      srv.close(() => {
        if (addr && typeof addr === 'object') resolve(addr.port);
        else reject(new EtcdbrError('E_FAILED', 'could not determine a free port'));
      });
    });
  });
}
