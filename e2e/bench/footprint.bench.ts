/**
 * The sidecar's footprint (issue 24): memory and CPU of the real `bin/etcdbrctl` processes, measured from
 * outside through /proc as a pod's container would show them, and of the Go etcd-backup-restore beside it
 * when ETCDBRCTL_PEER names its binary.
 *
 *   npm run bench -- --compiled footprint [-- --only=idle,full,delta,restore,commands --idle-seconds=60
 *     --full-mb=1024 --compressions=none,gzip,zstd --settle-seconds=60 --delta-seconds=60 --delta-rate=50000
 *     --revisions=1000000 --key-space=5000 --sample-ms=50]
 *   ETCDBRCTL_PEER=/path/to/etcdbrctl-go npm run bench -- --compiled footprint
 *   quick: npm run bench -- --compiled footprint -- --only=idle --idle-seconds=10
 *
 * Every case spawns the binary (ours: `node bin/etcdbrctl`, with the V8 flags bin/etcdbrctl sets; the peer:
 * its executable) and samples VmRSS and utime + stime of that one PID every --sample-ms (support/proc-sampler.ts).
 * Children the process starts (the restore's embedded etcd) are not counted; the sha256 worker thread is.
 *   idle        `server` for --idle-seconds after spawn: RSS at the end, and CPU in ms/s over the window's
 *               second half (the first holds start-up and the initial full snapshot of a small etcd).
 *               idle/local: Local store, Kubernetes off. idle/s3: S3 (s3rver) with credentials, Kubernetes off
 *               (what a full snapshot to S3 settles back to). idle/s3+k8s: S3 with full and delta snapshot
 *               leases, member lease and EtcdMember status against the fake Kubernetes API.
 *   full        an etcd filled with ~--full-mb MiB (support/fill-etcd.ts), then per store (Local, S3) and
 *               compression a `server` is started (delta snapshots off: nothing writes, and the figures are the
 *               full snapshot's alone), its start-up full snapshot awaited, and `GET /snapshot/full` measured:
 *               duration, CPU and peak RSS during it, RSS --settle-seconds after it (held against idle/local or
 *               idle/s3 of the same run, when measured).
 *   delta       `server` with --delta-snapshot-memory-limit=104857600 (the flag is a byte count, as upstream's
 *               uint flag) on an etcd on tmpfs; support/put-load.ts puts 1 KiB values as fast as etcd takes
 *               them (asked --delta-rate/s) for --delta-seconds. Peak RSS over the RSS just before the load, and
 *               CPU from the first put to the last delta stored per 1,000 puts; then every delta after the full is
 *               parsed: each revision up to etcd's last must be there once.
 *   restore     a base full snapshot plus --revisions single-put revisions in gzip deltas of 5,000
 *               (test/support/restore-chain.ts) in a Local store; `server` with no data dir restores it through
 *               the etcd-wrapper protocol (`/initialization/start?mode=full`, polling `/initialization/status`).
 *               The chain's puts cycle through --key-space keys with the create revisions and versions etcd
 *               writes (the offline replay checks them; `auto` goes online for a history etcd never writes).
 *               Printed: each restore step's log line (the replay path among them) with the peak RSS up to it.
 *   commands    `verify` (ours only), `copy` (Local -> S3) and `compact` of that chain as commands, each to its end.
 * Targets are issue 24's; MB there is read as MiB here. Pass/fail is informational: the bench exits 0 unless a
 * case broke. Wall times are noisy on a shared machine (the load average is printed); RSS is not. The last
 * line is JSON with every figure.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants } from 'node:fs';
import { cp, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import { createDecompressStream, type SnapStore, type Snapshot } from '../../snapstore/src/index.js';
import { openLocalStore } from '../../snapstore/src/providers/local.js';
import {
  S3RVER_ACCESS_KEY,
  S3RVER_SECRET_KEY,
  UPLOAD_PART_MARKER,
  startS3rver,
  type S3rverInstance,
} from '../../snapstore/test/support/s3rver.js';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { DeltaPayloadParser } from '../../src/backup/delta-parse.js';
import { freePort } from '../../src/etcd/ports.js';
import { etcdBinaries, startTestEtcd, type TestEtcd } from '../../test/support/etcd.js';
import { ETCD_MEMBERS, FakeKubeApiServer, LEASES } from '../../test/support/fake-kube.js';
import { waitFor } from '../../test/support/wait.js';
import { LEASE_RENEWAL_FLAGS } from '../support/sidecar.js';
import { initializationHandshake } from '../support/wrapper.js';
import { etcdLineFor } from '../interop/support/etcd-line.js';
import { fillEtcd } from './support/fill.js';
import { MiB, arg, round1, table } from './support/measure.js';
import { ProcSampler } from './support/proc-sampler.js';
import type { PutLoadResult } from './support/put-load-result.js';
import { baseSnapshot, writeSmallPutChain } from '../../test/support/restore-chain.js';

/** This bench's directory; ETCDBR_BENCH_DIR when it runs bundled (scripts/bench.mjs --compiled). */
const benchDir = process.env.ETCDBR_BENCH_DIR ?? path.dirname(fileURLToPath(import.meta.url));
/** The executable, found from the bench's directory (a bundled bench lives elsewhere). */
const BIN = path.resolve(benchDir, '..', '..', 'bin', 'etcdbrctl');

