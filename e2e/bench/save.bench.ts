/**
 * Save throughput and memory: streams a generated 1 GiB snapshot into the Local store and into the S3
 * store (s3rver, a child process on port 0) and reports time, MiB/s and RSS of the saving process.
 *
 *   npm run bench -- [--compiled] save [-- --mib=1024 --parts=5 --chunk-mib=5 --copy=1 --runs=1]
 *
 * The data is produced on the fly from an 8 MiB random pool read at shifting offsets, so it does not
 * compress and is never held in memory as a whole. Each save runs in a fresh process (this file with
 * --child=...), so one store's leftovers do not count against the other; RSS is sampled every 20 ms.
 * s3rver's own memory is not counted (it is a separate process). Target: peak RSS < 150 MB. Under tsx
 * the process starts ~35 MiB higher than compiled (`--compiled`, see scripts/bench.mjs). The last line
 * is a JSON summary.
 */
import { randomFillSync } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { openLocalStore } from '../../snapstore/src/providers/local.js';
import { openS3Store } from '../../snapstore/src/providers/s3.js';
import type { SnapStore } from '../../snapstore/src/store.js';
import type { Snapshot } from '../../snapstore/src/snapshot.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from '../../snapstore/test/support/s3rver.js';
import { MiB, arg, measured, median, quietAwsNodeWarning, round1, table } from './support/measure.js';
import type { Run } from './support/measure.js';

const RSS_TARGET_MB = 150;

/** `size` bytes in 64 KiB chunks cut from a random pool at offsets that never repeat in step. */
function generated(size: number, copy: boolean): Readable {
  const pool = randomFillSync(Buffer.allocUnsafe(8 * MiB));
  const chunk = 64 * 1024;
  let sent = 0;
  let offset = 0;
  return new Readable({
    highWaterMark: chunk,
    read() {
      if (sent >= size) {
        this.push(null);
        return;
      }
      const n = Math.min(chunk, size - sent);
      offset = (offset + 7919 * 13) % (pool.length - n);
      sent += n;
      this.push(copy ? Buffer.from(pool.subarray(offset, offset + n)) : pool.subarray(offset, offset + n));
    },
  });
}

function snapshot(last: number): Snapshot {
  const created = Math.floor(Date.now() / 1000);
  return {
    kind: 'Full',
    startRevision: 0,
    lastRevision: last,
    createdOn: new Date(created * 1000),
    snapDir: '',
    snapName: `Full-00000000-${String(last).padStart(8, '0')}-${created}`,
    prefix: '',
    compressionSuffix: '',
    isChunk: false,
    isFinal: false,
  };
}

interface Options {
  size: number;
  parts: number;
  minChunkSize: number;
  /**
   * --copy=1: every chunk is a fresh buffer, as a codec's output is; the figure then includes the
   * producer's garbage waiting for GC. Default: views of the pool, so the figure is the store's own.
   */
  copy: boolean;
}

function options(): Options {
  return {
    size: arg('mib', 1024) * MiB,
    parts: arg('parts', 5),
    minChunkSize: arg('chunk-mib', 5) * MiB,
    copy: process.argv.includes('--copy=1'),
  };
}

/** --child=<Local|S3>: one save in this fresh process; prints the Run as JSON. */
async function child(store: string): Promise<void> {
  quietAwsNodeWarning();
  const o = options();
  const tmp = process.argv.find((a) => a.startsWith('--tmp='))?.slice(6) ?? os.tmpdir();
  const endpoint = process.argv.find((a) => a.startsWith('--s3='))?.slice(5) ?? '';
  const base = { container: 'bench', prefix: 'bench/v2', maxParallelChunkUploads: o.parts, minChunkSize: o.minChunkSize, tempDir: tmp };
  const s: SnapStore =
    store === 'Local'
      ? await openLocalStore({ ...base, provider: 'Local', rootDir: path.join(tmp, 'local') })
      : await openS3Store({
          ...base,
          provider: 'S3',
          endpointOverride: endpoint,
          credentials: { region: 'us-east-1', accessKeyID: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY, s3ForcePathStyle: true },
        });
  try {
    await s.list(); // connect before measuring
    const { run } = await measured(() => s.save(snapshot(1), generated(o.size, o.copy)));
    const listed = (await s.list()).find((x) => x.lastRevision === 1);
    if (listed?.sizeBytes !== o.size) throw new Error(`${store}: listed size ${listed?.sizeBytes} != ${o.size}`);
    await s.delete(listed);
    console.log(JSON.stringify(run));
  } finally {
    await s.close();
  }
}

