/**
 * A stand-in for etcd-wrapper (etcd-wrapper `internal/bootstrap/bootstrap.go`): drive the sidecar's initialization protocol
 * (status → start → status … Successful), fetch `/config`, write it to a file and start etcd with
 * `--config-file`, exactly as the wrapper hands the served config to its embedded etcd.
 */
import { spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse } from 'yaml';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import { killOnProcessExit } from '../../src/etcd/local-etcd.js';
import { waitFor } from '../../test/support/wait.js';

export interface ConfiguredEtcd {
  /** The config etcd was started with, as parsed from `/config`. */
  config: Record<string, unknown>;
  clientUrl: string;
  pid: number;
  exited: Promise<number | null>;
  logTail(): string;
  /** Resolves once etcd answers `/version` (a member of a forming cluster answers only with quorum). */
  ready(timeoutMs?: number): Promise<void>;
  stop(graceMs?: number): Promise<void>;
  /** Sends `signal` at once (SIGKILL: a crash, no leadership transfer) and resolves when the process is gone. */
  kill(signal: NodeJS.Signals): Promise<void>;
}

/** Starts etcd on a config file (YAML as served by `/config`). */
export async function startEtcdFromConfig(
  binaries: EtcdBinaries,
  configPath: string,
  config: Record<string, unknown>,
): Promise<ConfiguredEtcd> {
  const child = spawn(binaries.etcd, [`--config-file=${configPath}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  killOnProcessExit(child);
  let tail = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    tail = (tail + d).slice(-32 * 1024);
  });
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.once('error', () => resolve(-1));
  });
  const clientUrl = String(config['advertise-client-urls']).split(',')[0]!;
  let stopping: Promise<void> | undefined;
  return {
    config,
    clientUrl,
    pid: child.pid ?? -1,
    exited,
    logTail: () => tail,
    async ready(timeoutMs = 60_000) {
      let gone = false;
      void exited.then(() => (gone = true));
      const last = () => tail.split('\n').slice(-20).join('\n');
      // Answering /version or gone, whichever comes first.
      const outcome = await waitFor(
        async () => {
          if (gone) return 'exited';
          const r = await fetch(`${clientUrl}/version`, { signal: AbortSignal.timeout(1000) });
          await r.arrayBuffer();
          return r.ok ? 'ready' : undefined;
        },
        `etcd at ${clientUrl} to answer /version`,
        timeoutMs,
        100,
      ).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}:\n${last()}`);
      });
      if (outcome === 'exited') throw new Error(`etcd exited during start-up:\n${last()}`);
    },
    stop(graceMs = 10_000) {
      stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
        await exited;
        clearTimeout(t);
      })();
      return stopping;
    },
    async kill(signal) {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
}

export interface HandshakeResult {
  /** Distinct status bodies in the order seen. */
  seen: string[];
  ok: boolean;
}

/**
 * The wrapper's loop: poll status; on `New` start (mode full or sanity); stop at `Successful`. A `Failed`
 * read resets to `New` and the wrapper starts again; here we stop after `maxFailures` failures instead.
 */
export async function initializationHandshake(
  url: string,
  opts: { mode?: 'full' | 'sanity'; pollMs?: number; timeoutMs?: number; maxFailures?: number } = {},
): Promise<HandshakeResult> {
  const seen: string[] = [];
  let failures = 0;
  // One poll of the wrapper's loop per probe; the sidecar cannot call back, so polling is the event.
  return waitFor(
    async (): Promise<HandshakeResult | undefined> => {
      const status = await (await fetch(`${url}/initialization/status`, { signal: AbortSignal.timeout(60_000) })).text();
      if (seen.at(-1) !== status) seen.push(status);
      if (status === 'Successful') return { seen, ok: true };
      if (status === 'Failed' && ++failures >= (opts.maxFailures ?? 1)) return { seen, ok: false };
      if (status === 'New') await (await fetch(`${url}/initialization/start?mode=${opts.mode ?? 'full'}`)).arrayBuffer();
      return undefined;
    },
    'initialization to finish',
    opts.timeoutMs ?? 180_000,
    opts.pollMs ?? 200,
  ).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}: ${seen.join(' -> ')}`);
  });
}

/** `/config` with the wrapper's 5 attempts, 1 s apart. */
export async function fetchConfig(url: string): Promise<{ text: string; config: Record<string, unknown> }> {
  let last: unknown;
  for (let i = 0; i < 5; i++) {
    try {
      const res = await fetch(`${url}/config`, { signal: AbortSignal.timeout(60_000) });
      const text = await res.text();
      if (res.status === 200) return { text, config: parse(text) as Record<string, unknown> };
      last = new Error(`/config answered ${res.status}: ${text}`);
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  throw last instanceof Error ? last : new Error(String(last));
}

/** Handshake, `/config`, etcd on the served config: what etcd-wrapper does at every container start. */
export async function runWrapper(
  sidecarUrl: string,
  opts: { binaries: EtcdBinaries; workDir: string; mode?: 'full' | 'sanity'; maxFailures?: number; timeoutMs?: number },
): Promise<{ handshake: HandshakeResult; etcd?: ConfiguredEtcd }> {
  const handshake = await initializationHandshake(sidecarUrl, {
    ...(opts.mode ? { mode: opts.mode } : {}),
    ...(opts.maxFailures ? { maxFailures: opts.maxFailures } : {}),
    ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}),
  });
  if (!handshake.ok) return { handshake };
  const { text, config } = await fetchConfig(sidecarUrl);
  await mkdir(opts.workDir, { recursive: true });
  const path = join(opts.workDir, 'etcd.conf.yaml');
  await writeFile(path, text, { mode: 0o600 });
  return { handshake, etcd: await startEtcdFromConfig(opts.binaries, path, config) };
}
