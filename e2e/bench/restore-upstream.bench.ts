/**
 * Restore of chains written by the Go etcd-backup-restore's own sidecar (issue 37): `bin/etcdbrctl restore`
 * beside the Go tool's `restore` on the same store, whole processes, alternating, with the same result checked.
 *
 *   ETCDBRCTL_PEER=/path/to/etcdbrctl-v0.43.0 npm run bench -- --compiled restore-upstream [-- --runs=5 --chains=10000,20000,100000]
 *   --peers=BIN[,BIN...]  Go binaries to measure beside ours (default ETCDBRCTL_PEER; none: ours alone)
 *   --chains=N[,N...]     chains by their number of writes (about one delta revision each); default 10000,20000,100000
 *   --deltas=large,small  the sidecar's delta settings (default both): large = etcd-druid's defaults (a delta
 *                         every 20 s or 100 MiB of events: a few large deltas), small = the fixtures' (every 2 s
 *                         or 1 MiB: about a thousand revisions each; the Go restore of v0.41 and later then
 *                         compacts its etcd after every 10th delta)
 *   --runs=R              timed runs per tool and chain (default 5); --check=0 skips the hashkv check
 *   --warm=W              then ours restores each chain W times more in one process (support/restore-in-process.mjs):
 *                         the first pays for loading the restore's code and V8 compiling it, the rest do not
 *   --sidecar=S           then ours restores each chain S times through the sidecar: `server` with an empty data
 *                         dir, timed from POST /initialization/start to "Successful" (how etcd-druid's pods restore)
 *   env: BENCH_CHAIN_WRITER (the Go binary, v0.43.x, that writes missing chains; default: the first of --peers
 *        that is v0.43), BENCH_CHAIN_DIR (where chains are kept; default node_modules/.cache/restore-chains)
 *
 * Chains: scripts/upstream-fixture.mjs runs the Go server (its sidecar: delta snapshots every 2 s or 1 MiB,
 * gzip) on a single-member etcd 3.5.16 under eight concurrent writers (values of 50-1,000 random bytes,
 * overwrites, deletes, two-put transactions, puts on four leases), and checks that the Go tool restores the
 * source's exact keys. A chain is written once and kept (a few minutes for 100,000 writes), so that every run
 * and every later bench call restores the same store.
 *
 * Each run restores the chain with every tool in turn into a fresh data dir, the order reversed every other
 * run so that neither always goes first (page cache, writeback). Ours runs on etcd 3.5.16's etcdutl (its base
 * restore; the offline replay needs no etcd), the Go tools with their built-in etcd 3.x libraries. Measured
 * from outside by /usr/bin/time: wall seconds, CPU (user + system, the process and the children it waited
 * for: etcdutl for ours) and the peak RSS of the largest single process. The 1-minute load average is taken
 * before each run: the figures are only as quiet as the machine. Ours' own log gives where its time went
 * (process start, base, fetch, replay, check and fsync, exit). After the first run of each tool, etcd 3.5.16
 * is started on its result and `etcdctl endpoint hashkv` asked (not timed), and the keys at the compact
 * revision and every event after it read back without their leases (etcdctl get and watch): every tool must
 * give the same history, compact revision and revision. The hashkv themselves differ since issue 40 (ours
 * keeps the keys' leases, the Go tool writes them without); both are printed. Medians with min-max; the last
 * line is JSON.
 */
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, open, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { findEtcdBinaries, type EtcdBinaries } from '../../src/etcd/binaries.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { freePort } from '../../src/etcd/ports.js';
import { SINGLE_MEMBER_RAFT_ARGS } from '../../test/support/etcd.js';
import { waitFor } from '../../test/support/wait.js';
import { arg, flag, median, round1, table } from './support/measure.js';

const execFileAsync = promisify(execFile);
/** This bench's directory; ETCDBR_BENCH_DIR when it runs bundled (scripts/bench.mjs --compiled). */
const benchDir = process.env.ETCDBR_BENCH_DIR ?? path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.join(benchDir, '..', '..');
const BIN = path.join(ROOT, 'bin', 'etcdbrctl');
const FIXTURE_SCRIPT = path.join(ROOT, 'scripts', 'upstream-fixture.mjs');
const CHAIN_DIR = process.env.BENCH_CHAIN_DIR ?? path.join(ROOT, 'node_modules', '.cache', 'restore-chains');
const GNU_TIME = '/usr/bin/time';
/** etcd 3.5.16 as scripts/setup.mjs unpacks it (test/support/etcd.ts's path is its own file's, wrong when bundled). */
const ETCD35_BIN_DIR = path.join(ROOT, 'node_modules', '.cache', 'etcd-3.5.16', 'usr', 'bin');

