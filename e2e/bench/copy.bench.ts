/**
 * Copy throughput and memory: a ~1 GiB store (3 full snapshots of ~300 MiB and 100 gzip deltas of ~1 MiB,
 * all with valid sha256 trailers, so the copier's integrity check does its full work) is copied
 * Local → S3 (s3rver, a child process) and back S3 → Local with `copyBackups` and the CLI's defaults
 * (10 parallel copies, S3 parts of 5 MiB × 5 in flight, 32 MiB upload-buffer budget). Reports time,
 * MiB/s and the peak RSS of this process (s3rver's own memory is not counted); target peak RSS < 200 MB.
 * The round trip must give back every object byte for byte.
 *
 *   npx tsx e2e/bench/copy.bench.ts [--full-mib=300] [--fulls=3] [--deltas=100] [--delta-kib=1024] [--budget-mib=32]
 *
 * The last line is a JSON summary.
 */
import { createHash, randomFillSync } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { createCompressStream, newSnapshot, openSnapStore, silentLogger, type SnapStore, type StoreConfig } from '@etcdbrctl/snapstore';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from '../../snapstore/test/support/s3rver.js';
import { systemClock } from '../../src/clock.js';
import { copyBackups, type CopyResult } from '../../src/copier/copier.js';
import { arg, measured, MiB, quietAwsNodeWarning, round1, table, type Run } from './support/measure.js';

const RSS_TARGET_MB = 200;
const fullMiB = arg('full-mib', 300);
const fulls = arg('fulls', 3);
const deltas = arg('deltas', 100);
const deltaKiB = arg('delta-kib', 1024);
/** Upload-buffer budget of the copier; default: the copier's own default. */
const budgetMiB = process.argv.some((a) => a.startsWith('--budget-mib=')) ? arg('budget-mib', 32) : undefined;

/** `size` bytes (a multiple of 512) from a random pool read at shifting offsets, then their sha256. */
function payloadStream(size: number): Readable {
  const pool = randomFillSync(Buffer.allocUnsafe(8 * MiB));
  const hash = createHash('sha256');
  const chunk = 64 * 1024;
  let sent = 0;
  let offset = 0;
  return new Readable({
    highWaterMark: chunk,
    read() {
      if (sent >= size) {
        if (sent === size) {
          sent++;
          this.push(hash.digest());
        }
        this.push(null);
        return;
      }
      const n = Math.min(chunk, size - sent);
      offset = (offset + 7919 * 13) % (pool.length - n);
      const piece = pool.subarray(offset, offset + n);
      hash.update(piece);
      sent += n;
      this.push(piece);
    },
  });
}

/** Writes the source store: fulls and, after each, its share of the deltas. */
async function buildSource(store: SnapStore): Promise<number> {
  const t0 = Date.UTC(2027, 0, 1) / 1000;
  let rev = 0;
  let second = t0;
  const perFull = Math.ceil(deltas / fulls);
  let written = 0;
  for (let f = 0; f < fulls; f++) {
    rev += 1000;
    const full = newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: rev, createdOn: new Date(++second * 1000) });
    await store.save(full, payloadStream(fullMiB * MiB));
    for (let d = 0; d < perFull && written < deltas; d++, written++) {
      const snap = newSnapshot({ kind: 'Incr', startRevision: rev + 1, lastRevision: rev + 100, createdOn: new Date(++second * 1000), compressionSuffix: '.gz' });
      rev += 100;
      await store.save(snap, payloadStream(deltaKiB * 1024).pipe(createCompressStream('gzip')));
    }
  }
  return (await store.list()).reduce((n, s) => n + (s.sizeBytes ?? 0), 0);
}

async function fileHashes(root: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const walk = async (dir: string, rel: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      if (e.isDirectory()) await walk(path.join(dir, e.name), `${rel}${e.name}/`);
      else {
        const h = createHash('sha256');
        for await (const c of createReadStream(path.join(dir, e.name))) h.update(c as Buffer);
        out.set(`${rel}${e.name}`, h.digest('hex'));
      }
    }
  };
  await walk(root, '');
  return out;
}