const CASES = ['idle', 'delta', 'restore', 'commands', 'full'] as const;
type CaseName = (typeof CASES)[number];
const flag = (name: string): string | undefined => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const only = new Set((flag('only') ?? CASES.join(',')).split(',').filter((c) => c !== ''));
for (const c of only) if (!(CASES as readonly string[]).includes(c)) throw new Error(`--only: unknown case ${c}; use ${CASES.join(',')}`);
const idleSeconds = arg('idle-seconds', 60);
const fullMb = arg('full-mb', 1024);
const settleSeconds = arg('settle-seconds', 60);
const deltaSeconds = arg('delta-seconds', 60);
const deltaRate = arg('delta-rate', 50_000);
const revisions = arg('revisions', 1_000_000);
/** Distinct keys the chain's puts cycle through (the replay holds state per distinct key). */
const keySpace = arg('key-space', 5000);
const sampleMs = arg('sample-ms', 50);
const compressions = (flag('compressions') ?? 'none,gzip,zstd').split(',');
for (const c of compressions) if (!['none', 'gzip', 'zstd'].includes(c)) throw new Error(`--compressions: unknown ${c}`);

const DELTA_MEMORY_LIMIT = 100 * MiB;
const NS = 'shoot--bench--footprint';
const POD = 'etcd-main-0';
/** Never fires in a run: full snapshots come from start-up and from the bench's own requests. */
const NO_SCHEDULE = '--schedule=0 0 1 1 *';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------------------
// What is measured: ours, and the Go tool when ETCDBRCTL_PEER names it.

interface Subject {
  name: 'ours' | 'go';
  command: string;
  /** Arguments before the subcommand: the script for ours. */
  prefix: string[];
}

function subjects(): Subject[] {
  const out: Subject[] = [{ name: 'ours', command: process.execPath, prefix: [BIN] }];
  const peer = process.env.ETCDBRCTL_PEER;
  if (peer === undefined || peer === '') {
    console.log('ETCDBRCTL_PEER is not set: no Go etcdbrctl to measure beside ours; its columns stay empty.');
    return out;
  }
  try {
    accessSync(peer, fsConstants.X_OK);
  } catch {
    throw new Error(`ETCDBRCTL_PEER=${peer} is not an executable file`);
  }
  out.push({ name: 'go', command: peer, prefix: [] });
  return out;
}

/** A spawned process of a subject, sampled from its start. */
interface Spawned {
  child: ChildProcess;
  sampler: ProcSampler;
  exited: Promise<number | null>;
  logTail(): string;
  /** Every log line so far that matches `keepLines` (spawnSubject's option), with the sampler's time it came at. */
  keptLines(): Array<{ t: number; line: string }>;
  /**
   * How many snapshots the Go tool has logged as completely written so far. Its Local store writes a snapshot
   * straight to its final name, so the store (and its /snapshot/latest) lists one while it is being written: a
   * v0.43.0 run's start-up full was taken for done while it was still compressing (the on-demand full then
   * answered 500, "snapshotter is not active"), and a SIGTERM after its last delta appeared in the store left
   * that delta a truncated gzip stream. Ours writes a temp file and renames it: its listing is the witness.
   */
  goSaved: { full: number; delta: number };
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** The Go tool's log lines after a snapshot is written whole (etcd-backup-restore's snapshotter.go). */
const GO_FULL_SAVED = /Successfully saved full snapshot at/;
const GO_DELTA_SAVED = /Total time to save delta snapshot/;

function spawnSubject(subject: Subject, args: string[], env: NodeJS.ProcessEnv, cwd: string, keepLines?: RegExp): Spawned {
  // The AWS SDK v2 of the Go tool v0.41 and later refuses an S3 store configured from a credentials file while
  // AWS_CA_BUNDLE is set ("unable to add custom RootCAs HTTPClient"): the peer runs without it (as in interop).
  // HOME is `/` for the peer: v0.41 and later join a Local store's container to $HOME even when it is absolute,
  // so with the caller's HOME the Go server, copy and compact read and wrote under it and found no chain
  // (a v0.43.0 run stored no delta and copied and compacted nothing in 0.1 s). `/` + the absolute path is the
  // path itself, which every version reads alike.
  const { AWS_CA_BUNDLE: _caBundle, ...inherited } = process.env;
  const child = spawn(subject.command, [...subject.prefix, ...args], {
    cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...(subject.name === 'go' ? { ...inherited, HOME: '/' } : process.env), ...env },
  });
  if (child.pid === undefined) throw new Error(`could not start ${subject.command}`);
  const sampler = new ProcSampler(child.pid, sampleMs);
  let tail = '';
  const kept: Array<{ t: number; line: string }> = [];
  let partial = '';
  const goSaved = { full: 0, delta: 0 };
  const keep = (d: string): void => {
    tail = (tail + d).slice(-16 * 1024);
    const lines = (partial + d).split('\n');
    partial = lines.pop()!;
    for (const l of lines) {
      if (keepLines?.test(l)) kept.push({ t: sampler.now(), line: l });
      if (GO_FULL_SAVED.test(l)) goSaved.full++;
      else if (GO_DELTA_SAVED.test(l)) goSaved.delta++;
    }
  };
  child.stdout?.setEncoding('utf8').on('data', keep);
  child.stderr?.setEncoding('utf8').on('data', keep);
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code, signal) => {
      sampler.stop();
      resolve(code ?? (signal ? -1 : null));
    });
    child.once('error', () => resolve(-1));
  });
  return {
    child,
    sampler,
    exited,
    logTail: () => tail,
    keptLines: () => [...kept],
    goSaved,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const t = setTimeout(() => child.kill('SIGKILL'), 30_000);
      const code = await exited;
      clearTimeout(t);
      return code;
    },
  };
}

interface Server extends Spawned {
  url: string;
}

