/**
 * Delta capture under sustained load (issue 3): does the snapshotter keep every event, keep deltas
 * within the memory limit, and stay small in memory?
 *
 *   node --expose-gc --conditions=development --import tsx e2e/bench/delta-capture.bench.ts [--runs=3]
 *   env: BENCH_SECONDS (60), BENCH_RATE (5000), BENCH_VALUE_BYTES (1024)
 *
 * Per run: a fresh etcd (quota 8 GiB; data on /dev/shm unless BENCH_ETCD_ON_DISK=1) and Local store; the Snapshotter of src/snapshotter/snapshotter.ts in
 * this process (full snapshot at start, deltaSnapshotPeriodMs 20000, deltaSnapshotMemoryLimit 10 MiB,
 * gzip); a separate child process (support/put-load.ts) puts BENCH_RATE values of BENCH_VALUE_BYTES per
 * second for BENCH_SECONDS, so the load generator's memory is not counted. Each run is its own process
 * (fresh heap); that process's RSS is sampled
 * every 20 ms from before the load starts until the last delta is stored. Afterwards every delta is parsed:
 * the chain must be contiguous (start = previous last + 1), every revision from the full to the end must
 * be present exactly once, and the largest delta's JSON must not exceed the limit by more than one event.
 * Under tsx the RSS includes ~35 MiB of loader; `npm run bench -- --compiled delta-capture` (scripts/bench.mjs)
 * runs bundled JS under plain node, as the sidecar does.
 * Targets: no event lost, largest delta <= limit + one event, peak RSS < 200 MB. Reports the put rate the
 * machine reached (it may not reach BENCH_RATE). Medians over runs; the last line is JSON.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import { createDecompressStream, silentLogger } from '../../snapstore/src/index.js';
import type { SnapStore, Snapshot } from '../../snapstore/src/index.js';
import { openLocalStore } from '../../snapstore/src/providers/local.js';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { encodeDeltaEvent } from '../../src/backup/delta-write.js';
import { DeltaPayloadParser } from '../../src/backup/delta-parse.js';
import { systemClock } from '../../src/clock.js';
import { Metrics } from '../../src/metrics.js';
import { CronSchedule } from '../../src/config/schedule.js';
import { Snapshotter } from '../../src/snapshotter/snapshotter.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { etcdBinaries } from '../../test/support/etcd.js';
import { ours } from '../../test/support/etcd-client.js';
import { MiB, arg, measured, median, round1, table } from './support/measure.js';
import type { PutLoadResult as LoadResult } from './support/put-load-result.js';

/** This bench's directory; ETCDBR_BENCH_DIR when it runs bundled (scripts/bench.mjs --compiled). */
const benchDir = process.env.ETCDBR_BENCH_DIR ?? path.dirname(fileURLToPath(import.meta.url));
const LIMIT = 10 * MiB;
const PERIOD_MS = 20_000;
const RSS_TARGET_MB = 200;

function runLoad(endpoint: string, rate: number, seconds: number, valueBytes: number): Promise<LoadResult> {
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
        `--value-bytes=${valueBytes}`,
      ],
      { cwd: path.resolve(benchDir, '..', '..'), stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    proc.once('error', reject);
    proc.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`load generator failed (exit ${code})`));
      try {
        resolve(JSON.parse(out.trim().split('\n').pop() ?? '') as LoadResult);
      } catch (e) {
        reject(e as Error);
      }
    });
  });
}

interface Verification {
  deltas: number;
  revisions: number;
  events: number;
  largestJsonBytes: number;
  largestEventBytes: number;
  /** Deltas cut at the memory limit (JSON >= limit) vs by the period. */
  cutByLimit: number;
  problems: string[];
}

/** Parses every delta after the full: contiguous chain, every revision once, sizes. */
async function verify(store: SnapStore, full: Snapshot, lastRevision: number): Promise<Verification> {
  const list = (await store.list()).filter((s) => s.kind === 'Incr' && s.startRevision > full.lastRevision);
  const v: Verification = {
    deltas: list.length,
    revisions: 0,
    events: 0,
    largestJsonBytes: 0,
    largestEventBytes: 0,
    cutByLimit: 0,
    problems: [],
  };
  let expectStart = full.lastRevision + 1;
  let nextRevision = full.lastRevision + 1;
  for (const d of list) {
    if (d.startRevision !== expectStart) v.problems.push(`${d.snapName}: starts at ${d.startRevision}, expected ${expectStart}`);
    let bytes = 0;
    let lastSeen = 0;
    const parser = new DeltaPayloadParser(d.snapName);
    parser.on('data', (e: DeltaEvent) => {
      v.events++;
      v.largestEventBytes = Math.max(v.largestEventBytes, Buffer.byteLength(encodeDeltaEvent(e)) + 1);
      if (e.modRevision !== lastSeen) {
        if (e.modRevision !== nextRevision) {
          if (v.problems.length < 20) v.problems.push(`${d.snapName}: revision ${e.modRevision} where ${nextRevision} was expected`);
        }
        nextRevision = e.modRevision + 1;
        lastSeen = e.modRevision;
        v.revisions++;
      }
    });
    await pipeline(
      await store.fetch(d),
      createDecompressStream(d.compressionSuffix, d.snapName),
      async function* (src: AsyncIterable<Buffer>) {
        for await (const chunk of src) {
          bytes += chunk.length;
          yield chunk;
        }
      },
      parser,
    );
    const json = bytes - 32;
    v.largestJsonBytes = Math.max(v.largestJsonBytes, json);
    if (json >= LIMIT) v.cutByLimit++;
    if (lastSeen !== d.lastRevision) v.problems.push(`${d.snapName}: last event at ${lastSeen}, name says ${d.lastRevision}`);
    expectStart = d.lastRevision + 1;
  }
  if (nextRevision - 1 !== lastRevision) v.problems.push(`chain ends at revision ${nextRevision - 1}, etcd is at ${lastRevision}`);
  return v;
}