interface Row {
  direction: string;
  objects: number;
  bytes: number;
  run: Run;
}

async function main(): Promise<void> {
  quietAwsNodeWarning();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'copy-bench-'));
  const s3rver = await startS3rver({ bucket: 'bench' });
  const rows: Row[] = [];
  try {
    const base = { container: 'bench', prefix: 'bench/v2', maxParallelChunkUploads: 5, minChunkSize: 5 * MiB, tempDir: dir };
    const localConfig = (name: string): StoreConfig => ({ ...base, provider: 'Local', rootDir: path.join(dir, name) });
    const s3Config: StoreConfig = {
      ...base,
      provider: 'S3',
      endpointOverride: s3rver.endpoint,
      credentials: { region: 'us-east-1', accessKeyID: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY, s3ForcePathStyle: true },
    };
    const source = await openSnapStore(localConfig('source'));
    const t0 = Date.now();
    const total = await buildSource(source);
    console.log(`source: ${fulls} fulls of ${fullMiB} MiB + ${deltas} gzip deltas of ${deltaKiB} KiB = ${round1(total / MiB)} MiB, written in ${round1((Date.now() - t0) / 1000)} s`);

    const s3 = await openSnapStore(s3Config);
    const back = await openSnapStore(localConfig('back'));
    const copy = async (direction: string, from: SnapStore, to: SnapStore, saveBufferBytes: number) => {
      const { run, value } = await measured<CopyResult>(() =>
        copyBackups(
          { source: from, destination: to, logger: silentLogger, clock: systemClock, saveBufferBytes, ...(budgetMiB ? { memoryBudgetBytes: budgetMiB * MiB } : {}) },
          { maxBackupsToCopy: -1, maxBackupAge: -1, maxParallelCopyOperations: 10, waitForFinalSnapshot: false, waitForFinalSnapshotTimeout: 0 },
        ),
      );
      rows.push({ direction, objects: value.copied.length, bytes: value.bytes, run });
      console.log(`${direction}: ${value.copied.length} objects, ${round1(value.bytes / MiB)} MiB in ${round1(run.seconds)} s, peak RSS ${run.peakRssMB} MiB`);
    };
    await copy('Local → S3', source, s3, 6 * 5 * MiB);
    await copy('S3 → Local', s3, back, 0);
    await source.close();
    await s3.close();
    await back.close();

    const a = await fileHashes(path.join(dir, 'source'));
    const b = await fileHashes(path.join(dir, 'back'));
    const identical = a.size === b.size && [...a].every(([k, h]) => b.get(k) === h);
    if (!identical) throw new Error('the round trip changed the store');

    const maxRssMB = round1(process.resourceUsage().maxRSS / 1024);
    const peak = Math.max(...rows.map((r) => r.run.peakRssMB));
    console.log(
      '\n' +
        table(
          ['copy', 'objects', 'MiB', 'seconds', 'MiB/s', 'cpu s', 'peak RSS MiB', 'baseline RSS MiB'],
          rows.map((r) => [
            r.direction,
            r.objects,
            round1(r.bytes / MiB),
            round1(r.run.seconds),
            round1(r.bytes / MiB / r.run.seconds),
            round1(r.run.cpuSeconds),
            r.run.peakRssMB,
            r.run.baselineRssMB,
          ]),
        ),
    );
    console.log(`round trip identical: ${identical}; process maxRSS ${maxRssMB} MiB; target peak RSS < ${RSS_TARGET_MB} MB: ${peak < RSS_TARGET_MB ? 'met' : 'MISSED'}`);
    console.log(
      JSON.stringify({
        bench: 'copy',
        bytes: total,
        results: rows.map((r) => ({
          direction: r.direction,
          objects: r.objects,
          bytes: r.bytes,
          seconds: round1(r.run.seconds),
          mibPerSec: round1(r.bytes / MiB / r.run.seconds),
          peakRssMB: r.run.peakRssMB,
        })),
        peakRssMB: peak,
        maxRssMB,
        rssTargetMB: RSS_TARGET_MB,
        rssTargetMet: peak < RSS_TARGET_MB,
        identical,
      }),
    );
  } finally {
    await s3rver.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