let etcd35: Promise<EtcdBinaries> | undefined;
function etcd35Binaries(): Promise<EtcdBinaries> {
  if (!existsSync(path.join(ETCD35_BIN_DIR, 'etcdutl')))
    throw new Error(`no etcd 3.5 at ${ETCD35_BIN_DIR}: run node scripts/setup.mjs --tests`);
  etcd35 ??= findEtcdBinaries({ etcdBin: path.join(ETCD35_BIN_DIR, 'etcd'), path: '' });
  return etcd35;
}
/** The chains' writer: its version names the cached chain, so a chain is never taken for another writer's. */
const WRITER_VERSION = 'v0.43';

function option(name: string): string | undefined {
  return process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
}

const load1 = (): number => os.loadavg()[0]!;

interface Tool {
  /** "ours" or the Go tool's version, e.g. "v0.43.0". */
  label: string;
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
}

/** The version a Go etcdbrctl prints (`etcd-backup-restore Version: v0.43.0`). */
async function goVersion(bin: string): Promise<string> {
  const { stdout, stderr } = await execFileAsync(bin, ['--version']);
  const m = /Version: (v\d+\.\d+\.\d+)/.exec(stdout + stderr);
  if (!m) throw new Error(`${bin} --version printed no etcd-backup-restore version`);
  return m[1]!;
}

// ------------------------------------------------------------------------------------------- chains

interface Chain {
  writes: number;
  settings: DeltaSettings;
  /** The Local store's container (the objects are under `v2/`). */
  container: string;
  fulls: number;
  deltas: number;
  baseRevision: number;
  lastRevision: number;
  /** Bytes of the stored (gzip) objects. */
  storedBytes: number;
}

async function describeChain(writes: number, settings: DeltaSettings, dir: string): Promise<Chain> {
  const container = path.join(dir, 'snapstore');
  const names = (await readdir(path.join(container, 'v2'))).sort();
  let storedBytes = 0;
  for (const n of names) storedBytes += (await stat(path.join(container, 'v2', n))).size;
  const revs = (n: string) => /^(?:Full|Incr)-(\d+)-(\d+)-/.exec(n)!.slice(1).map(Number) as [number, number];
  const fulls = names.filter((n) => n.startsWith('Full-'));
  const deltas = names.filter((n) => n.startsWith('Incr-'));
  // The v0.43 server may take its start-up full twice at one revision (when the two fall into different
  // seconds): the restore's base is the newest full either way.
  if (fulls.length === 0 || deltas.length === 0) throw new Error(`${container}: expected a full and deltas, found ${names.join(' ')}`);
  return {
    writes,
    settings,
    container,
    fulls: fulls.length,
    deltas: deltas.length,
    baseRevision: revs(fulls.at(-1)!)[1],
    lastRevision: revs(deltas.at(-1)!)[1],
    storedBytes,
  };
}

/** The Go sidecar's delta settings a chain is written with (scripts/upstream-fixture.mjs's flags). */
const DELTA_SETTINGS = {
  large: { dirPart: '-large', args: ['--delta-period=20s', '--delta-memory-limit=104857600'] },
  small: { dirPart: '', args: ['--delta-period=2s', '--delta-memory-limit=1048576'] },
} as const;
type DeltaSettings = keyof typeof DELTA_SETTINGS;