interface RunResult {
  load: LoadResult;
  peakRssMB: number;
  baselineRssMB: number;
  /** Highest V8 heap (total) and Buffer memory (arrayBuffers) seen, MiB: where the RSS goes. */
  peakHeapMB: number;
  peakBuffersMB: number;
  verification: Verification;
  tailSeconds: number;
}

async function oneRun(rate: number, seconds: number, valueBytes: number): Promise<RunResult> {
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'etcdbr-bench-capture-'));
  // etcd's data on tmpfs by default: what is measured is the snapshotter, and etcd 3.4 syncing every
  // write to a shared disk would cap the load far below the rate asked for.
  const etcdRoot = process.env.BENCH_ETCD_ON_DISK ? tmp : await mkdtemp('/dev/shm/etcdbr-bench-capture-').catch(() => tmp);
  const etcd = await startLocalEtcd({
    binaries: await etcdBinaries(),
    dataDir: path.join(etcdRoot, 'etcd'),
    quotaBackendBytes: 8 * 1024 * MiB,
  });
  const client = new Etcd3({ hosts: etcd.clientUrl, grpcOptions: { 'grpc.max_receive_message_length': -1 } });
  const store = await openLocalStore({
    provider: 'Local',
    rootDir: path.join(tmp, 'store'),
    container: 'bench',
    prefix: 'v2',
    maxParallelChunkUploads: 5,
    minChunkSize: 5 * MiB,
    tempDir: tmp,
  });
  const stop = new AbortController();
  let running: Promise<void> | undefined;
  try {
    const snapshotter = await Snapshotter.create(
      {
        schedule: new CronSchedule('0 0 1 1 *', { timeZone: 'UTC' }),
        deltaSnapshotPeriodMs: PERIOD_MS,
        deltaSnapshotMemoryLimit: LIMIT,
        snapshotTimeoutMs: 10 * 60_000,
        connectionTimeoutMs: 10_000,
        compression: 'gzip',
        finalDeltaTimeoutMs: 60_000,
      },
      {
        client: ours(client),
        store: async () => store,
        clock: systemClock,
        logger: silentLogger,
        metrics: new Metrics({ defaultMetrics: false }),
      },
    );
    running = snapshotter.run(stop.signal, true);
    running.catch(() => undefined);
    while (!snapshotter.chain.prevFull) await new Promise((r) => setTimeout(r, 50));
    const full = snapshotter.chain.prevFull;
    let load!: LoadResult;
    let tailStart = 0;
    let peakHeap = 0;
    let peakBuffers = 0;
    const sampler = setInterval(() => {
      const m = process.memoryUsage();
      peakHeap = Math.max(peakHeap, m.heapTotal);
      peakBuffers = Math.max(peakBuffers, m.arrayBuffers);
    }, 100);
    const { run } = await measured(async () => {
      load = await runLoad(etcd.clientUrl, rate, seconds, valueBytes);
      // Everything written must end up in a delta: cut until the chain reaches etcd's revision.
      tailStart = Date.now();
      const target = Number((await client.get('foo').exec()).header.revision);
      for (let i = 0; i < 1200 && (snapshotter.chain.prevSnapshot?.lastRevision ?? 0) < target; i++) {
        await new Promise((r) => setTimeout(r, 100));
        if (i % 10 === 9) await snapshotter.triggerDeltaSnapshot();
      }
    });
    clearInterval(sampler);
    const tailSeconds = (Date.now() - tailStart) / 1000;
    stop.abort();
    await running;
    const lastRevision = Number((await client.get('foo').exec()).header.revision);
    const verification = await verify(store, full, lastRevision);
    return {
      load,
      peakRssMB: run.peakRssMB,
      baselineRssMB: run.baselineRssMB,
      peakHeapMB: round1(peakHeap / MiB),
      peakBuffersMB: round1(peakBuffers / MiB),
      verification,
      tailSeconds,
    };
  } finally {
    stop.abort();
    await running?.catch(() => undefined);
    client.close();
    await store.close();
    await etcd.stop();
    await rm(tmp, { recursive: true, force: true });
    await rm(etcdRoot, { recursive: true, force: true });
  }
}

