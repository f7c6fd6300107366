import { EtcdbrError } from '../errors.js';
import { randomInt } from 'node:crypto';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';

/** Lowest port we pick ourselves: well above the registered services most hosts run. */
const PORT_FLOOR = 10_000;
/** Random picks below the ephemeral range before falling back to the kernel's choice. */
const ATTEMPTS = 20;

/**
 * The Fetch Standard's "bad ports" (https://fetch.spec.whatwg.org/#bad-port): Node's fetch refuses to connect
 * to them, so a local etcd on one would never be seen answering (its readiness probe and our HTTP calls use
 * fetch). 10080 lies in the range we pick from: a restore's etcd there failed after 60 s of "no answer".
 */
const FETCH_BAD_PORTS = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111, 113, 115, 117,
  119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636,
  989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
]);

/** Whether we may hand out `port` for a local etcd: fetch can reach it. */
export function pickablePort(port: number): boolean {
  return !FETCH_BAD_PORTS.has(port);
}

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
      if (pickablePort(port) && (await canListen(port, host))) return port;
    }
  }
  return kernelPort(host);
}

/** What `keptPorts` found: a port for each name, and the names whose saved port was taken (or never saved). */
export interface KeptPorts<K extends string> {
  ports: Record<K, number>;
  /** Names that got a new port although one was saved: it is in use by another process. */
  moved: K[];
}

/**
 * Ports that stay with a local etcd's data dir across runs (`npm start`): the port saved in `file` under each
 * name while it is free, else a new free one. An etcd member keeps the peer URL it was created with in its
 * data; started on a new peer port, the sidecar sees the configured URL differ from the member's, updates the
 * member, and warns that etcd must be restarted to advertise it. A missing or unreadable file saves nothing.
 */
export async function keptPorts<K extends string>(file: string, names: readonly K[], host = '127.0.0.1'): Promise<KeptPorts<K>> {
  const saved = await readSavedPorts(file);
  const ports = {} as Record<K, number>;
  const moved: K[] = [];
  const used = new Set<number>();
  for (const name of names) {
    const port = saved[name];
    if (port !== undefined && !used.has(port) && pickablePort(port) && (await canListen(port, host))) {
      ports[name] = port;
    } else {
      if (port !== undefined) moved.push(name);
      let fresh = await freePort(host);
      while (used.has(fresh)) fresh = await freePort(host);
      ports[name] = fresh;
    }
    used.add(ports[name]);
  }
  return { ports, moved };
}

/** Saves `ports` in `file` for the next `keptPorts` (written whole, then renamed: never half a file). */
export async function saveKeptPorts(file: string, ports: Readonly<Record<string, number>>): Promise<void> {
  const tmp = `${file}.tmp`;
  try {
    await writeFile(tmp, `${JSON.stringify(ports, null, 2)}\n`, { mode: 0o600 });
    await rename(tmp, file);
  } catch (err) {
    throw new EtcdbrError('E_FAILED', `cannot save the ports in ${file}: ${err instanceof Error ? err.message : String(err)}`, {
      cause: err,
    });
  }
}

async function readSavedPorts(file: string): Promise<Record<string, number>> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(file, 'utf8'));
  } catch {
    // None saved yet, or a file we cannot use: new ports, saved over it.
    return {};
  }
  const out: Record<string, number> = {};
  if (typeof parsed !== 'object' || parsed === null) return out;
  for (const [name, port] of Object.entries(parsed)) {
    if (Number.isInteger(port) && (port as number) > 0 && (port as number) < 65_536) out[name] = port as number;
  }
  return out;
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