/** The chain of `writes` writes from the cache, written first (by the Go sidecar) when missing. */
async function ensureChain(writes: number, deltas: DeltaSettings, writer: string | undefined): Promise<Chain> {
  const settings = DELTA_SETTINGS[deltas];
  const dir = path.join(CHAIN_DIR, `${WRITER_VERSION}-gzip${settings.dirPart}-w${writes}`);
  if (existsSync(path.join(dir, 'snapstore', 'v2'))) return describeChain(writes, deltas, dir);
  if (!writer) {
    throw new Error(`no chain at ${dir} and no Go ${WRITER_VERSION} binary to write one: set BENCH_CHAIN_WRITER or give it in --peers`);
  }
  await mkdir(CHAIN_DIR, { recursive: true });
  // Written beside and renamed when complete: an interrupted run never leaves a chain that looks usable.
  const part = `${dir}.part-${process.pid}`;
  await rm(part, { recursive: true, force: true });
  const t0 = Date.now();
  console.log(`  writing the ${writes}-write chain (${deltas} deltas) with ${writer} (scripts/upstream-fixture.mjs) ...`);
  const { stderr } = await execFileAsync(
    process.execPath,
    [FIXTURE_SCRIPT, `--peer=${writer}`, '--compression=gzip', `--out=${part}`, `--writes=${writes}`, ...settings.args],
    { maxBuffer: 64 << 20, timeout: 3_600_000 },
  );
  await writeFile(path.join(part, 'facts.txt'), stderr);
  await rename(part, dir);
  console.log(`  written in ${((Date.now() - t0) / 1000).toFixed(0)} s: ${stderr.trim().split('\n').slice(1).join('; ')}`);
  return describeChain(writes, deltas, dir);
}

// ------------------------------------------------------------------------------------------- runs

interface RunFigures {
  seconds: number;
  cpuSeconds: number;
  peakMB: number;
  load: number;
  /** Ours only: seconds per phase, from its log. */
  phases?: Record<string, number>;
}

/**
 * Where ours spent a restore, from its log lines' times (ms) and the process's start and end: the phases
 * between the messages restore.ts and offline-replay.ts write. `replay` is the fetch (read, decompress, sha256
 * check, to disk) and the write of the backend together: they overlap (offline-replay.ts).
 */
const PHASE_MESSAGES: [phase: string, message: string][] = [
  ['start', 'restoring'],
  ['base', 'base snapshot restored'],
  ['replay', 'delta snapshots replayed offline into the backend'],
  ['check', 'restore finished'],
];

function phasesOf(log: string, startedMs: number, endedMs: number): Record<string, number> | undefined {
  const at = new Map<string, number>();
  for (const line of log.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const rec = JSON.parse(line) as { msg?: string; time?: string };
      if (rec.msg && rec.time && !at.has(rec.msg)) at.set(rec.msg, Date.parse(rec.time));
    } catch {
      // not a log record
    }
  }
  const out: Record<string, number> = {};
  let prev = startedMs;
  for (const [phase, msg] of PHASE_MESSAGES) {
    const t = at.get(msg);
    if (t === undefined) return undefined;
    out[phase] = (t - prev) / 1000;
    prev = t;
  }
  out.exit = (endedMs - prev) / 1000;
  return out;
}

/** `/usr/bin/time -f '%e %U %S %M'`'s line: wall, user, system seconds, peak RSS in KiB. */
function parseTimeLine(text: string): { seconds: number; cpuSeconds: number; peakMB: number } {
  const m = /BENCH-TIME ([\d.]+) ([\d.]+) ([\d.]+) (\d+)/.exec(text);
  if (!m) throw new Error(`no /usr/bin/time figures in: ${text.slice(-500)}`);
  return { seconds: Number(m[1]), cpuSeconds: Number(m[2]) + Number(m[3]), peakMB: round1((Number(m[4]) * 1024) / 1e6) };
}

