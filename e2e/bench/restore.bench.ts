/**
 * Restore: delta replay rate against a floor, base restore against etcdctl, and memory while replaying
 * one large delta.
 *
 *   node --expose-gc --conditions=development --import tsx e2e/bench/restore.bench.ts [--runs=3] [--only=replay,base,rss]
 *   env: BENCH_REVISIONS (50000), BENCH_DB_MB (1024), BENCH_DELTA_MB (256)
 *
 * (a) replay: a real base snapshot (a few hundred keys) plus BENCH_REVISIONS single-put revisions as gzip
 *     deltas of 5,000 events (written straight into a Local store with the snapshotter's DeltaBuffer and
 *     saveDeltaSnapshot). executeRestore replays them online (--delta-replay=online: through etcd; the
 *     offline path has its own bench, offline-replay); the rate is revisions / replayMs (from the replay
 *     etcd answering to the last delta applied). FLOOR, measured in the same run: the same base restored
 *     into the same kind of local etcd, then a plain loop of the same number of sequential single-put
 *     transactions (through the lean gRPC client and encoding the replay uses, requests pre-built). Variants: on disk with fsync
 *     on and (etcd 3.5+, --unsafe-no-fsync) off; and on tmpfs (/dev/shm; BENCH_NO_TMPFS=1 skips it), which
 *     on etcd 3.4 (no way to turn its fsync off) is the only view of the replay without sync cost.
 *     Target: replay >= 80 % of the floor in every variant.
 * (b) base: a ~BENCH_DB_MB MiB etcd (filled by a child process), its full snapshot stored uncompressed in a
 *     Local store; executeRestore without deltas (which hands the stored file to etcdctl/etcdutl restore in
 *     place; etcd's restore checks the sha256) against `etcdctl snapshot restore` of the same file.
 *     Target: ours/etcdctl <= 1.3. Also shown: the same through a store that only streams (as a remote
 *     provider does), where the object is first written to the scratch dir.
 * (c) rss: one delta of ~BENCH_DELTA_MB MiB of JSON (16 KiB values), restored in a fresh child process
 *     whose RSS is sampled every 20 ms. Target: peak < 300 MB.
 * Cases run interleaved per run so load drift hits all alike; medians are reported. Last line: JSON.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import type { SnapStore, Snapshot } from '../../snapstore/src/index.js';
import { restoreTool } from '../../src/restorer/base-restore.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import { atLeast35 } from '../../src/etcd/binaries.js';
import { planRestore, type RestorePlan } from '../../src/restorer/plan.js';
import { executeRestore } from '../../src/restorer/restore.js';
import { etcdBinaries, startTestEtcd } from '../../test/support/etcd.js';
import { benchLocalStore, benchRestoreOptions, smallBaseSnapshot } from './support/restore-setup.js';
import { MiB, arg, measured, median, round1, round3, table } from './support/measure.js';
import { fillEtcd } from './support/fill.js';
import type { Run } from './support/measure.js';
import { baseSnapshot, floorLoop, writeLargeDelta, writeSmallPutChain } from '../../test/support/restore-chain.js';

const execFileAsync = promisify(execFile);
/** This bench's directory; ETCDBR_BENCH_DIR when it runs bundled (scripts/bench.mjs --compiled). */
const benchDir = process.env.ETCDBR_BENCH_DIR ?? path.dirname(fileURLToPath(import.meta.url));
const REPLAY_TARGET = 0.8;
const BASE_TARGET = 1.3;
const RSS_TARGET_MB = 300;
const PER_DELTA = 5000;
const KEY_SPACE = 5000;
const VALUE_BYTES = 100;

function flag(name: string): string | undefined {
  return process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
}

function baseOnly(base: Snapshot): RestorePlan {
  return { base, deltas: [], targetRevision: base.lastRevision, fetchBytes: base.sizeBytes ?? 0 };
}

// ---------------------------------------------------------------------------------------------- (a)