/** `server` of a subject on a free port; resolves once it answers /healthz (any status). */
async function startServer(subject: Subject, args: string[], env: NodeJS.ProcessEnv, cwd: string, keepLines?: RegExp): Promise<Server> {
  const port = await freePort();
  // A pod mounts etcd's config file into this container too, and the Go server will not start without it.
  // Its pod's name and namespace too, as a StatefulSet gives them.
  if (env.ETCD_CONF === undefined) env = { ...env, ETCD_CONF: await writeEtcdConf(cwd, args) };
  env = { POD_NAME: POD, POD_NAMESPACE: NS, ...env };
  const p = spawnSubject(subject, ['server', `--server-port=${port}`, ...args], env, cwd, keepLines);
  const url = `http://127.0.0.1:${port}`;
  const outcome = await waitFor(
    async () => {
      if (p.child.exitCode !== null || p.child.signalCode !== null) return 'exited';
      await (await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) })).arrayBuffer();
      return 'listening';
    },
    `${subject.name} server to listen on ${url}`,
    60_000,
    100,
  ).catch(async (err: unknown) => {
    await p.stop('SIGKILL');
    throw new Error(`${(err as Error).message}:\n${p.logTail()}`);
  });
  if (outcome === 'exited') throw new Error(`${subject.name} server exited early (${p.child.exitCode}):\n${p.logTail()}`);
  return { ...p, url };
}

let urlMap: boolean | undefined;

/** Whether the peer is etcd-backup-restore v0.41 or later (the etcd config's URL map); false without a peer. */
function peerReadsUrlMap(): boolean {
  const peer = process.env.ETCDBRCTL_PEER;
  if (peer === undefined || peer === '') return false;
  // The Go tool logs its version to stderr (logrus), not stdout.
  const printed = spawnSync(peer, ['--version'], { encoding: 'utf8' });
  urlMap ??= etcdLineFor(`${printed.stdout}${printed.stderr}`) === '3.5';
  return urlMap;
}

/** A minimal etcd config file in `dir` for the member `args` name (its data dir and the endpoint's port). */
async function writeEtcdConf(dir: string, args: readonly string[]): Promise<string> {
  const value = (name: string): string | undefined => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const client = value('endpoints') ?? 'http://127.0.0.1:2379';
  const peerPort = await freePort();
  const conf = path.join(dir, 'etcd.conf.yaml');
  await writeFile(
    conf,
    [
      `name: ${POD}`,
      `data-dir: ${value('data-dir') ?? path.join(dir, 'data')}`,
      `listen-client-urls: ${client}`,
      `listen-peer-urls: http://127.0.0.1:${peerPort}`,
      // The form the Go server parses for the member lease: the legacy template of the etcd-druid of v0.23's
      // time (scheme@service@namespace@port), or the member-name maps of today's, for the client URLs too
      // (v0.41 and later read only those, and v0.43.0 exits on a plain advertise-client-urls string).
      ...(peerReadsUrlMap()
        ? ['advertise-client-urls:', `  ${POD}: [${client}]`, 'initial-advertise-peer-urls:', `  ${POD}: [http://127.0.0.1:${peerPort}]`]
        : [`advertise-client-urls: ${client}`, `initial-advertise-peer-urls: http@etcd-main-peer@${NS}@${peerPort}`]),
      `initial-cluster: ${POD}=http://127.0.0.1:${peerPort}`,
      'initial-cluster-token: etcd-cluster',
      'initial-cluster-state: new',
      '',
    ].join('\n'),
  );
  return conf;
}

/**
 * Waits until `probe()` reaches `target`, for as long as it keeps rising: fails when it has not risen for
 * `stallMs` (the clock restarts at every rise).
 */
async function waitForProgress(probe: () => Promise<number>, target: number, what: string, stallMs: number): Promise<void> {
  let best = -1;
  for (;;) {
    const seen = best;
    const reached = await waitFor(
      async () => {
        const now = await probe();
        if (now >= target) return 'done';
        if (now <= seen) return undefined;
        best = now;
        return 'rose';
      },
      `${what} (no progress for ${stallMs / 1000} s; at ${Math.max(best, 0)})`,
      stallMs,
      500,
    );
    if (reached === 'done') return;
  }
}

/** `GET /snapshot/latest`: the newest full snapshot and the deltas after it (Go's JSON field names). */
async function latest(url: string): Promise<{ full?: { lastRevision: number }; lastDelta?: { lastRevision: number } }> {
  const res = await fetch(`${url}/snapshot/latest`, { signal: AbortSignal.timeout(30_000) });
  if (!res.ok) return {};
  const body = (await res.json()) as {
    fullSnapshot: { lastRevision: number } | null;
    deltaSnapshots: Array<{ lastRevision: number }> | null;
  };
  return {
    ...(body.fullSnapshot ? { full: body.fullSnapshot } : {}),
    ...(body.deltaSnapshots?.length ? { lastDelta: body.deltaSnapshots.at(-1)! } : {}),
  };
}