/** One run in a fresh process, so every run starts from the same clean heap and RSS. */
function runInChild(): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [...process.execArgv, process.argv[1] as string, '--child=run'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    proc.once('error', reject);
    proc.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`run failed (exit ${code})`));
      try {
        resolve(JSON.parse(out.trim().split('\n').pop() ?? '') as RunResult);
      } catch (e) {
        reject(e as Error);
      }
    });
  });
}

async function main(): Promise<void> {
  if (process.argv.includes('--child=run')) {
    const res = await oneRun(
      Number(process.env.BENCH_RATE ?? 5000),
      Number(process.env.BENCH_SECONDS ?? 60),
      Number(process.env.BENCH_VALUE_BYTES ?? 1024),
    );
    console.log(JSON.stringify(res));
    return;
  }
  const runs = arg('runs', 3);
  const seconds = Number(process.env.BENCH_SECONDS ?? 60);
  const rate = Number(process.env.BENCH_RATE ?? 5000);
  const valueBytes = Number(process.env.BENCH_VALUE_BYTES ?? 1024);
  const load = () =>
    os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
  console.log(
    `delta capture: ${rate} puts/s of ${valueBytes} B for ${seconds} s, period ${PERIOD_MS / 1000} s, limit ${LIMIT / MiB} MiB; ${os.cpus().length} CPUs, load average ${load()}`,
  );
  const results: RunResult[] = [];
  for (let r = 0; r < runs; r++) {
    const res = await runInChild();
    results.push(res);
    const v = res.verification;
    console.log(
      `  run ${r + 1}: ${res.load.puts} puts in ${res.load.seconds.toFixed(1)} s = ${res.load.putsPerSecond}/s (${res.load.errors} errors); ` +
        `${v.deltas} deltas (${v.cutByLimit} at the limit), largest ${round1(v.largestJsonBytes / MiB)} MiB; peak RSS ${res.peakRssMB} MB ` +
        `(from ${res.baselineRssMB}; heap ${res.peakHeapMB}, buffers ${res.peakBuffersMB}); ` +
        `tail ${res.tailSeconds.toFixed(1)} s; ${v.problems.length === 0 ? 'no event lost' : `PROBLEMS: ${v.problems.join('; ')}`} (load ${load()})`,
    );
  }
  const med = (f: (r: RunResult) => number) => median(results.map(f));
  const lost = results.some((r) => r.verification.problems.length > 0);
  // The buffer is cut once '[' + events + commas reach the limit, so the JSON (with ']') is at most
  // limit - 1 + one event with its comma + 1.
  const maxOver = Math.max(...results.map((r) => r.verification.largestJsonBytes - LIMIT - r.verification.largestEventBytes));
  const peak = med((r) => r.peakRssMB);
  console.log(
    table(
      ['metric', 'median', 'runs', 'target'],
      [
        ['puts/s reached', med((r) => r.load.putsPerSecond), results.map((r) => r.load.putsPerSecond).join(' / '), `${rate}`],
        ['revisions captured', med((r) => r.verification.revisions), results.map((r) => r.verification.revisions).join(' / '), 'all'],
        ['deltas', med((r) => r.verification.deltas), results.map((r) => r.verification.deltas).join(' / '), ''],
        [
          'largest delta JSON MiB',
          round1(med((r) => r.verification.largestJsonBytes) / MiB),
          results.map((r) => round1(r.verification.largestJsonBytes / MiB)).join(' / '),
          `<= ${LIMIT / MiB} + 1 event`,
        ],
        ['peak RSS MB', peak, results.map((r) => r.peakRssMB).join(' / '), `< ${RSS_TARGET_MB}`],
        ['baseline RSS MB', med((r) => r.baselineRssMB), results.map((r) => r.baselineRssMB).join(' / '), ''],
        ['peak V8 heap MB', med((r) => r.peakHeapMB), results.map((r) => r.peakHeapMB).join(' / '), ''],
        ['peak Buffers MB', med((r) => r.peakBuffersMB), results.map((r) => r.peakBuffersMB).join(' / '), ''],
      ],
    ),
  );
  console.log(
    `no event lost: ${lost ? 'MISSED' : 'met'}; largest delta <= limit + one event: ${maxOver <= 0 ? 'met' : 'MISSED'}; peak RSS: ${peak < RSS_TARGET_MB ? 'met' : 'MISSED'}`,
  );
  console.log(`load average ${load()}`);
  console.log(
    JSON.stringify({
      bench: 'delta-capture',
      runs,
      seconds,
      targetRate: rate,
      valueBytes,
      putsPerSecond: med((r) => r.load.putsPerSecond),
      revisions: med((r) => r.verification.revisions),
      deltas: med((r) => r.verification.deltas),
      largestDeltaJsonMB: round1(med((r) => r.verification.largestJsonBytes) / MiB),
      peakRssMB: peak,
      noEventLost: !lost,
      deltaWithinLimit: maxOver <= 0,
      rssMet: peak < RSS_TARGET_MB,
      loadAfter: os.loadavg()[0],
    }),
  );
}

await main();