function runInChild(store: string, tmp: string, s3: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const args = [
      ...process.execArgv,
      process.argv[1] as string,
      ...process.argv.slice(2),
      `--child=${store}`,
      `--tmp=${tmp}`,
      `--s3=${s3}`,
    ];
    const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    proc.once('error', reject);
    proc.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`${store} save failed (exit ${code})`));
      try {
        resolve(JSON.parse(out.trim().split('\n').pop() ?? '') as Run);
      } catch (e) {
        reject(e as Error);
      }
    });
  });
}

async function main(): Promise<void> {
  const o = options();
  const runs = arg('runs', 1);
  const underTsx = process.execArgv.some((a) => a.includes('tsx'));
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'save-bench-'));
  const s3rver = await startS3rver({ bucket: 'bench' });
  const all = new Map<string, Run[]>([
    ['Local', []],
    ['S3', []],
  ]);
  try {
    for (let r = 0; r < runs; r++) {
      for (const [store, list] of all) {
        const run = await runInChild(store, tmp, s3rver.endpoint);
        list.push(run);
        console.log(
          `${store.padEnd(6)} ${(o.size / MiB).toFixed(0)} MiB in ${run.seconds.toFixed(1)} s = ${round1(o.size / MiB / run.seconds)} MiB/s, ` +
            `RSS ${run.baselineRssMB} -> ${run.peakRssMB} MiB (heap ${run.atPeak.heapTotalMB}, buffers ${run.atPeak.arrayBuffersMB} at the peak)`,
        );
      }
    }
  } finally {
    await s3rver.stop();
    await rm(tmp, { recursive: true, force: true });
  }
  const results = [...all].map(([store, rs]) => {
    const seconds = median(rs.map((x) => x.seconds));
    return {
      store,
      bytes: o.size,
      seconds: round1(seconds),
      mbPerSec: round1(o.size / MiB / seconds),
      cpuSeconds: round1(median(rs.map((x) => x.cpuSeconds))),
      startRssMB: round1(median(rs.map((x) => x.baselineRssMB))),
      peakRssMB: round1(median(rs.map((x) => x.peakRssMB))),
      maxPeakRssMB: round1(Math.max(...rs.map((x) => x.peakRssMB))),
      growthMB: round1(median(rs.map((x) => x.peakRssMB - x.baselineRssMB))),
    };
  });
  console.log(`\nmedians of ${runs} run(s), a fresh process per save, ${underTsx ? 'tsx' : 'plain node'}`);
  console.log(
    table(
      ['store', 'seconds', 'MiB/s', 'cpu s', 'RSS start', 'RSS peak', 'peak - start'],
      results.map((r) => [
        r.store,
        r.seconds.toFixed(1),
        r.mbPerSec.toFixed(1),
        r.cpuSeconds.toFixed(1),
        r.startRssMB.toFixed(1),
        r.peakRssMB.toFixed(1),
        r.growthMB.toFixed(1),
      ]),
    ),
  );
  console.log(
    JSON.stringify({
      bench: 'save',
      node: process.version,
      runner: underTsx ? 'tsx' : 'node',
      mib: o.size / MiB,
      minChunkMiB: o.minChunkSize / MiB,
      maxParallelChunkUploads: o.parts,
      freshChunks: o.copy,
      runs,
      results,
      rssTargetMB: RSS_TARGET_MB,
      ok: results.every((r) => r.maxPeakRssMB < RSS_TARGET_MB),
    }),
  );
}

const childStore = process.argv.find((a) => a.startsWith('--child='))?.slice(8);
await (childStore ? child(childStore) : main());