/** One restore by `tool` of `chain` into `dir/data`; its log goes to `dir/log`. */
async function restoreOnce(tool: Tool, chain: Chain, dir: string): Promise<RunFigures> {
  const timeFile = path.join(dir, 'time');
  const logFile = path.join(dir, 'log');
  const args = [
    ...tool.args,
    'restore',
    '--storage-provider=Local',
    `--store-container=${chain.container}`,
    `--data-dir=${path.join(dir, 'data')}`,
    `--restoration-temp-snapshots-dir=${path.join(dir, 'restore-tmp')}`,
    `--snapstore-temp-directory=${path.join(dir, 'snapstore-tmp')}`,
  ];
  const load = load1();
  // The log goes to a file, not through a pipe into this process (the Go tool logs every delta and etcd's start).
  const log = await open(logFile, 'w');
  const started = Date.now();
  let code: number | null;
  try {
    code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(GNU_TIME, ['-f', 'BENCH-TIME %e %U %S %M', '-o', timeFile, tool.command, ...args], {
        stdio: ['ignore', log.fd, log.fd],
        env: tool.env,
      });
      child.once('error', reject);
      child.once('exit', (c) => resolve(c));
    });
  } finally {
    await log.close();
  }
  const ended = Date.now();
  const text = await readFile(logFile, 'utf8');
  if (code !== 0) throw new Error(`${tool.label} restore of the ${chain.writes}-write chain failed (exit ${code}):\n${text.slice(-3000)}`);
  const figures: RunFigures = { ...parseTimeLine(await readFile(timeFile, 'utf8')), load };
  if (tool.label === 'ours') {
    const phases = phasesOf(text, started, ended);
    if (phases) figures.phases = phases;
  }
  return figures;
}

interface HashKv {
  hash: number;
  compactRevision: number;
  revision: number;
  /**
   * sha256 of the keys at the compact revision (none: the whole history) and of every event after it, each
   * key-value without its lease: ours keeps the keys' leases (issue 40, docs/differences.md), the Go tool
   * writes them without, so their hashkv differ by that alone.
   */
  withoutLeases: string;
}

interface Checked {
  /** `etcdctl endpoint hashkv` of the result as the tool left it. */
  asRestored: HashKv;
  /** The same after etcd compacted it at the highest compact revision among the tools' results (see checkAll). */
  common?: HashKv;
}

async function etcdctl(binaries: EtcdBinaries, endpoint: string, ...args: string[]): Promise<string> {
  // A physical compaction of half a million revisions takes longer than etcdctl's default 5 s.
  const { stdout } = await execFileAsync(binaries.etcdctl!, [`--endpoints=${endpoint}`, '--command-timeout=30m', ...args], {
    env: { ...process.env, ETCDCTL_API: '3' },
    maxBuffer: 1 << 30,
  });
  return stdout;
}

/** etcd 3.5.16 on a restored data dir: its `hashkv`, and again after a compaction at `compactAt` when given. */
async function hashKvOf(dataDir: string, compactAt?: number): Promise<HashKv> {
  const binaries = await etcd35Binaries();
  const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
  try {
    if (compactAt !== undefined) await etcdctl(binaries, etcd.clientUrl, 'compact', String(compactAt), '--physical');
    const [first] = JSON.parse(await etcdctl(binaries, etcd.clientUrl, 'endpoint', 'hashkv', '-w', 'json')) as Array<{
      HashKV: { header: { revision: number }; hash: number; compact_revision?: number };
    }>;
    const compactRevision = first!.HashKV.compact_revision ?? 0;
    const revision = first!.HashKV.header.revision;
    const withoutLeases = await historyWithoutLeases(binaries, etcd.clientUrl, compactRevision, revision);
    return { hash: first!.HashKV.hash, compactRevision, revision, withoutLeases };
  } finally {
    await etcd.stop();
  }
}

interface EtcdctlKv {
  key: string;
  create_revision?: number;
  mod_revision?: number;
  version?: number;
  value?: string;
  lease?: number;
}

/** A key-value as etcdctl prints it, without its lease; absent fields (etcdctl drops zeros) as 0. */
const leaseless = (kv: EtcdctlKv): unknown[] => [kv.key, kv.create_revision ?? 0, kv.mod_revision ?? 0, kv.version ?? 0, kv.value ?? ''];

/**
 * sha256 of what etcd serves of a restored store, leases left out: the keys at `compactRevision` (when
 * compacted) and every event from the revision after it to `revision` (etcdctl's watch, stopped at the head).
 */
