/**
 * Save throughput and memory: streams a generated 1 GiB snapshot into the Local store and into the S3
 * store (s3rver, a child process on port 0) and reports time, MB/s and peak RSS of this process.
 *
 *   npx tsx e2e/bench/save.bench.ts [--mib=1024] [--parts=5] [--chunk-mib=5] [--copy=1]
 *
 * The data is produced on the fly from an 8 MiB random pool read at shifting offsets, so it does not
 * compress and is never held in memory as a whole. RSS is sampled every 50 ms during each save;
 * `maxRSS` is the kernel's high-water mark for the whole process. s3rver's own memory is not counted
 * (it is a separate process). Target: peak RSS < 150 MB. Under tsx the process starts at ~75 MiB
 * (~90 with the AWS SDK loaded), about 35 MiB more than the same code compiled to JS. The last line
 * is a JSON summary.
 */
import { randomFillSync } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { openLocalStore } from '../../snapstore/src/providers/local.js';
import { openS3Store } from '../../snapstore/src/providers/s3.js';
import type { SnapStore } from '../../snapstore/src/store.js';
import type { Snapshot } from '../../snapstore/src/snapshot.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from '../../snapstore/test/support/s3rver.js';

const MiB = 1024 * 1024;
const RSS_TARGET_MB = 150;

function arg(name: string, fallback: number): number {
  const hit = process.argv.find((a) => a.startsWith(`--${name}=`));
  const value = hit === undefined ? fallback : Number(hit.slice(name.length + 3));
  if (!Number.isFinite(value) || value <= 0) throw new Error(`bad --${name}`);
  return value;
}

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

interface Result {
  store: string;
  bytes: number;
  seconds: number;
  mbPerSec: number;
  peakRssMB: number;
  /** Peak minus the RSS right before this save: what the save itself cost. */
  growthMB: number;
}

async function measure(label: string, store: SnapStore, size: number, last: number): Promise<Result> {
  (globalThis as { gc?: () => void }).gc?.();
  const before = process.memoryUsage().rss;
  let peak = before;
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 50);
  const started = process.hrtime.bigint();
  try {
    await store.save(snapshot(last), generated(size, copyChunks));
  } finally {
    clearInterval(timer);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  peak = Math.max(peak, process.memoryUsage().rss);
  const listed = (await store.list()).find((s) => s.lastRevision === last);
  if (listed?.sizeBytes !== size) throw new Error(`${label}: listed size ${listed?.sizeBytes} != ${size}`);
  await store.delete(listed);
  const r = {
    store: label,
    bytes: size,
    seconds: round(seconds),
    mbPerSec: round(size / MiB / seconds),
    peakRssMB: round(peak / MiB),
    growthMB: round((peak - before) / MiB),
  };
  console.log(
    `${label.padEnd(6)} ${(size / MiB).toFixed(0)} MiB in ${r.seconds} s = ${r.mbPerSec} MiB/s, peak RSS ${r.peakRssMB} MiB (+${r.growthMB})`,
  );
  return r;
}

const round = (n: number): number => Math.round(n * 10) / 10;

/**
 * --copy=1: every chunk is a fresh buffer, as a codec's output is; the figure then includes the
 * producer's garbage waiting for GC. Default: views of the pool, so the figure is the store's own.
 */
const copyChunks = process.argv.includes('--copy=1');

async function main(): Promise<void> {
  const size = arg('mib', 1024) * MiB;
  const parts = arg('parts', 5);
  const minChunkSize = arg('chunk-mib', 5) * MiB;
  (globalThis as { gc?: () => void }).gc?.();
  const baselineRssMB = round(process.memoryUsage().rss / MiB);
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'save-bench-'));
  const results: Result[] = [];
  const s3rver = await startS3rver({ bucket: 'bench' });
  try {
    const base = { container: 'bench', prefix: 'bench/v2', maxParallelChunkUploads: parts, minChunkSize, tempDir: tmp };
    const local = await openLocalStore({ ...base, provider: 'Local', rootDir: path.join(tmp, 'local') });
    results.push(await measure('Local', local, size, 1));
    await local.close();

    const s3 = await openS3Store({
      ...base,
      provider: 'S3',
      endpointOverride: s3rver.endpoint,
      credentials: { region: 'us-east-1', accessKeyID: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY, s3ForcePathStyle: true },
    });
    results.push(await measure('S3', s3, size, 2));
    await s3.close();
  } finally {
    await s3rver.stop();
    await rm(tmp, { recursive: true, force: true });
  }
  const maxRssMB = round(process.resourceUsage().maxRSS / 1024);
  const peak = Math.max(maxRssMB, ...results.map((r) => r.peakRssMB));
  console.log(
    JSON.stringify({
      bench: 'save',
      node: process.version,
      mib: size / MiB,
      minChunkMiB: minChunkSize / MiB,
      maxParallelChunkUploads: parts,
      freshChunks: copyChunks,
      baselineRssMB,
      results,
      maxRssMB,
      rssTargetMB: RSS_TARGET_MB,
      ok: peak < RSS_TARGET_MB,
    }),
  );
}

await main();
