/**
 * The two tools side by side: our `bin/etcdbrctl` and the Go etcdbrctl (ETCDBRCTL_PEER) as child processes,
 * each killed on the test's cleanup if the test ends first; restore into a data dir and dump the etcd
 * started on it; what a Local store holds.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { EtcdDump } from '../../../test/support/etcd-dump.js';
import { runCli, startCli, type CliExit } from '../../support/cli-process.js';
import { dumpDataDir, restoreFlags } from '../../support/restore-dump.js';
import { resolvePeerBinary } from './peer-binary.js';

export type Cleanups = Array<() => Promise<unknown>>;
export type Tool = 'ours' | 'go';

export interface Running {
  child: ChildProcess;
  exited: Promise<CliExit>;
  /** stdout and stderr so far (the Go tool logs to stderr). */
  output(): string;
}

let peerPath: string | undefined;

function peer(): string {
  peerPath ??= resolvePeerBinary().path;
  return peerPath;
}

/**
 * The Go tool's environment. HOME is `/`: since v0.41 the Go tool joins a Local store's container to $HOME
 * even when it is absolute (pkg/snapstore/utils.go, `path.Join(homeDir, container)`), and the suite's
 * containers are absolute temp dirs; v0.23 takes the container as given, so `/` changes nothing there.
 * AWS_CA_BUNDLE is left out: the AWS SDK v2 of v0.41 and later refuses to start an S3 store when it is set
 * and the credentials file gave its own HTTP client ("unable to add custom RootCAs HTTPClient, has no
 * WithTransportOptions"), and s3rver speaks plain HTTP, so no CA is needed.
 */
function goEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const { AWS_CA_BUNDLE: _caBundle, ...rest } = process.env;
  return { ...rest, HOME: '/', ...env };
}

/** Starts the Go etcdbrctl with `args` (environment: goEnv). */
export function startGo(args: string[], env: NodeJS.ProcessEnv, cleanups: Cleanups): Running {
  const child = spawn(peer(), args, { env: goEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = new Promise<CliExit>((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  return { child, exited, output: () => stdout + stderr };
}

/** Starts our bin/etcdbrctl with `args`. */
export function startOurs(args: string[], env: NodeJS.ProcessEnv, cleanups: Cleanups): Running {
  const { child, exited } = startCli(args, env, cleanups);
  let out = '';
  child.stdout?.on('data', (d: string) => (out += d));
  child.stderr?.on('data', (d: string) => (out += d));
  return { child, exited, output: () => out };
}

/** Runs one tool's command to its end (killed after 3 minutes: a hang fails the test). */
export async function run(tool: Tool, args: string[], env: NodeJS.ProcessEnv, cleanups: Cleanups): Promise<CliExit> {
  if (tool === 'ours') return runCli(args, env, cleanups);
  const { child, exited } = startGo(args, env, cleanups);
  const timer = setTimeout(() => child.kill('SIGKILL'), 180_000);
  try {
    return await exited;
  } finally {
    clearTimeout(timer);
  }
}

/** Runs to its end and expects exit code 0 (the output in the failure message). */
export async function runOk(tool: Tool, args: string[], env: NodeJS.ProcessEnv, cleanups: Cleanups): Promise<CliExit> {
  const r = await run(tool, args, env, cleanups);
  expect(r.code, `${tool} ${args[0] ?? ''} failed:\n${r.stdout}\n${r.stderr}`).toBe(0);
  return r;
}

/** `restore` by `tool` from the store `storeFlags` into `<dir>/<tool>-restored.etcd`, then the dump of an etcd started on it. */
export async function restoreWith(
  tool: Tool,
  storeFlags: string[],
  dir: string,
  cleanups: Cleanups,
  opts: { env?: NodeJS.ProcessEnv; extra?: string[]; tag?: string } = {},
): Promise<EtcdDump> {
  const dataDir = join(dir, `${opts.tag ?? tool}-restored.etcd`);
  const scratch = join(dir, `${opts.tag ?? tool}-scratch`);
  await runOk(
    tool,
    ['restore', ...storeFlags, ...restoreFlags(scratch, dataDir), `--snapstore-temp-directory=${dir}`, ...(opts.extra ?? [])],
    opts.env ?? {},
    cleanups,
  );
  return dumpDataDir(dataDir);
}

export interface StoredSnapshot {
  kind: 'Full' | 'Incr';
  start: number;
  last: number;
  name: string;
}

const NAME = /^(Full|Incr)-(\d{8,})-(\d{8,})-\d+(\.[a-zA-Z]+)?(\.final)?$/;

/** Parses a v2 snapshot name (no chunks, no encryption in these stores); undefined for anything else. */
export function parseSnapshotName(name: string): StoredSnapshot | undefined {
  const m = NAME.exec(name);
  if (!m) return undefined;
  return { kind: m[1] as 'Full' | 'Incr', start: Number(m[2]), last: Number(m[3]), name };
}

/** The snapshots of a Local store (its v2 folder), sorted by last revision; hidden temp files are skipped. */
export async function localSnapshots(container: string, prefix = ''): Promise<StoredSnapshot[]> {
  let names: string[];
  try {
    names = await readdir(join(container, prefix, 'v2'));
  } catch {
    return [];
  }
  return names
    .map(parseSnapshotName)
    .filter((s): s is StoredSnapshot => s !== undefined)
    .sort((a, b) => a.last - b.last || a.kind.localeCompare(b.kind));
}

/** Keys, values, create and mod revisions and versions: what both tools' restores guarantee. */
export function withoutLeases(dump: EtcdDump): EtcdDump {
  return { revision: dump.revision, kvs: dump.kvs.map(({ lease: _lease, ...kv }) => ({ ...kv, lease: '' })) };
}

/**
 * The Go restore of a chain against ours: the same keys, values, revisions and versions; where the Go tool
 * kept a key's lease (a key of the base full snapshot) ours has the same, and ours also keeps the leases of the
 * keys a delta carries, which the Go tool writes without theirs (docs/differences.md).
 */
export function expectGoDropsOnlyLeases(go: EtcdDump, ours: EtcdDump): void {
  expect(withoutLeases(go)).toEqual(withoutLeases(ours));
  const oursLease = new Map(ours.kvs.map((kv) => [kv.key, kv.lease]));
  const kept = go.kvs.filter((kv) => kv.lease !== '0');
  expect(kept.filter((kv) => oursLease.get(kv.key) !== kv.lease).map((kv) => kv.key)).toEqual([]);
}

/** The Local store flags both tools take. */
export function localStore(container: string): string[] {
  return ['--storage-provider=Local', `--store-container=${container}`];
}
