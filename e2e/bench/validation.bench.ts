/**
 * Data-dir validation speed and memory on a large etcd data dir.
 *
 *   npx tsx e2e/bench/validation.bench.ts
 *   BENCH_DB_MB=1024      size of data written (default 1 GiB), values of 1–100 KiB in 4 MiB transactions
 *   BENCH_DATA_DIR=dir    reuse an existing data dir instead of building one (it is then kept)
 *   BENCH_KEEP=1          keep the built data dir and print its path
 *
 * A real etcd writes the data and is stopped; then each validation mode runs 3 times in a child process of
 * its own (so its peak RSS is the validator's, not the loader's), and the medians are reported. Targets:
 * sanity < 1 s; full ≥ 300 MB/s over the bytes it must read (db file + WAL record bytes). The data was just
 * written, so it is mostly in the page cache: these are CPU-bound figures. Wall and CPU seconds are both
 * shown: on a shared machine CPU time is the steadier measure. The last line is a JSON summary.
 */
import { spawnSync } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import { checkConsistency } from '../../src/bbolt/check.js';
import { latestRevision } from '../../src/backend/store-revision.js';
import { findEtcdBinaries } from '../../src/etcd/binaries.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { createLogger } from '../../src/log.js';
import { DataDirStatus, dataDirStatusName } from '../../src/initializer/validation-status.js';
import { validateDataDir } from '../../src/initializer/validator.js';
import type { ValidationMode } from '../../src/initializer/validator.js';
import { loadNewestSnapshot } from '../../src/wal/snap.js';
import { verifyWal } from '../../src/wal/verify.js';

const MiB = 1024 * 1024;
const MB = 1e6;
const RUNS = 3;
const SANITY_TARGET_S = 1;
const FULL_TARGET_MBPS = 300;
const TXN_BYTES = 4 * MiB;

interface RunFigures {
  wall: number;
  cpu: number;
}

interface ChildReport {
  mode: ValidationMode;
  runs: RunFigures[];
  /** Full mode: the parts timed on their own (last run). */
  parts?: { walSeconds: number; dbSeconds: number; walBytes: number; dbBytes: number };
  maxRssMB: number;
  baseRssMB: number;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const round = (n: number, d = 2): number => Math.round(n * 10 ** d) / 10 ** d;

function mute() {
  return createLogger({ destination: { write: () => undefined }, logLevel: 2 });
}

/** Child: runs one mode RUNS times and prints a ChildReport as JSON. */
async function child(dataDir: string, mode: ValidationMode): Promise<void> {
  const baseRssMB = process.memoryUsage().rss / MiB;
  const dbPath = join(dataDir, 'member', 'snap', 'db');
  const revision = await latestRevision(dbPath);
  const runs: RunFigures[] = [];
  for (let i = 0; i < RUNS; i++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    const r = await validateDataDir({ dataDir, mode, clusterSize: 1, latestSnapshotRevision: revision, logger: mute(), lockTimeoutMs: 0 });
    const wall = (performance.now() - t0) / 1000;
    const cu = process.cpuUsage(c0);
    if (r.status !== DataDirStatus.DataDirectoryValid) throw new Error(`${mode}: ${dataDirStatusName(r.status)} ${r.reason ?? ''}`);
    runs.push({ wall, cpu: (cu.user + cu.system) / 1e6 });
  }
  let parts: ChildReport['parts'];
  if (mode === 'full') {
    const t0 = performance.now();
    const snap = await loadNewestSnapshot(join(dataDir, 'member', 'snap'));
    const wal = await verifyWal(join(dataDir, 'member', 'wal'), snap.snapshot);
    const t1 = performance.now();
    const check = await checkConsistency(dbPath);
    const t2 = performance.now();
    parts = { walSeconds: (t1 - t0) / 1000, dbSeconds: (t2 - t1) / 1000, walBytes: wal.bytes, dbBytes: check.bytesRead };
  }
  const report: ChildReport = { mode, runs, maxRssMB: process.resourceUsage().maxRSS / 1024, baseRssMB };
  if (parts) report.parts = parts;
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

/** Writes about `mb` MiB of values of 1–100 KiB through a real etcd into a new data dir. */
async function build(mb: number): Promise<{ root: string; dataDir: string }> {
  const root = await mkdtemp(join(tmpdir(), 'validation-bench-'));
  const dataDir = join(root, 'data');
  const binaries = await findEtcdBinaries({ etcdBin: process.env.ETCD_BIN, path: process.env.PATH ?? '' });
  const etcd = await startLocalEtcd({
    binaries,
    dataDir,
    quotaBackendBytes: 8 * 1024 * MiB,
    maxRequestBytes: 2 * TXN_BYTES,
    maxTxnOps: 10_000,
  });
  const pool = randomFillSync(Buffer.allocUnsafe(16 * MiB));
  let seed = 12345;
  const rnd = (): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed;
  };
  const started = performance.now();
  const client = new Etcd3({ hosts: etcd.clientUrl });
  try {
    let written = 0;
    let k = 0;
    while (written < mb * MiB) {
      const ops = [];
      let batch = 0;
      while (batch < TXN_BYTES && written + batch < mb * MiB) {
        const size = 1024 + (rnd() % (99 * 1024));
        const off = rnd() % (pool.length - size);
        ops.push({
          request_put: { key: Buffer.from(`/registry/bench/${String(k++).padStart(8, '0')}`), value: pool.subarray(off, off + size) },
        });
        batch += size;
      }
      await client.kv.txn({ success: ops });
      written += batch;
      if (k % 2000 < ops.length) process.stderr.write(`\rwritten ${(written / MiB).toFixed(0)} MiB`);
    }
    process.stderr.write(
      `\rwritten ${(written / MiB).toFixed(0)} MiB in ${((performance.now() - started) / 1000).toFixed(1)} s, ${k} keys\n`,
    );
  } finally {
    client.close();
    await etcd.stop();
  }
  return { root, dataDir };
}

async function sizes(dataDir: string): Promise<{ db: number; walFiles: number; walCount: number }> {
  const db = (await stat(join(dataDir, 'member', 'snap', 'db'))).size;
  const walDir = join(dataDir, 'member', 'wal');
  let walFiles = 0;
  let walCount = 0;
  for (const n of await readdir(walDir)) {
    if (!n.endsWith('.wal')) continue;
    walFiles += (await stat(join(walDir, n))).size;
    walCount++;
  }
  return { db, walFiles, walCount };
}

function runChild(dataDir: string, mode: ValidationMode): ChildReport {
  const tsx = fileURLToPath(new URL('../../node_modules/tsx/dist/cli.mjs', import.meta.url));
  const self = fileURLToPath(import.meta.url);
  const r = spawnSync(process.execPath, [tsx, self, `--child=${mode}`, `--dir=${dataDir}`], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, NODE_OPTIONS: [process.env.NODE_OPTIONS, '--conditions=development'].filter(Boolean).join(' ') },
    maxBuffer: 16 * MiB,
  });
  if (r.status !== 0) throw new Error(`${mode} child failed (exit ${r.status ?? r.signal})`);
  const line = r.stdout.trim().split('\n').pop()!;
  return JSON.parse(line) as ChildReport;
}