/** The start-up full snapshot (a fresh store has none): waited for, so the measured one is the bench's own. */
async function startupFull(server: Server, subject: Subject, timeoutMs: number): Promise<void> {
  const done = async (): Promise<true | undefined> =>
    (await latest(server.url)).full && (subject.name !== 'go' || server.goSaved.full > 0) ? true : undefined;
  await waitFor(done, 'the start-up full snapshot', timeoutMs, 250).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}:\n${server.logTail()}`);
  });
}

// ---------------------------------------------------------------------------------------------------------
// Figures, targets, verdicts.

interface Target {
  max: number;
  text: string;
}

interface Figure {
  case: string;
  figure: string;
  unit: string;
  target?: Target;
  ours?: number;
  go?: number;
}

const figures = new Map<string, Figure>();

function record(subject: Subject, caseName: string, figure: string, unit: string, value: number, target?: Target): void {
  const key = `${caseName}|${figure}`;
  const f = figures.get(key) ?? { case: caseName, figure, unit, ...(target ? { target } : {}) };
  f[subject.name] = Number.isFinite(value) ? round1(value) : NaN;
  figures.set(key, f);
  console.log(`  ${subject.name.padEnd(4)} ${caseName} ${figure}: ${Number.isFinite(value) ? round1(value) : '-'} ${unit}`);
}

const verdict = (f: Figure, v: number | undefined): string =>
  v === undefined || !Number.isFinite(v) ? '-' : f.target === undefined ? '' : v <= f.target.max ? 'pass' : 'FAIL';

/** The idle RSS of the same store's server (a full snapshot's RSS after is held against it). */
const idleOf = (s: Subject, store: 'local' | 's3'): number | undefined => figures.get(`idle/${store}|RSS at end`)?.[s.name];

// ---------------------------------------------------------------------------------------------------------
// Shared infrastructure of a run.

interface Env {
  tmp: string;
  s3?: S3rverInstance;
  s3CredentialsFile: string;
}

function s3Flags(s3: S3rverInstance, prefix: string): string[] {
  // The endpoint comes from the credentials file (needS3), which the Go tool reads too; it has no flag for it.
  void s3;
  return ['--storage-provider=S3', '--store-container=bench', `--store-prefix=${prefix}`];
}

function localFlags(root: string, tmp: string, prefix?: string): string[] {
  return [
    '--storage-provider=Local',
    `--store-container=${root}`,
    `--snapstore-temp-directory=${tmp}`,
    ...(prefix === undefined ? [] : [`--store-prefix=${prefix}`]),
  ];
}

// `none` says so: our default is compressed (gzip, as upstream since v0.40), the Go v0.23 default is not.
const compressionFlags = (c: string): string[] =>
  c === 'none' ? ['--compress-snapshots=false'] : ['--compress-snapshots=true', `--compression-policy=${c}`];

async function needS3(env: Env): Promise<S3rverInstance> {
  if (env.s3 === undefined) {
    env.s3 = await startS3rver({ bucket: 'bench' });
    await writeFile(
      env.s3CredentialsFile,
      JSON.stringify({
        accessKeyID: S3RVER_ACCESS_KEY,
        secretAccessKey: S3RVER_SECRET_KEY,
        region: 'us-east-1',
        endpoint: env.s3.endpoint,
        s3ForcePathStyle: true,
      }),
    );
  }
  return env.s3;
}

// ---------------------------------------------------------------------------------------------------------
// Cases.

async function idleCases(env: Env, subs: Subject[]): Promise<void> {
  const etcd = await startTestEtcd();
  const client = new Etcd3({ hosts: etcd.clientUrl });
  const fake = await FakeKubeApiServer.start();
  try {
    for (let i = 0; i < 200; i++) await client.put(`/registry/bench/idle/${i}`).value(Buffer.alloc(512, 0x61 + (i % 26)));
    const kubeconfig = path.join(env.tmp, 'kubeconfig');
    await writeFile(kubeconfig, fake.kubeconfig());
    const s3 = await needS3(env);
    const variants = [
      { name: 'idle/local', target: 80, k8s: false, s3: false },
      // The idle figure a full snapshot to S3 settles back to (the S3 client's modules are loaded; no Kubernetes).
      { name: 'idle/s3', target: 100, k8s: false, s3: true },
      { name: 'idle/s3+k8s', target: 100, k8s: true, s3: true },
    ];
    for (const v of variants) {
      for (const s of subs) {
        const dir = await mkdtemp(path.join(env.tmp, `idle-${s.name}-`));
        let extraEnv: NodeJS.ProcessEnv = {};
        let flags: string[];
        if (v.k8s) {
          // What etcd-druid creates before the StatefulSet: the EtcdMember and the leases.
          fake.reset();
          fake.seed(ETCD_MEMBERS, {
            apiVersion: 'druid.gardener.cloud/v1alpha1',
            kind: 'EtcdMember',
            metadata: { name: POD, namespace: NS, labels: { 'gardener.cloud/owned-by': 'etcd-main' } },
          });
          for (const name of [POD, 'etcd-main-full-snap', 'etcd-main-delta-snap'])
            fake.seed(LEASES, { metadata: { name, namespace: NS }, spec: {} });
          // etcd-druid's heartbeat period (10 s, the default), not the tests' 1 s.
          flags = [...s3Flags(s3, `idle-${s.name}`), ...LEASE_RENEWAL_FLAGS.filter((f) => !f.startsWith('--k8s-heartbeat-duration'))];
          extraEnv = { AWS_APPLICATION_CREDENTIALS_JSON: env.s3CredentialsFile, KUBECONFIG: kubeconfig, POD_NAMESPACE: NS, POD_NAME: POD };
        } else if (v.s3) {
          flags = s3Flags(s3, `idle-s3-${s.name}`);
          extraEnv = { AWS_APPLICATION_CREDENTIALS_JSON: env.s3CredentialsFile };
        } else {
          flags = localFlags(path.join(dir, 'store'), path.join(dir, 'snaptmp'));
        }
        const server = await startServer(
          s,
          [`--endpoints=${etcd.clientUrl}`, `--data-dir=${path.join(dir, 'data')}`, NO_SCHEDULE, ...flags],
          extraEnv,
          dir,
        );
        try {
          const end = idleSeconds * 1000;
          await sleep(Math.max(0, end - server.sampler.now()));
          server.sampler.sample();
          const all = server.sampler.window(0);
          const half = server.sampler.window(end / 2);
          if (server.child.exitCode !== null) throw new Error(`${s.name} server exited during the idle window:\n${server.logTail()}`);
          if (v.k8s) {
            const status = fake.read(ETCD_MEMBERS, NS, POD)?.status as { transitions?: unknown[] } | undefined;
            const holder = (fake.read(LEASES, NS, POD)?.spec as { holderIdentity?: string } | undefined)?.holderIdentity;
            console.log(`  ${s.name} EtcdMember status ${status ? 'published' : 'NOT published'}; member lease holder ${holder ?? 'none'}`);
          }
          record(s, v.name, 'RSS at end', 'MiB', all.lastMiB, { max: v.target, text: `<= ${v.target}` });
          record(s, v.name, 'peak RSS', 'MiB', all.peakMiB);
          record(s, v.name, 'CPU (2nd half)', 'ms/s', (half.cpuSeconds * 1000) / half.seconds, { max: 2, text: '<= 2' });
        } finally {
          await server.stop();
          await rm(dir, { recursive: true, force: true });
        }
      }
    }
  } finally {
    client.close();
    await fake.stop();
    await etcd.cleanup();
  }
}

async function fullCases(env: Env, subs: Subject[]): Promise<void> {
  const etcd = await startTestEtcd({ quotaBackendBytes: 8 * 1024 * MiB });
  try {
    console.log(`filling etcd with ~${fullMb} MiB ...`);
    const filled = await fillEtcd(benchDir, etcd.clientUrl, fullMb);
    console.log(`  filled ${filled.keys} keys, ${round1(filled.bytes / MiB)} MiB of values in ${round1(filled.seconds)} s`);
    const s3 = await needS3(env);
    for (const store of ['local', 's3'] as const) {
      for (const c of compressions) {
        const name = `full/${store}/${c}`;
        for (const s of subs) {
          if (s.name === 'go' && c === 'zstd') {
            console.log(`  go ${name}: etcd-backup-restore has no zstd`);
            continue;
          }
          const dir = await mkdtemp(path.join(env.tmp, `full-${s.name}-`));
          const prefix = `full-${store}-${c}-${s.name}`;
          const storeFlags = store === 'local' ? localFlags(path.join(dir, 'store'), path.join(dir, 'snaptmp')) : s3Flags(s3, prefix);
          const server = await startServer(
            s,
            [
              `--endpoints=${etcd.clientUrl}`,
              `--data-dir=${path.join(dir, 'data')}`,
              NO_SCHEDULE,
              '--delta-snapshot-period=0s',
              ...storeFlags,
              ...compressionFlags(c),
            ],
            store === 's3' ? { AWS_APPLICATION_CREDENTIALS_JSON: env.s3CredentialsFile } : {},
            dir,
          );
          try {
            await startupFull(server, s, 30 * 60_000);
            const startupPeak = server.sampler.window(0).peakMiB;
            await sleep(Math.min(10_000, settleSeconds * 1000));
            server.sampler.sample();
            const before = server.sampler.window(server.sampler.now() - 1000).lastMiB;
            // One write first: the Go server answers an on-demand full snapshot at an unchanged revision without
            // taking one.
            const writer = new Etcd3({ hosts: etcd.clientUrl });
            try {
              await writer.put(`footprint-${prefix}`).value('1');
            } finally {
              writer.close();
            }
            const t0 = server.sampler.now();
            const res = await fetch(`${server.url}/snapshot/full`, { signal: AbortSignal.timeout(60 * 60_000) });
            const body = await res.text();
            const t1 = server.sampler.now();
            if (!res.ok) throw new Error(`${s.name} GET /snapshot/full answered ${res.status}: ${body}\n${server.logTail()}`);
            const during = server.sampler.window(t0, t1);
            await sleep(settleSeconds * 1000);
            server.sampler.sample();
            const after = server.sampler.window(server.sampler.now() - 1000).lastMiB;
            const idle = idleOf(s, store);
            record(s, name, 'seconds', 's', (t1 - t0) / 1000);
            record(s, name, 'CPU', 's', during.cpuSeconds);
            record(s, name, 'RSS before', 'MiB', before);
            record(s, name, 'peak RSS', 'MiB', during.peakMiB, { max: 128, text: '<= 128' });
            record(s, name, 'start-up snapshot peak', 'MiB', startupPeak, { max: 128, text: '<= 128' });
            record(
              s,
              name,
              `RSS ${settleSeconds}s after`,
              'MiB',
              after,
              idle === undefined ? undefined : { max: idle + 10, text: `<= idle ${round1(idle)} + 10` },
            );
          } finally {
            await server.stop();
            await rm(dir, { recursive: true, force: true });
          }
        }
      }
    }
  } finally {
    await etcd.cleanup();
  }
}

function runPutLoad(endpoint: string, rate: number, seconds: number): Promise<PutLoadResult> {
  const script = path.join(benchDir, 'support', 'put-load.ts');
  return new Promise((resolve, reject) => {
    const proc = spawn(
      process.execPath,
      [
        '--conditions=development',
        '--import',
        'tsx',
        script,
        `--endpoint=${endpoint}`,
        `--rate=${rate}`,
        `--seconds=${seconds}`,
        '--value-bytes=1024',
      ],
      { cwd: path.resolve(benchDir, '..', '..'), stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    proc.once('error', reject);
    proc.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`load generator failed (exit ${code})`));
      try {
        resolve(JSON.parse(out.trim().split('\n').pop() ?? '') as PutLoadResult);
      } catch (e) {
        reject(e as Error);
      }
    });
  });
}

/** Every revision after the newest full snapshot up to `lastRevision`, counted in the stored deltas: what is missing or doubled. */
async function chainProblems(store: SnapStore, lastRevision: number): Promise<{ deltas: number; problems: string[] }> {
  const list = await store.list();
  const full = list.filter((s) => s.kind === 'Full').at(-1);
  if (!full) return { deltas: 0, problems: ['no full snapshot in the store'] };
  const deltas = list.filter((s): s is Snapshot => s.kind === 'Incr' && s.startRevision > full.lastRevision);
  const problems: string[] = [];
  let next = full.lastRevision + 1;
  for (const d of deltas) {
    let lastSeen = 0;
    const parser = new DeltaPayloadParser(d.snapName);
    parser.on('data', (e: DeltaEvent) => {
      if (e.modRevision === lastSeen) return; // more events of one revision (a txn)
      if (e.modRevision !== next && problems.length < 20)
        problems.push(`${d.snapName}: revision ${e.modRevision} where ${next} was expected`);
      next = e.modRevision + 1;
      lastSeen = e.modRevision;
    });
    try {
      await pipeline(await store.fetch(d), createDecompressStream(d.compressionSuffix, d.snapName), parser);
    } catch (err) {
      // An unreadable delta is a finding of the run, not a broken bench (v0.43.0 once left its last delta a
      // truncated gzip stream after the SIGTERM that ended its case); the revisions after it count as missing.
      problems.push(`${d.snapName} unreadable: ${err instanceof Error ? err.message : String(err)}`);
      next = d.lastRevision + 1;
    }
  }
  if (next - 1 !== lastRevision) problems.push(`the deltas end at revision ${next - 1}, etcd is at ${lastRevision}`);
  return { deltas: deltas.length, problems };
}

async function deltaCase(env: Env, subs: Subject[]): Promise<void> {
  for (const s of subs) {
    const dir = await mkdtemp(path.join(env.tmp, `delta-${s.name}-`));
    // etcd on tmpfs: the bench asks for the highest rate etcd takes, which a shared disk's fsyncs would cap.
    const etcdRoot = await mkdtemp('/dev/shm/etcdbr-footprint-').catch(() => dir);
    let etcd: TestEtcd | undefined;
    try {
      etcd = await startTestEtcd({ dataDir: path.join(etcdRoot, 'etcd'), quotaBackendBytes: 8 * 1024 * MiB });
      const root = path.join(dir, 'store');
      const server = await startServer(
        s,
        [
          `--endpoints=${etcd.clientUrl}`,
          `--data-dir=${path.join(dir, 'data')}`,
          NO_SCHEDULE,
          '--delta-snapshot-period=20s',
          `--delta-snapshot-memory-limit=${DELTA_MEMORY_LIMIT}`,
          '--compress-snapshots=true',
          '--compression-policy=gzip',
          ...localFlags(root, path.join(dir, 'snaptmp')),
        ],
        {},
        dir,
      );
      let load: PutLoadResult;
      try {
        await startupFull(server, s, 120_000);
        await sleep(5_000);
        server.sampler.sample();
        const before = server.sampler.window(server.sampler.now() - 1000).lastMiB;
        const t0 = server.sampler.now();
        load = await runPutLoad(etcd.clientUrl, deltaRate, deltaSeconds);
        // The last delta comes at the next period or limit. A watcher that fell behind during the load is
        // fed by etcd's catch-up loop, 1,000 revisions per 100 ms tick at most (both tools alike: on a machine
        // where etcd takes 20,000 puts/s, 60 s of load take minutes to drain), so the wait lasts as long as the
        // deltas advance, and fails only after two periods and a margin without progress.
        await waitForProgress(
          async () => (await latest(server.url)).lastDelta?.lastRevision ?? 0,
          load.lastRevision,
          `${s.name}: deltas up to revision ${load.lastRevision}`,
          60_000,
        );
        // The Go tool lists a delta while it writes it: wait until it has logged every listed one as written.
        if (s.name === 'go') {
          const listed = async (): Promise<number> =>
            (await readdir(root, { recursive: true })).filter((f) => path.basename(f).startsWith('Incr-')).length;
          await waitFor(async () => (server.goSaved.delta >= (await listed()) ? true : undefined), 'go: every listed delta written');
        }
        const during = server.sampler.window(t0);
        record(s, 'delta', 'puts/s reached', '/s', load.putsPerSecond);
        // CPU from the first put to the last delta stored, per 1,000 puts: what capturing a write costs.
        record(s, 'delta', 'CPU per 1,000 puts', 'ms', (during.cpuSeconds * 1_000_000) / load.puts);
        record(s, 'delta', 'RSS before load', 'MiB', before);
        record(s, 'delta', 'peak RSS', 'MiB', during.peakMiB, {
          max: round1(before + (1.2 * DELTA_MEMORY_LIMIT) / MiB),
          text: `<= before ${round1(before)} + 120`,
        });
        record(s, 'delta', 'peak - before', 'MiB', during.peakMiB - before, { max: 120, text: '<= 1.2 x 100' });
      } finally {
        await server.stop();
      }
      const store = await openLocalStore({
        provider: 'Local',
        rootDir: root,
        container: root,
        prefix: 'v2',
        maxParallelChunkUploads: 5,
        minChunkSize: 5 * MiB,
        tempDir: dir,
      });
      try {
        const check = await chainProblems(store, load.lastRevision);
        for (const p of check.problems) console.log(`  ${s.name} delta chain: ${p}`);
        console.log(`  ${s.name} ${check.deltas} deltas, ${load.puts} puts, ${load.errors} put errors`);
        record(s, 'delta', 'chain problems (lost events)', 'count', check.problems.length, { max: 0, text: '0' });
      } finally {
        await store.close();
      }
    } finally {
      await etcd?.cleanup();
      await rm(dir, { recursive: true, force: true });
      if (etcdRoot !== dir) await rm(etcdRoot, { recursive: true, force: true });
    }
  }
}

/** The restore's log lines that name its steps and its replay path (ours; the Go tool's differ and print nothing). */
const RESTORE_STEPS = /offline|online|replay etcd|quota|base snapshot restored|restor(ed|ing)|validat|fetch/i;

/** A JSON log line as its message and fields (no level or time); another line as it is. */
function logLineText(line: string): string {
  try {
    const { msg, level: _level, time: _time, ...fields } = JSON.parse(line) as Record<string, unknown>;
    return `${String(msg)} ${JSON.stringify(fields)}`;
  } catch {
    return line;
  }
}

/** The chain the restore and the commands read: root/etcd-main/v2, a base full and `revisions` revisions in gzip deltas. */
async function writeChain(env: Env): Promise<string> {
  const root = path.join(env.tmp, 'chain');
  const store = await openLocalStore({
    provider: 'Local',
    rootDir: root,
    container: root,
    prefix: 'etcd-main/v2',
    maxParallelChunkUploads: 5,
    minChunkSize: 5 * MiB,
    tempDir: env.tmp,
  });
  const src = await startTestEtcd();
  const client = new Etcd3({ hosts: src.clientUrl });
  try {
    for (let i = 0; i < 300; i++) await client.put(`/registry/bench/base/${i}`).value(Buffer.alloc(200, 0x62));
    const base = await baseSnapshot(client, store);
    const t0 = Date.now();
    const deltas = await writeSmallPutChain(store, base, {
      revisions,
      perDelta: 5000,
      keySpace,
      valueBytes: 100,
      compression: 'gzip',
    });
    console.log(
      `chain: base at revision ${base.lastRevision}, ${revisions} revisions over ${keySpace} distinct keys in ${deltas} gzip deltas (${round1((Date.now() - t0) / 1000)} s to write)`,
    );
  } finally {
    client.close();
    await src.cleanup();
    await store.close();
  }
  return root;
}

async function restoreCase(env: Env, subs: Subject[], chain: string): Promise<void> {
  for (const s of subs) {
    const dir = await mkdtemp(path.join(env.tmp, `restore-${s.name}-`));
    const clientPort = await freePort();
    const peerPort = await freePort();
    const dataDir = path.join(dir, 'data', 'new.etcd');
    // The pod's data volume exists before the containers start (the Go server writes its safe_guard file there).
    await mkdir(path.dirname(dataDir), { recursive: true });
    const conf = path.join(dir, 'etcd.conf.yaml');
    await writeFile(
      conf,
      [
        `name: ${POD}`,
        `data-dir: ${dataDir}`,
        `listen-client-urls: http://127.0.0.1:${clientPort}`,
        `listen-peer-urls: http://127.0.0.1:${peerPort}`,
        `advertise-client-urls: http://127.0.0.1:${clientPort}`,
        `initial-advertise-peer-urls: http://127.0.0.1:${peerPort}`,
        `initial-cluster: ${POD}=http://127.0.0.1:${peerPort}`,
        'initial-cluster-token: etcd-cluster',
        'initial-cluster-state: new',
        '',
      ].join('\n'),
    );
    const server = await startServer(
      s,
      [
        `--endpoints=http://127.0.0.1:${clientPort}`,
        ...localFlags(chain, path.join(dir, 'snaptmp'), 'etcd-main'),
        `--data-dir=${dataDir}`,
        `--restoration-temp-snapshots-dir=${path.join(dir, 'restoration.tmp')}`,
        `--name=${POD}`,
        `--initial-cluster=${POD}=http://127.0.0.1:${peerPort}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
        NO_SCHEDULE,
      ],
      { ETCD_CONF: conf },
      dir,
      RESTORE_STEPS,
    );
    try {
      const t0 = server.sampler.now();
      // A server that exits ends the wait at once (the handshake alone would poll a closed port for an hour).
      const handshake = await Promise.race([
        initializationHandshake(server.url, { mode: 'full', pollMs: 500, timeoutMs: 60 * 60_000 }),
        server.exited.then((code) => {
          throw new Error(`${s.name} server exited (${code}) during the initialization:\n${server.logTail()}`);
        }),
      ]);
      const t1 = server.sampler.now();
      if (!handshake.ok) throw new Error(`${s.name} initialization failed (${handshake.seen.join(' -> ')}):\n${server.logTail()}`);
      const during = server.sampler.window(t0, t1);
      // Which path the replay took (offline or through an etcd), and the peak RSS of each step up to its line.
      let from = t0;
      const step = (t: number, what: string): void => {
        const peak = server.sampler.window(from, t).peakMiB;
        console.log(
          `  ${s.name} +${round1((t - t0) / 1000)} s, peak ${Number.isFinite(peak) ? `${round1(peak)} MiB` : '-'} since the line before: ${what}`,
        );
        from = t;
      };
      for (const { t, line } of server.keptLines()) if (t >= t0) step(t, logLineText(line));
      step(t1, 'initialization Successful');
      record(s, 'restore (init)', 'seconds', 's', (t1 - t0) / 1000);
      record(s, 'restore (init)', 'peak RSS', 'MiB', during.peakMiB, { max: 160, text: '<= 160' });
      record(s, 'restore (init)', 'CPU', 's', during.cpuSeconds);
    } finally {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    }
  }
}

/** Runs a command to its end; its peak RSS, wall and CPU time. */
async function measureCommand(s: Subject, name: string, args: string[], extraEnv: NodeJS.ProcessEnv, cwd: string): Promise<void> {
  const p = spawnSubject(s, args, extraEnv, cwd);
  const timer = setTimeout(() => p.child.kill('SIGKILL'), 60 * 60_000);
  const code = await p.exited;
  clearTimeout(timer);
  if (code !== 0) throw new Error(`${s.name} ${args[0]} exited ${code}:\n${p.logTail()}`);
  const w = p.sampler.window(0);
  record(s, name, 'seconds', 's', w.seconds);
  record(s, name, 'peak RSS', 'MiB', w.peakMiB);
  record(s, name, 'CPU', 's', w.cpuSeconds);
}

async function commandCases(env: Env, subs: Subject[], chain: string): Promise<void> {
  for (const s of subs) {
    const dir = await mkdtemp(path.join(env.tmp, `commands-${s.name}-`));
    try {
      // `verify` is ours only: etcd-backup-restore has no such command.
      if (s.name === 'ours')
        await measureCommand(s, 'verify', ['verify', ...localFlags(chain, path.join(dir, 'snaptmp'), 'etcd-main')], {}, dir);
      else console.log(`  ${s.name} verify: no such command in etcd-backup-restore`);
      // A fresh S3 destination for each copy, so every copy copies the whole chain.
      const dest = await startS3rver({ bucket: 'copy' });
      const destCredentials = path.join(dir, 's3-copy.json');
      await writeFile(
        destCredentials,
        JSON.stringify({
          accessKeyID: S3RVER_ACCESS_KEY,
          secretAccessKey: S3RVER_SECRET_KEY,
          region: 'us-east-1',
          endpoint: dest.endpoint,
          s3ForcePathStyle: true,
        }),
      );
      try {
        await measureCommand(
          s,
          'copy (Local -> S3)',
          [
            'copy',
            '--source-storage-provider=Local',
            '--storage-provider=S3',
            '--store-container=copy',
            '--store-prefix=etcd-main',
            `--snapstore-temp-directory=${path.join(dir, 'snaptmp')}`,
          ],
          { SOURCE_STORAGE_CONTAINER: chain, AWS_APPLICATION_CREDENTIALS_JSON: destCredentials },
          dir,
        );
        // An exit 0 that copied nothing (a store path read wrongly) is no measurement.
        const copied = (await dest.rawKeys()).filter((k) => !k.includes(UPLOAD_PART_MARKER)).length;
        if (copied < 2) throw new Error(`${s.name} copy exited 0 but the destination holds ${copied} object(s)`);
      } finally {
        await dest.stop();
      }
      // compact writes a compacted full into the store: on a copy, so the chain stays as it is for the others.
      const copy = path.join(dir, 'chain');
      await cp(chain, copy, { recursive: true });
      await measureCommand(
        s,
        'compact',
        [
          'compact',
          ...localFlags(copy, path.join(dir, 'snaptmp'), 'etcd-main'),
          `--data-dir=${path.join(dir, 'compaction.etcd')}`,
          `--restoration-temp-snapshots-dir=${path.join(dir, 'compaction.tmp')}`,
        ],
        {},
        dir,
      );
      const before = (await readdir(chain, { recursive: true })).length;
      const after = (await readdir(copy, { recursive: true })).length;
      if (after <= before) throw new Error(`${s.name} compact exited 0 but wrote no compacted snapshot into ${copy}`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
}

// ---------------------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const subs = subjects();
  const binaries = await etcdBinaries();
  const etcdVersion = await binaries.version();
  const load0 = os.loadavg();
  console.log(
    `cases ${[...only].join(',')}; etcd ${etcdVersion}; node ${process.version}; load average ${load0.map((l) => l.toFixed(2)).join(' ')}`,
  );
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'etcdbr-footprint-'));
  const s3CredentialsFile = path.join(tmp, 's3.json');
  await writeFile(
    s3CredentialsFile,
    JSON.stringify({ accessKeyID: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY, region: 'us-east-1', s3ForcePathStyle: true }),
  );
  const env: Env = { tmp, s3CredentialsFile };
  const started = Date.now();
  const broken: string[] = [];
  const run = async (c: CaseName, fn: () => Promise<void>): Promise<void> => {
    if (!only.has(c)) return;
    console.log(`\n--- ${c} ---`);
    try {
      await fn();
    } catch (err) {
      broken.push(c);
      console.log(`!!! case ${c} broke: ${(err as Error).stack ?? String(err)}`);
    }
  };
  try {
    await mkdir(tmp, { recursive: true });
    await run('idle', () => idleCases(env, subs));
    await run('delta', () => deltaCase(env, subs));
    let chain: string | undefined;
    if (only.has('restore') || only.has('commands')) {
      console.log(`\nwriting a chain of ${revisions} revisions ...`);
      chain = await writeChain(env);
    }
    await run('restore', () => restoreCase(env, subs, chain!));
    await run('commands', () => commandCases(env, subs, chain!));
    // Last: the fill and a dozen snapshots of ~1 GiB take longest; what ran before is printed as it comes.
    await run('full', () => fullCases(env, subs));
  } finally {
    await env.s3?.stop();
    await rm(tmp, { recursive: true, force: true });
  }

  const rows = [...figures.values()];
  const load1 = os.loadavg();
  console.log(
    `\n${subs.map((s) => s.name).join(' beside ')}, RSS of the etcdbrctl process (/proc VmRSS every ${sampleMs} ms), ` +
      `${round1((Date.now() - started) / 1000)} s in all; load average ${load1.map((l) => l.toFixed(2)).join(' ')}`,
  );
  console.log(
    table(
      ['case', 'figure', 'unit', 'target', 'ours', 'ours ok', 'go', 'go ok'],
      rows.map((f) => [
        f.case,
        f.figure,
        f.unit,
        f.target?.text ?? '',
        f.ours === undefined || !Number.isFinite(f.ours) ? '-' : f.ours,
        verdict(f, f.ours),
        f.go === undefined || !Number.isFinite(f.go) ? '-' : f.go,
        verdict(f, f.go),
      ]),
    ),
  );
  console.log(
    JSON.stringify({
      bench: 'footprint',
      node: process.version,
      etcd: etcdVersion,
      peer: process.env.ETCDBRCTL_PEER ?? null,
      cases: [...only],
      params: { idleSeconds, fullMb, compressions, settleSeconds, deltaSeconds, deltaRate, revisions, keySpace, sampleMs },
      loadAverage: { before: load0, after: load1 },
      broken,
      figures: rows.map((f) => ({
        ...f,
        oursPass: f.target && f.ours !== undefined && Number.isFinite(f.ours) ? f.ours <= f.target.max : null,
        goPass: f.target && f.go !== undefined && Number.isFinite(f.go) ? f.go <= f.target.max : null,
      })),
    }),
  );
  if (broken.length > 0) process.exitCode = 1;
}

await main();