async function historyWithoutLeases(binaries: EtcdBinaries, endpoint: string, compactRevision: number, revision: number): Promise<string> {
  const hash = createHash('sha256');
  if (compactRevision > 0) {
    const { stdout } = await execFileAsync(
      binaries.etcdctl!,
      [`--endpoints=${endpoint}`, 'get', '', '--prefix', `--rev=${compactRevision}`, '-w', 'json'],
      { env: { ...process.env, ETCDCTL_API: '3' }, maxBuffer: 1 << 30 },
    );
    for (const kv of (JSON.parse(stdout) as { kvs?: EtcdctlKv[] }).kvs ?? []) hash.update(`${JSON.stringify(leaseless(kv))}\n`);
  }
  if (revision <= Math.max(compactRevision, 1)) return hash.digest('hex');
  // One JSON watch response per line; the stream ends when this process stops etcdctl at the head revision.
  const watch = spawn(
    binaries.etcdctl!,
    [`--endpoints=${endpoint}`, 'watch', '', '--prefix', `--rev=${Math.max(compactRevision + 1, 2)}`, '-w', 'json'],
    {
      env: { ...process.env, ETCDCTL_API: '3' },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const closed = new Promise<void>((resolve) => watch.once('close', () => resolve()));
  try {
    let buffered = '';
    let reached = false;
    for await (const chunk of watch.stdout.setEncoding('utf8')) {
      buffered += chunk as string;
      let nl: number;
      while (!reached && (nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        if (!line.startsWith('{')) continue;
        const resp = JSON.parse(line) as { Events?: Array<{ type?: number; kv: EtcdctlKv }> };
        for (const ev of resp.Events ?? []) {
          hash.update(`${JSON.stringify([ev.type ?? 0, ...leaseless(ev.kv)])}\n`);
          if ((ev.kv.mod_revision ?? 0) >= revision) reached = true;
        }
      }
      if (reached) break;
    }
    if (!reached) throw new Error(`etcdctl watch ended before revision ${revision}`);
  } finally {
    watch.kill();
    await closed;
  }
  return hash.digest('hex');
}

/**
 * The results of one run, compared. The Go restore of v0.41 and later compacts its etcd after every 10th
 * delta (at that delta's last revision: upstream's "make etcd lean"), ours and v0.23's keep the whole history,
 * so their `hashkv` differ by design on a chain of more than ten deltas. etcd's hash covers the revisions
 * above the compact revision and, at it, each key's newest revision: the same for a history compacted then
 * and for the whole history compacted afterwards. So each result with less compaction than the most compacted
 * one is compacted by etcd to that revision and hashed again; all must then agree.
 */
async function checkAll(dataDirs: Map<string, string>): Promise<Map<string, Checked>> {
  const out = new Map<string, Checked>();
  for (const [label, dir] of dataDirs) out.set(label, { asRestored: await hashKvOf(dir) });
  const highest = Math.max(...[...out.values()].map((c) => c.asRestored.compactRevision));
  if (highest > 0) {
    for (const [label, dir] of dataDirs) {
      const c = out.get(label)!;
      c.common = c.asRestored.compactRevision === highest ? c.asRestored : await hashKvOf(dir, highest);
    }
  }
  return out;
}

interface ChainResult {
  chain: Chain;
  runs: Map<string, RunFigures[]>;
  checked: Map<string, Checked>;
}

async function benchChain(chain: Chain, tools: Tool[], runs: number, check: boolean, tmp: string): Promise<ChainResult> {
  const result: ChainResult = { chain, runs: new Map(tools.map((t) => [t.label, []])), checked: new Map() };
  for (let r = 0; r < runs; r++) {
    const order = r % 2 === 0 ? tools : [...tools].reverse();
    const line: string[] = [];
    // The first run's results are kept until all tools ran, then compared (not timed).
    const kept = new Map<string, string>();
    try {
      for (const tool of order) {
        const dir = await mkdtemp(path.join(tmp, `${tool.label}-`));
        try {
          const fig = await restoreOnce(tool, chain, dir);
          result.runs.get(tool.label)!.push(fig);
          line.push(`${tool.label} ${fig.seconds.toFixed(2)} s ${fig.peakMB} MB (load ${fig.load.toFixed(1)})`);
          if (check && r === 0) kept.set(tool.label, dir);
        } finally {
          if (!kept.has(tool.label)) await rm(dir, { recursive: true, force: true });
        }
      }
      console.log(`  run ${r + 1}: ${line.join(', ')}`);
      if (kept.size > 0) {
        result.checked = await checkAll(new Map([...kept].map(([label, dir]) => [label, path.join(dir, 'data')])));
      }
    } finally {
      for (const dir of kept.values()) await rm(dir, { recursive: true, force: true });
    }
  }
  return result;
}

/**
 * `--warm`: ours restores the chain `runs` times in one process (support/restore-in-process.mjs, V8 set up as
 * bin/etcdbrctl sets it up for `restore`). The first restore is what a fresh process spends after Node's start
 * and the CLI's first module; the others run on code V8 has compiled and optimized already.
 */
async function inOneProcess(ours: Tool, chain: Chain, runs: number, tmp: string): Promise<Record<string, number>> {
  const script = path.join(benchDir, 'support', 'restore-in-process.mjs');
  const flags = ['--max-semi-space-size=2', '--scavenger-max-new-space-capacity-mb=1'];
  const restoreArgs = [
    '--storage-provider=Local',
    `--store-container=${chain.container}`,
    '--data-dir={dir}/data',
    '--restoration-temp-snapshots-dir={dir}/restore-tmp',
    '--snapstore-temp-directory={dir}/snapstore-tmp',
  ];
  const { stdout } = await execFileAsync(process.execPath, [...flags, script, ROOT, String(runs), tmp, ...restoreArgs], {
    env: ours.env,
    maxBuffer: 16 << 20,
  });
  const figs = stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { ms: number; cpuMs: number });
  if (figs.length !== runs) throw new Error(`restore-in-process.mjs gave ${figs.length} results for ${runs} runs:\n${stdout}`);
  const [first, ...rest] = figs;
  const ms = rest.map((f) => f.ms / 1000);
  console.log(
    `ours, ${runs} restores in one process: the first ${(first!.ms / 1000).toFixed(2)} s (CPU ${(first!.cpuMs / 1000).toFixed(2)} s), ` +
      `the others ${spread(ms, 2)} s (CPU ${spread(
        rest.map((f) => f.cpuMs / 1000),
        2,
      )} s)`,
  );
  return {
    firstSeconds: first!.ms / 1000,
    firstCpuSeconds: first!.cpuMs / 1000,
    warmSeconds: median(ms),
    warmSecondsMin: Math.min(...ms),
    warmSecondsMax: Math.max(...ms),
    warmCpuSeconds: median(rest.map((f) => f.cpuMs / 1000)),
  };
}

/**
 * `--sidecar`: ours restores the chain through `etcdbrctl server`, as etcd-druid's pods restore a lost volume:
 * the sidecar starts with an empty data dir (no etcd answers: nothing else runs), etcd-wrapper's request
 * `POST /initialization/start` starts the validation and the restore, and the time runs until
 * `/initialization/status` says "Successful". A long-lived process: memory-first, but for its initialization
 * (src/speed-first.ts). Each run is a new sidecar.
 */
async function throughTheSidecar(ours: Tool, chain: Chain, runs: number, tmp: string): Promise<Record<string, number>> {
  const seconds: number[] = [];
  const restoreSeconds: number[] = [];
  for (let r = 0; r < runs; r++) {
    const dir = await mkdtemp(path.join(tmp, 'sidecar-'));
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const child = spawn(
      process.execPath,
      [
        BIN,
        'server',
        `--server-port=${port}`,
        '--endpoints=http://127.0.0.1:1',
        `--data-dir=${path.join(dir, 'data')}`,
        '--storage-provider=Local',
        `--store-container=${chain.container}`,
        `--restoration-temp-snapshots-dir=${path.join(dir, 'restore-tmp')}`,
        `--snapstore-temp-directory=${path.join(dir, 'snapstore-tmp')}`,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], env: ours.env },
    );
    let log = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (log += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (log += d));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    try {
      await waitFor(async () => {
        if (child.exitCode !== null) throw new Error(`the sidecar exited (${child.exitCode}):\n${log}`);
        return (await fetch(`${url}/healthz`)).status > 0;
      }, 'the sidecar to listen');
      const started = performance.now();
      await fetch(`${url}/initialization/start`, { method: 'POST' });
      const status = await waitFor(
        async () => {
          const text = await (await fetch(`${url}/initialization/status`)).text();
          return /Successful|Failed/.test(text) ? text : undefined;
        },
        'the initialization to end',
        3_600_000,
        10,
      );
      const elapsed = (performance.now() - started) / 1000;
      if (!status.includes('Successful')) throw new Error(`the sidecar's initialization ended ${status}:\n${log.slice(-3000)}`);
      seconds.push(elapsed);
      const own = /"ms":(\d+),"msg":"restore finished"/.exec(log);
      if (own) restoreSeconds.push(Number(own[1]) / 1000);
    } finally {
      child.kill('SIGTERM');
      await exited;
      await rm(dir, { recursive: true, force: true });
    }
  }
  console.log(
    `ours through the sidecar (${runs} runs, POST /initialization/start to Successful): ${spread(seconds, 2)} s` +
      (restoreSeconds.length > 0 ? `, of which the restore ${spread(restoreSeconds, 2)} s` : ''),
  );
  return {
    seconds: median(seconds),
    secondsMin: Math.min(...seconds),
    secondsMax: Math.max(...seconds),
    ...(restoreSeconds.length > 0 ? { restoreSeconds: median(restoreSeconds) } : {}),
  };
}

// ------------------------------------------------------------------------------------------- report

const spread = (xs: number[], digits: number): string =>
  `${median(xs).toFixed(digits)} (${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)})`;

function report(res: ChainResult): Record<string, unknown> {
  const { chain } = res;
  const revisions = chain.lastRevision - chain.baseRevision;
  const ours = res.runs.get('ours')!;
  const rows: (string | number)[][] = [];
  const json: Record<string, unknown> = {};
  for (const [label, figs] of res.runs) {
    const secs = figs.map((f) => f.seconds);
    // Ratio per run pair (run r of ours against run r of the peer): pairing keeps it meaningful when the
    // machine's speed drifts between runs.
    const ratios = label === 'ours' ? [] : figs.map((f, i) => f.seconds / ours[i]!.seconds);
    rows.push([
      label,
      spread(secs, 2),
      spread(
        figs.map((f) => f.cpuSeconds),
        2,
      ),
      spread(
        figs.map((f) => f.peakMB),
        1,
      ),
      label === 'ours' ? '' : spread(ratios, 1),
      spread(
        figs.map((f) => f.load),
        1,
      ),
    ]);
    json[label] = {
      seconds: median(secs),
      secondsMin: Math.min(...secs),
      secondsMax: Math.max(...secs),
      cpuSeconds: median(figs.map((f) => f.cpuSeconds)),
      peakMB: median(figs.map((f) => f.peakMB)),
      ...(label === 'ours' ? {} : { peerOverOurs: median(ratios) }),
      load: figs.map((f) => f.load),
    };
  }
  console.log(
    `\n${revisions} delta revisions, ${chain.settings} deltas (${chain.deltas} gzip deltas, ${round1(chain.storedBytes / 1e6)} MB stored, revisions ${chain.baseRevision} -> ${chain.lastRevision})`,
  );
  console.log(table(['tool', 'wall s, median (min-max)', 'CPU s', 'peak RSS MB', 'peer ÷ ours', 'load (1 min)'], rows));
  const phased = ours.filter((f) => f.phases);
  if (phased.length > 0) {
    const names = Object.keys(phased[0]!.phases!);
    console.log(
      `ours by phase, s, median (min-max): ${names
        .map(
          (n) =>
            `${n} ${spread(
              phased.map((f) => f.phases![n]!),
              2,
            )}`,
        )
        .join(', ')}`,
    );
    json.oursPhases = Object.fromEntries(names.map((n) => [n, median(phased.map((f) => f.phases![n]!))]));
  }
  if (res.checked.size > 0) {
    const show = (h: HashKv) => `${h.hash} (compact ${h.compactRevision}, revision ${h.revision})`;
    const all = [...res.checked];
    console.log(`hashkv as restored: ${all.map(([label, c]) => `${label} ${show(c.asRestored)}`).join('; ')}`);
    const compared = all.map(([, c]) => c.common ?? c.asRestored);
    if (all.some(([, c]) => c.common)) {
      console.log(`hashkv at a common compaction: ${all.map(([label, c]) => `${label} ${show(c.common!)}`).join('; ')}`);
    }
    const key = (h: HashKv) => JSON.stringify([h.hash, h.compactRevision, h.revision]);
    const same = new Set(compared.map(key)).size === 1;
    // Ours keeps the keys' leases (issue 40), the Go tool does not: then the history without leases must agree.
    const sameWithoutLeases = new Set(compared.map((h) => JSON.stringify([h.withoutLeases, h.compactRevision, h.revision]))).size === 1;
    console.log(
      `hashkv: ${same ? 'the same' : 'different'}; keys, values, revisions and versions without leases: ${sameWithoutLeases ? 'the same' : 'DIFFERENT'}`,
    );
    json.hashKv = Object.fromEntries(res.checked);
    json.hashKvSame = same;
    json.sameWithoutLeases = sameWithoutLeases;
  }
  return { writes: chain.writes, deltaSettings: chain.settings, revisions, deltas: chain.deltas, storedBytes: chain.storedBytes, ...json };
}

// ------------------------------------------------------------------------------------------- main

async function main(): Promise<void> {
  if (!existsSync(GNU_TIME)) throw new Error(`${GNU_TIME} is needed (Debian/Ubuntu: apt-get install time)`);
  const runs = arg('runs', 5);
  const check = flag('check', true);
  const warm = Number(option('warm') ?? 0);
  if (!Number.isInteger(warm) || warm < 0 || warm === 1) throw new Error(`--warm=${option('warm')}: 0 (off) or 2 and more`);
  const sidecar = Number(option('sidecar') ?? 0);
  if (!Number.isInteger(sidecar) || sidecar < 0) throw new Error(`--sidecar=${option('sidecar')}: 0 (off) or more`);
  const writesList = (option('chains') ?? '10000,20000,100000').split(',').map(Number);
  const settingsList = (option('deltas') ?? 'large,small').split(',') as DeltaSettings[];
  for (const d of settingsList) if (!(d in DELTA_SETTINGS)) throw new Error(`--deltas=${d}: large or small`);
  const peerBins = (option('peers') ?? process.env.ETCDBRCTL_PEER ?? '').split(',').filter(Boolean);
  const etcd35 = await etcd35Binaries();
  if (!(await etcd35.version()).startsWith('3.5.')) throw new Error(`${etcd35.etcd} is not etcd 3.5`);
  const tools: Tool[] = [
    {
      label: 'ours',
      command: process.execPath,
      args: [BIN],
      env: { ...process.env, ETCD_BIN: etcd35.etcd, PATH: `${ETCD35_BIN_DIR}${path.delimiter}${process.env.PATH ?? ''}` },
    },
  ];
  let writer = process.env.BENCH_CHAIN_WRITER;
  for (const bin of peerBins) {
    const version = await goVersion(bin);
    if (!writer && version.startsWith(WRITER_VERSION)) writer = bin;
    // v0.41 and later join a Local container to $HOME even when it is absolute.
    tools.push({ label: version, command: bin, args: [], env: { ...process.env, HOME: '/' } });
  }
  if (peerBins.length === 0) console.log('no --peers or ETCDBRCTL_PEER: ours alone, no Go tool beside it');
  console.log(
    `node ${process.version}, etcd ${await etcd35.version()} (ours' base restore), ${os.cpus().length} CPUs, load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}, ${runs} runs; tools: ${tools.map((t) => t.label).join(', ')}`,
  );
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'etcdbr-bench-upstream-'));
  const summary: Record<string, unknown>[] = [];
  let allSame = true;
  try {
    for (const settings of settingsList) {
      for (const writes of writesList) {
        const chain = await ensureChain(writes, settings, writer);
        console.log(
          `\nchain of ${writes} writes, ${settings} deltas: ${chain.deltas} deltas, revisions ${chain.baseRevision} -> ${chain.lastRevision}`,
        );
        const res = await benchChain(chain, tools, runs, check, tmp);
        const out = report(res);
        if (warm > 0) out.oursInOneProcess = await inOneProcess(tools[0]!, chain, warm, tmp);
        if (sidecar > 0) out.oursThroughTheSidecar = await throughTheSidecar(tools[0]!, chain, sidecar, tmp);
        if (out.sameWithoutLeases === false) allSame = false;
        summary.push(out);
      }
    }
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
  console.log(
    `\nload average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log(JSON.stringify({ bench: 'restore-upstream', runs, tools: tools.map((t) => t.label), chains: summary }));
  if (!allSame) process.exitCode = 1;
}

await main();