async function main(): Promise<void> {
  const childMode = process.argv.find((a) => a.startsWith('--child='))?.slice(8) as ValidationMode | undefined;
  if (childMode) {
    await child(process.argv.find((a) => a.startsWith('--dir='))!.slice(6), childMode);
    return;
  }
  const mb = Number(process.env.BENCH_DB_MB ?? 1024);
  if (!Number.isFinite(mb) || mb <= 0) throw new Error('bad BENCH_DB_MB');
  let root: string | undefined;
  let dataDir = process.env.BENCH_DATA_DIR;
  if (!dataDir) ({ root, dataDir } = await build(mb));
  try {
    const sz = await sizes(dataDir);
    const sanity = runChild(dataDir, 'sanity');
    const full = runChild(dataDir, 'full');
    const walBytes = full.parts!.walBytes;
    const readBytes = sz.db + walBytes;
    const sanityWall = median(sanity.runs.map((r) => r.wall));
    const fullWall = median(full.runs.map((r) => r.wall));
    const fullCpu = median(full.runs.map((r) => r.cpu));
    const rows: [string, string, string, string, string][] = [
      ['mode', 'median wall s', 'median cpu s', 'MB/s (wall / cpu)', 'peak RSS MiB (base)'],
      [
        'sanity',
        round(sanityWall, 3).toString(),
        round(median(sanity.runs.map((r) => r.cpu)), 3).toString(),
        '-',
        `${round(sanity.maxRssMB, 0)} (${round(sanity.baseRssMB, 0)})`,
      ],
      [
        'full',
        round(fullWall).toString(),
        round(fullCpu).toString(),
        `${round(readBytes / MB / fullWall, 0)} / ${round(readBytes / MB / fullCpu, 0)}`,
        `${round(full.maxRssMB, 0)} (${round(full.baseRssMB, 0)})`,
      ],
    ];
    console.log(
      `data dir ${dataDir}: db ${round(sz.db / MiB, 0)} MiB, WAL ${sz.walCount} segment(s) of ${round(sz.walFiles / MiB, 0)} MiB ` +
        `holding ${round(walBytes / MiB, 0)} MiB of records`,
    );
    for (const r of rows) console.log(`${r[0].padEnd(8)}${r[1].padStart(15)}${r[2].padStart(15)}${r[3].padStart(20)}${r[4].padStart(22)}`);
    const p = full.parts!;
    console.log(
      `full, parts (one run): WAL ${round(p.walSeconds)} s = ${round(p.walBytes / MB / p.walSeconds, 0)} MB/s, ` +
        `bbolt check ${round(p.dbSeconds)} s = ${round(p.dbBytes / MB / p.dbSeconds, 0)} MB/s`,
    );
    const summary = {
      bench: 'validation',
      dbBytes: sz.db,
      walRecordBytes: walBytes,
      walFileBytes: sz.walFiles,
      sanity: {
        medianSeconds: round(sanityWall, 4),
        cpuSeconds: round(median(sanity.runs.map((r) => r.cpu)), 4),
        peakRssMB: round(sanity.maxRssMB, 1),
        targetSeconds: SANITY_TARGET_S,
        ok: sanityWall < SANITY_TARGET_S,
      },
      full: {
        medianSeconds: round(fullWall, 3),
        cpuSeconds: round(fullCpu, 3),
        mbPerSec: round(readBytes / MB / fullWall, 1),
        mbPerCpuSec: round(readBytes / MB / fullCpu, 1),
        peakRssMB: round(full.maxRssMB, 1),
        walMBps: round(p.walBytes / MB / p.walSeconds, 1),
        dbMBps: round(p.dbBytes / MB / p.dbSeconds, 1),
        targetMBps: FULL_TARGET_MBPS,
        ok: readBytes / MB / fullWall >= FULL_TARGET_MBPS,
      },
      runs: { sanity: sanity.runs, full: full.runs },
    };
    console.log(JSON.stringify(summary));
  } finally {
    if (root && process.env.BENCH_KEEP !== '1') await rm(root, { recursive: true, force: true });
    else if (root) console.log(`kept ${dataDir}`);
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