interface Variant {
  label: string;
  /** Where the data dirs live: the disk, or tmpfs (where fsync costs next to nothing). */
  root: string;
  fsync: boolean;
}

interface VariantResult {
  variant: Variant;
  floor: number[];
  replay: number[];
}

/**
 * The variants that make sense for this etcd: fsync on and off on disk where etcd has --unsafe-no-fsync
 * (3.5+); on 3.4, which always syncs, the replay's `fsync` option changes nothing, so "without fsync" is
 * measured on tmpfs instead. Floor and replay of a variant use the same etcd settings and location.
 */
async function variants(binaries: EtcdBinaries, tmp: string, shm: string | undefined): Promise<Variant[]> {
  const honoured = atLeast35(await binaries.version());
  const out: Variant[] = [{ label: 'disk, fsync on', root: tmp, fsync: true }];
  if (honoured) out.push({ label: 'disk, fsync off', root: tmp, fsync: false });
  if (shm) out.push({ label: honoured ? 'tmpfs, fsync off' : 'tmpfs (etcd 3.4 syncs; tmpfs makes it cheap)', root: shm, fsync: false });
  return out;
}

async function benchReplay(binaries: EtcdBinaries, tmp: string, shm: string | undefined, runs: number, revisions: number) {
  const store = await benchLocalStore(path.join(tmp, 'replay-store'), tmp);
  const base = await smallBaseSnapshot(store);
  const t0 = Date.now();
  const deltas = await writeSmallPutChain(store, base, {
    revisions,
    perDelta: PER_DELTA,
    keySpace: KEY_SPACE,
    valueBytes: VALUE_BYTES,
    compression: 'gzip',
  });
  console.log(
    `  chain: base at revision ${base.lastRevision}, ${revisions} revisions in ${deltas} gzip deltas (${((Date.now() - t0) / 1000).toFixed(1)} s to write)`,
  );
  const plan = planRestore(await store.list());
  const results: VariantResult[] = (await variants(binaries, tmp, shm)).map((variant) => ({ variant, floor: [], replay: [] }));

  for (let r = 0; r < runs; r++) {
    for (const v of results) {
      const { root, fsync } = v.variant;
      // FLOOR: the same base, the same kind of local etcd, a bare loop.
      {
        const dir = await mkdtemp(path.join(root, 'floor-'));
        try {
          const res = await executeRestore(
            store,
            baseOnly(base),
            benchRestoreOptions(binaries, dir, { keepEtcdRunning: true, fsync, tempDir: path.join(tmp, 'scratch') }),
          );
          const etcd = res.etcd!;
          const client = new Etcd3({ hosts: etcd.clientUrl });
          try {
            await client.get('warm-up').string();
            v.floor.push(await floorLoop(etcd.clientUrl, 0, { revisions, keySpace: KEY_SPACE, valueBytes: VALUE_BYTES }));
          } finally {
            client.close();
            await etcd.stop();
          }
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      }
      {
        const dir = await mkdtemp(path.join(root, 'replay-'));
        try {
          const res = await executeRestore(
            store,
            plan,
            benchRestoreOptions(binaries, dir, { fsync, deltaReplay: 'online', tempDir: path.join(tmp, 'scratch') }),
          );
          if (res.revisionsApplied !== revisions) throw new Error(`replayed ${res.revisionsApplied} of ${revisions} revisions`);
          v.replay.push(res.revisionsApplied / (res.replayMs / 1000));
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      }
      console.log(
        `  run ${r + 1} ${v.variant.label}: floor ${Math.round(v.floor[r]!)} rev/s, replay ${Math.round(v.replay[r]!)} rev/s (load ${os.loadavg()[0]!.toFixed(1)})`,
      );
    }
  }
  await store.close();
  return { results, deltas };
}

// ---------------------------------------------------------------------------------------------- (b)

interface BaseResult {
  etcdctl: number[];
  ours: number[];
  /** The same object through a store that only streams it (any remote provider): a download first. */
  download: number[];
  dbBytes: number;
}

/** The store as a remote provider would serve it: a plain stream, no local file to read in place. */
function streamingOnly(store: SnapStore): SnapStore {
  return {
    provider: store.provider,
    prefix: store.prefix,
    list: (o) => store.list(o),
    fetch: async (snap, range) => (await store.fetch(snap, range)).pipe(new PassThrough({ highWaterMark: 1 << 20 })),
    save: (snap, data, o) => store.save(snap, data, o),
    delete: (snap) => store.delete(snap),
    close: () => store.close(),
  };
}

async function benchBase(binaries: EtcdBinaries, tmp: string, runs: number, dbMB: number): Promise<BaseResult> {
  const storeRoot = path.join(tmp, 'base-store');
  const store = await benchLocalStore(storeRoot, tmp);
  const src = await startTestEtcd({ quotaBackendBytes: 8 * 1024 * MiB });
  let base: Snapshot;
  try {
    const filled = await fillEtcd(benchDir, src.clientUrl, dbMB);
    console.log(`  filled ${round1(filled.bytes / MiB)} MiB in ${filled.keys} keys (${round1(filled.seconds)} s)`);
    const c = new Etcd3({ hosts: src.clientUrl });
    try {
      base = await baseSnapshot(c, store);
    } finally {
      c.close();
    }
  } finally {
    await src.cleanup(); // not competing for the CPU while we measure
  }
  const file = path.join(storeRoot, 'v2', base.snapName);
  // The tool our base restore uses, so that the comparison is like for like.
  const tool = await restoreTool(binaries);
  if (!tool) throw new Error('etcdctl not found');
  const out: BaseResult = { etcdctl: [], ours: [], download: [], dbBytes: base.sizeBytes ?? 0 };
  // Each case writes ~1 GiB; without a sync the next case pays for the previous case's writeback.
  // Each case writes ~1 GiB; without a sync the next case pays for the previous case's writeback.
  const settle = () => execFileAsync('sync');
  const timed = async (prefix: string, fn: (dir: string) => Promise<unknown>): Promise<number> => {
    await settle();
    const dir = await mkdtemp(path.join(tmp, prefix));
    try {
      const t0 = process.hrtime.bigint();
      await fn(dir);
      return Number(process.hrtime.bigint() - t0) / 1e9;
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };
  const cases: [keyof Omit<BaseResult, 'dbBytes'>, (dir: string) => Promise<unknown>][] = [
    [
      'etcdctl',
      (dir) =>
        execFileAsync(tool, ['snapshot', 'restore', file, `--data-dir=${path.join(dir, 'data')}`], {
          env: { ...process.env, ETCDCTL_API: '3' },
          maxBuffer: 16 * MiB,
        }),
    ],
    ['ours', (dir) => executeRestore(store, baseOnly(base), benchRestoreOptions(binaries, dir))],
    ['download', (dir) => executeRestore(streamingOnly(store), baseOnly(base), benchRestoreOptions(binaries, dir))],
  ];
  for (let r = 0; r < runs; r++) {
    // Alternate the order, so whatever one case leaves behind (cache, writeback) does not always hit the same next case.
    for (const [name, fn] of r % 2 === 0 ? cases : [...cases].reverse()) out[name].push(await timed(`${name}-`, fn));
    console.log(
      `  run ${r + 1}: etcdctl ${out.etcdctl[r]!.toFixed(2)} s, ours ${out.ours[r]!.toFixed(2)} s, ours via download ${out.download[r]!.toFixed(2)} s`,
    );
  }
  await store.close();
  return out;
}

// ---------------------------------------------------------------------------------------------- (c)

interface RssSetup {
  storeRoot: string;
  tmp: string;
}

/** --child=rss: one restore of the large-delta store in this fresh process; prints Run + revisions. */
async function rssChild(setup: RssSetup): Promise<void> {
  const binaries = await etcdBinaries();
  const store = await benchLocalStore(setup.storeRoot, setup.tmp);
  const plan = planRestore(await store.list());
  const dir = await mkdtemp(path.join(setup.tmp, 'rss-'));
  try {
    const { run, value } = await measured(() => executeRestore(store, plan, benchRestoreOptions(binaries, dir, { maxFetchers: 1 })));
    console.log(JSON.stringify({ run, revisions: value.revisionsApplied, replayMs: value.replayMs }));
  } finally {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  }
}

async function benchRss(
  tmp: string,
  runs: number,
  deltaMB: number,
): Promise<{ runs: (Run & { revisions: number; replayMs: number })[]; jsonBytes: number }> {
  const storeRoot = path.join(tmp, 'rss-store');
  const store = await benchLocalStore(storeRoot, tmp);
  const src = await startTestEtcd();
  const c = new Etcd3({ hosts: src.clientUrl });
  let base: Snapshot;
  try {
    await c.put('/registry/bench/rss/base').value('x');
    base = await baseSnapshot(c, store);
  } finally {
    c.close();
    await src.cleanup();
  }
  const big = await writeLargeDelta(store, base, { bytes: deltaMB * MiB, valueBytes: 16 * 1024, keySpace: 2000, compression: 'gzip' });
  await store.close();
  console.log(`  delta: ${round1(big.jsonBytes / MiB)} MiB of JSON, ${big.revisions} revisions (${big.snap.snapName})`);
  const results: (Run & { revisions: number; replayMs: number })[] = [];
  for (let r = 0; r < runs; r++) {
    const res = await new Promise<Run & { revisions: number; replayMs: number }>((resolve, reject) => {
      const proc = spawn(
        process.execPath,
        [...process.execArgv, process.argv[1] as string, '--child=rss', `--setup=${JSON.stringify({ storeRoot, tmp })}`],
        {
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      );
      let out = '';
      proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
      proc.once('error', reject);
      proc.once('exit', (code) => {
        if (code !== 0) return reject(new Error(`rss run failed (exit ${code})`));
        const p = JSON.parse(out.trim().split('\n').pop() ?? '') as { run: Run; revisions: number; replayMs: number };
        resolve({ ...p.run, revisions: p.revisions, replayMs: p.replayMs });
      });
    });
    console.log(
      `  run ${r + 1}: peak RSS ${res.peakRssMB} MB (baseline ${res.baselineRssMB} MB), ${res.seconds.toFixed(1)} s, ${res.revisions} revisions`,
    );
    results.push(res);
  }
  return { runs: results, jsonBytes: big.jsonBytes };
}

// ---------------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const child = flag('child');
  if (child === 'rss') return rssChild(JSON.parse(flag('setup') ?? '{}') as RssSetup);

  const runs = arg('runs', 3);
  const only = (flag('only') ?? 'replay,base,rss').split(',');
  const revisions = Number(process.env.BENCH_REVISIONS ?? 50_000);
  const dbMB = Number(process.env.BENCH_DB_MB ?? 1024);
  const deltaMB = Number(process.env.BENCH_DELTA_MB ?? 256);
  const binaries = await etcdBinaries();
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'etcdbr-bench-restore-'));
  await mkdir(path.join(tmp, 'scratch'), { recursive: true });
  const shm = process.env.BENCH_NO_TMPFS ? undefined : await mkdtemp('/dev/shm/etcdbr-bench-restore-').catch(() => undefined);
  const load = () =>
    os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
  console.log(`etcd ${await binaries.version()}, ${os.cpus().length} CPUs, load average ${load()}, runs ${runs}`);
  const summary: Record<string, unknown> = { bench: 'restore', etcd: await binaries.version(), runs, loadBefore: os.loadavg()[0] };
  try {
    if (only.includes('replay')) {
      console.log(`\n(a) delta replay, ${revisions} single-put revisions`);
      const { results, deltas } = await benchReplay(binaries, tmp, shm, runs, revisions);
      const rows: (string | number)[][] = [];
      const out: Record<string, unknown>[] = [];
      let worst = Infinity;
      for (const v of results) {
        const floor = median(v.floor);
        const replay = median(v.replay);
        const ratio = replay / floor;
        worst = Math.min(worst, ratio);
        rows.push([`${v.variant.label}: floor`, Math.round(floor), '', v.floor.map(Math.round).join(' / ')]);
        rows.push([`${v.variant.label}: replay`, Math.round(replay), ratio.toFixed(2), v.replay.map(Math.round).join(' / ')]);
        out.push({
          variant: v.variant.label,
          floorRevPerSec: Math.round(floor),
          replayRevPerSec: Math.round(replay),
          ratio: round3(ratio),
        });
      }
      console.log(table(['case', 'rev/s (median)', 'replay/floor', 'runs'], rows));
      console.log(
        `target replay >= ${REPLAY_TARGET * 100} % of floor: ${worst >= REPLAY_TARGET ? 'met' : 'MISSED'} (worst ${(worst * 100).toFixed(0)} %)`,
      );
      summary.replay = { revisions, deltas, variants: out, worstRatio: round3(worst), met: worst >= REPLAY_TARGET };
    }
    if (only.includes('base')) {
      console.log(`\n(b) base restore of a ~${dbMB} MiB full snapshot`);
      const b = await benchBase(binaries, tmp, runs, dbMB);
      const ratio = median(b.ours) / median(b.etcdctl);
      console.log(
        table(
          ['case', 'seconds (median)', 'MiB/s', 'runs'],
          [
            [
              'etcdctl snapshot restore',
              round3(median(b.etcdctl)),
              round1(b.dbBytes / MiB / median(b.etcdctl)),
              b.etcdctl.map(round3).join(' / '),
            ],
            [
              'executeRestore, Local store (in place)',
              round3(median(b.ours)),
              round1(b.dbBytes / MiB / median(b.ours)),
              b.ours.map(round3).join(' / '),
            ],
            [
              'executeRestore, streamed (download first)',
              round3(median(b.download)),
              round1(b.dbBytes / MiB / median(b.download)),
              b.download.map(round3).join(' / '),
            ],
          ],
        ),
      );
      console.log(`target ours/etcdctl <= ${BASE_TARGET}: ${ratio <= BASE_TARGET ? 'met' : 'MISSED'} (${ratio.toFixed(2)})`);
      const dl = median(b.download) / median(b.etcdctl);
      console.log(`(streamed, as from a remote store: ${dl.toFixed(2)} x etcdctl; the download itself is the difference)`);
      summary.base = {
        dbMB: round1(b.dbBytes / MiB),
        etcdctlSeconds: round3(median(b.etcdctl)),
        oursSeconds: round3(median(b.ours)),
        downloadSeconds: round3(median(b.download)),
        ratio: round3(ratio),
        downloadRatio: round3(dl),
        met: ratio <= BASE_TARGET,
      };
    }
    if (only.includes('rss')) {
      console.log(`\n(c) memory while restoring one ~${deltaMB} MiB delta`);
      const c = await benchRss(tmp, runs, deltaMB);
      const peak = median(c.runs.map((x) => x.peakRssMB));
      console.log(
        table(
          ['case', 'peak RSS MB (median)', 'baseline MB', 'seconds', 'rev/s'],
          [
            [
              'restore 1 large delta',
              peak,
              median(c.runs.map((x) => x.baselineRssMB)),
              round1(median(c.runs.map((x) => x.seconds))),
              Math.round(median(c.runs.map((x) => x.revisions / (x.replayMs / 1000)))),
            ],
          ],
        ),
      );
      console.log(`target peak RSS < ${RSS_TARGET_MB} MB: ${peak < RSS_TARGET_MB ? 'met' : 'MISSED'}`);
      summary.rss = { deltaJsonMB: round1(c.jsonBytes / MiB), peakRssMB: peak, met: peak < RSS_TARGET_MB };
    }
  } finally {
    await rm(tmp, { recursive: true, force: true });
    if (shm) await rm(shm, { recursive: true, force: true });
  }
  summary.loadAfter = os.loadavg()[0];
  console.log(`\nload average ${load()}`);
  console.log(JSON.stringify(summary));
}

await main();
