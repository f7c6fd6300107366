import { CodedError, EtcdbrError } from '../errors.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import type { EtcdBinaries } from './binaries.js';
import { atLeast35 } from './binaries.js';
import { freePort } from './ports.js';

/** A local etcd child process on loopback: used for restore, compact, validation catch-up and tests. */
export interface LocalEtcd {
  readonly name: string;
  readonly clientUrl: string;
  readonly peerUrl: string;
  readonly dataDir: string;
  readonly pid: number;
  /** Resolves with the exit code (null when killed by a signal) once the process is gone. */
  readonly exited: Promise<number | null>;
  /** The last lines etcd wrote to stderr, for error messages. */
  logTail(): string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. Idempotent. */
  stop(graceMs?: number): Promise<void>;
}

export interface LocalEtcdOptions {
  binaries: EtcdBinaries;
  dataDir: string;
  name?: string;
  host?: string;
  /** 0 or undefined: a free port is picked (and re-picked if etcd cannot bind it). */
  clientPort?: number;
  peerPort?: number;
  /** Defaults to `<name>=<peerUrl>`. */
  initialCluster?: string;
  initialClusterState?: 'new' | 'existing';
  initialClusterToken?: string;
  quotaBackendBytes?: number;
  maxRequestBytes?: number;
  maxTxnOps?: number;
  /** Only honoured where etcd has the flag (3.5+). */
  unsafeNoFsync?: boolean;
  extraArgs?: string[];
  readyTimeoutMs?: number;
  /** Extra environment for the child (e.g. ETCD_UNSUPPORTED_ARCH). */
  env?: NodeJS.ProcessEnv;
  /** Stops waiting for etcd to serve (and stops it) when aborted. */
  signal?: AbortSignal | undefined;
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/**
 * SIGKILLs `child` if this process exits while it still runs: a local etcd must never outlive the process
 * that started it, even when that process crashes.
 */
export function killOnProcessExit(child: ChildProcess): void {
  installExitHook();
  live.add(child);
  const forget = (): void => void live.delete(child);
  child.once('exit', forget);
  child.once('error', forget);
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const child of live) {
      try {
        child.kill('SIGKILL');
      } catch {
        /* already gone */
      }
    }
  });
}

const TAIL_BYTES = 16 * 1024;

export async function startLocalEtcd(opts: LocalEtcdOptions): Promise<LocalEtcd> {
  const autoPorts = !opts.clientPort && !opts.peerPort;
  const attempts = autoPorts ? 5 : 1;
  let lastError: unknown;
  for (let i = 0; i < attempts; i++) {
    try {
      return await startOnce(opts);
    } catch (err) {
      lastError = err;
      if (!(err instanceof PortInUseError)) throw err;
    }
  }
  throw lastError;
}

class PortInUseError extends CodedError {
  readonly code = 'E_PORT_IN_USE';
}

async function startOnce(opts: LocalEtcdOptions): Promise<LocalEtcd> {
  const host = opts.host ?? '127.0.0.1';
  const name = opts.name ?? 'default';
  const clientPort = opts.clientPort || (await freePort(host));
  const peerPort = opts.peerPort || (await freePort(host));
  const clientUrl = `http://${host}:${clientPort}`;
  const peerUrl = `http://${host}:${peerPort}`;
  await mkdir(opts.dataDir, { recursive: true, mode: 0o700 });

  const args = [
    `--name=${name}`,
    `--data-dir=${opts.dataDir}`,
    `--listen-client-urls=${clientUrl}`,
    `--advertise-client-urls=${clientUrl}`,
    `--listen-peer-urls=${peerUrl}`,
    `--initial-advertise-peer-urls=${peerUrl}`,
    `--initial-cluster=${opts.initialCluster ?? `${name}=${peerUrl}`}`,
    `--initial-cluster-state=${opts.initialClusterState ?? 'new'}`,
    `--initial-cluster-token=${opts.initialClusterToken ?? 'etcd-cluster'}`,
  ];
  if (opts.quotaBackendBytes !== undefined) args.push(`--quota-backend-bytes=${opts.quotaBackendBytes}`);
  if (opts.maxRequestBytes !== undefined) args.push(`--max-request-bytes=${opts.maxRequestBytes}`);
  if (opts.maxTxnOps !== undefined) args.push(`--max-txn-ops=${opts.maxTxnOps}`);
  if (opts.unsafeNoFsync && atLeast35(await opts.binaries.version())) args.push('--unsafe-no-fsync');
  args.push(...(opts.extraArgs ?? []));

  const child = spawn(opts.binaries.etcd, args, {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...opts.env },
    // Its own process group: a terminal's Ctrl-C signals our whole group, and an etcd killed by it under a
    // running restore would turn "interrupted" into "etcd unreachable". We stop it ourselves, in order, on
    // every path (stop(), and killOnProcessExit when this process exits, crashes included).
    detached: true,
  });
  killOnProcessExit(child);
  let tail = '';
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk: string) => {
    tail = (tail + chunk).slice(-TAIL_BYTES);
  });
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.once('error', () => resolve(-1));
  });

  let stopping: Promise<void> | undefined;
  const stop = (graceMs = 10_000): Promise<void> => {
    stopping ??= (async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      // A stopped (SIGSTOP) etcd would hold the SIGTERM until the SIGKILL below: let it act on it now.
      child.kill('SIGCONT');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    })();
    return stopping;
  };

  const handle: LocalEtcd = {
    name,
    clientUrl,
    peerUrl,
    dataDir: opts.dataDir,
    pid: child.pid ?? -1,
    exited,
    logTail: () => tail,
    stop,
  };

  try {
    await waitUntilServing(clientUrl, exited, opts.readyTimeoutMs ?? 60_000, opts.signal);
  } catch (err) {
    await stop(2_000);
    if (opts.signal?.aborted) throw err;
    if (/address already in use/.test(tail)) throw new PortInUseError(tail);
    const why = err instanceof Error ? err.message : String(err);
    throw new EtcdbrError(
      'E_UNAVAILABLE',
      `local etcd on ${opts.dataDir} did not start: ${why}\n--- etcd log (tail) ---\n${lastLines(tail, 20)}`,
    );
  }
  return handle;
}

function lastLines(text: string, n: number): string {
  return text.trimEnd().split('\n').slice(-n).join('\n');
}

/** Polls `/version` until etcd answers. `/health` needs a leader, which a joining member may not have yet. */
async function waitUntilServing(
  clientUrl: string,
  exited: Promise<number | null>,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let gone = false;
  void exited.then(() => {
    gone = true;
  });
  while (Date.now() < deadline) {
    signal?.throwIfAborted();
    if (gone) throw new EtcdbrError('E_UNAVAILABLE', 'etcd exited during start-up');
    try {
      const res = await fetch(`${clientUrl}/version`, { signal: AbortSignal.timeout(1_000) });
      if (res.ok) {
        await res.arrayBuffer();
        return;
      }
    } catch {
      /* not up yet */
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  signal?.throwIfAborted();
  throw new EtcdbrError('E_UNAVAILABLE', `no answer from ${clientUrl} within ${timeoutMs} ms`);
}
