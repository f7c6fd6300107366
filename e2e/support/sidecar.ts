import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../src/etcd/ports.js';
import { waitFor } from '../../test/support/wait.js';

export const BIN = fileURLToPath(new URL('../../bin/etcdbrctl', import.meta.url));

export interface SidecarProcess {
  url: string;
  port: number;
  child: ChildProcess;
  /** Everything the process wrote to stderr so far (JSON log lines). */
  logs(): string;
  /** SIGTERM and wait; resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  exited: Promise<number | null>;
}

/**
 * Runs `bin/etcdbrctl server` with the given flags on a free port, or on `at`: a port on one loopback
 * address (`--server-address`), as sidecars on their own pods listen on the same port.
 */
export async function startSidecar(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  at?: { host: string; port: number },
): Promise<SidecarProcess> {
  const port = at?.port ?? (await freePort());
  const listen = at ? [`--server-address=${at.host}`] : [];
  const child = spawn(process.execPath, [BIN, 'server', `--server-port=${port}`, ...listen, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  let logs = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    logs += d;
  });
  child.stdout?.setEncoding('utf8').on('data', (d: string) => {
    logs += d;
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = `http://${at?.host ?? '127.0.0.1'}:${port}`;
  // Listening (any answer from /healthz) or gone, whichever comes first.
  const started = await waitFor(
    async () => {
      if (child.exitCode !== null) return 'exited';
      await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) });
      return 'listening';
    },
    `etcdbrctl server to listen on ${url}`,
    30_000,
    100,
  ).catch((err: unknown) => {
    child.kill('SIGKILL');
    throw new Error(`${(err as Error).message}:\n${logs}`);
  });
  if (started === 'exited') throw new Error(`etcdbrctl server exited early (${child.exitCode}):\n${logs}`);
  return {
    url,
    port,
    child,
    logs: () => logs,
    exited,
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

export { waitFor } from '../../test/support/wait.js';

/** The flags of a Local store at `storeDir`, with `tempDir` as `--snapstore-temp-directory`. */
export function localStoreFlags(storeDir: string, tempDir: string): string[] {
  return ['--storage-provider=Local', `--store-container=${storeDir}`, `--snapstore-temp-directory=${tempDir}`];
}

/** Snapshot and member lease renewal as etcd-druid configures it (its lease names), with a 1 s heartbeat. */
export const LEASE_RENEWAL_FLAGS: readonly string[] = [
  '--enable-snapshot-lease-renewal=true',
  '--full-snapshot-lease-name=etcd-main-full-snap',
  '--delta-snapshot-lease-name=etcd-main-delta-snap',
  '--enable-member-lease-renewal=true',
  '--k8s-heartbeat-duration=1s',
];
