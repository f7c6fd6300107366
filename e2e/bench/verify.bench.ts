/**
 * `etcdbrctl verify` against the time it takes just to download the same objects.
 *
 *   npm run bench -- verify [-- --runs=3]
 *   env: BENCH_DB_MB (1024: the full snapshot's database), BENCH_DELTAS (1000), BENCH_DELTA_EVENTS (100),
 *        BENCH_DELTA_COMPRESSION (gzip; none, zlib, zstd)
 *
 * The store is an S3 bucket on s3rver (the S3 emulator, a child process), as a remote store is where a scrub
 * runs in practice. It holds one full snapshot of a BENCH_DB_MB MiB etcd backend (written by our bbolt
 * writer: revision keys and mvcc values of 1 KiB, as etcd stores them; uncompressed, as the fastest
 * download is the strictest floor) and BENCH_DELTAS gzip deltas of BENCH_DELTA_EVENTS puts each after it.
 *   download  every object fetched through the same store and dropped: the full, then the deltas
 *             with the same parallelism as verify (6)
 *   verify    verifyBackups on the newest chain: decompression, sha256, the bbolt check of the full (as
 *             its pages stream by), every delta event parsed and its revisions checked
 * Runs alternate (a download, then a verify); medians, with the CPU seconds of this process and of s3rver
 * (which shares the cores) and the load average, as the machine may be shared. Target (issue 15): verify
 * <= 1.2x download, judged on the median of each run's own ratio: on a shared machine the speed of the whole
 * machine drifts by a third between runs, and a download and the verify right after it see the same machine
 * (the ratio of the two medians is printed too). The last line is JSON.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { newSnapshot, type CompressionPolicy, type SnapStore, type Snapshot } from '../../snapstore/src/index.js';
import { openS3Store } from '../../snapstore/src/providers/s3.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from '../../snapstore/test/support/s3rver.js';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { BoltWriter, type WriterEntry } from '../../src/bbolt/writer.js';
import { encodePutValue, revisionKey } from '../../src/restorer/mvcc.js';
import { DeltaBuffer } from '../../src/snapshotter/delta-buffer.js';
import { saveDeltaSnapshot } from '../../src/snapshotter/delta-snapshot.js';
import { planVerification } from '../../src/verifier/chains.js';
import { verifyBackups } from '../../src/verifier/verify.js';
import { MiB, arg, median, processCpuSeconds, quietAwsNodeWarning, round1, table } from './support/measure.js';

const TARGET = 1.2;
const FETCHERS = 6;
const VALUE_BYTES = 1024;
/** BENCH_DELTA_COMPRESSION: the deltas' compression policy, 'none' for uncompressed (default gzip). */
const DELTA_COMPRESSION =
  process.env.BENCH_DELTA_COMPRESSION === 'none' ? undefined : ((process.env.BENCH_DELTA_COMPRESSION ?? 'gzip') as CompressionPolicy);

/** An etcd backend of about `mb` MiB: `key` (one put per revision over a key space) and `meta` buckets. */
async function writeBackend(file: string, mb: number): Promise<{ revision: number }> {
  const revisions = Math.max(1, Math.floor((mb * MiB) / (VALUE_BYTES + 120)));
  const value = Buffer.alloc(VALUE_BYTES, 0x76);
  function* keys(): Generator<WriterEntry> {
    for (let rev = 2; rev < revisions + 2; rev++) {
      const key = Buffer.from(`/registry/bench/${String(rev % 50_000).padStart(6, '0')}`);
      yield { key: revisionKey(rev, 0, false), value: encodePutValue({ key, createRevision: rev, modRevision: rev, version: 1, value }) };
    }
  }
  const w = await BoltWriter.create(file, { pageSize: 4096, txid: 2 });
  await w.writeBucket(Buffer.from('key'), keys());
  await w.writeBucket(Buffer.from('meta'), [{ key: Buffer.from('consistent_index'), value: Buffer.alloc(8) }]);
  await w.finish();
  return { revision: revisions + 1 };
}

async function buildStore(store: SnapStore, tmp: string, dbMB: number, deltas: number, perDelta: number): Promise<void> {
  const db = path.join(tmp, 'full.db');
  const { revision } = await writeBackend(db, dbMB);
  const hash = createHash('sha256');
  await pipeline(createReadStream(db), hash);
  const created = Math.floor(Date.now() / 1000) - deltas - 10;
  const full = newSnapshot({
    kind: 'Full',
    startRevision: 0,
    lastRevision: revision,
    createdOn: new Date(created * 1000),
    compressionSuffix: '',
  });
  async function* payload() {
    yield* createReadStream(db, { highWaterMark: MiB });
    yield hash.digest();
  }
  await store.save(full, Readable.from(payload()));
  await rm(db, { force: true });
  let rev = revision;
  for (let d = 0; d < deltas; d++) {
    const buf = new DeltaBuffer();
    const start = rev + 1;
    for (let i = 0; i < perDelta; i++) {
      rev++;
      const ev: DeltaEvent = {
        type: 'PUT',
        key: Buffer.from(`/registry/delta/${rev % 5000}`),
        value: Buffer.alloc(200, 0x64),
        createRevision: rev,
        modRevision: rev,
        version: 1,
        lease: '0',
        time: '2026-11-25T00:00:00Z',
      };
      buf.append(ev);
    }
    await saveDeltaSnapshot(store, buf.take()!, start, DELTA_COMPRESSION, new Date((created + d + 1) * 1000));
  }
}

/** Fetches every object and drops the bytes: the full, then the deltas `FETCHERS` at a time. */
async function downloadAll(store: SnapStore, full: Snapshot, deltas: readonly Snapshot[]): Promise<number> {
  let bytes = 0;
  const drain = async (s: Snapshot) => {
    await pipeline(
      await store.fetch(s),
      new Writable({
        write(chunk: Buffer, _e, cb) {
          bytes += chunk.length;
          cb();
        },
      }),
    );
  };
  await drain(full);
  let next = 0;
  await Promise.all(
    Array.from({ length: FETCHERS }, async () => {
      while (next < deltas.length) await drain(deltas[next++]!);
    }),
  );
  return bytes;
}

/** The 1-minute load average and the cores, as the machine running the bench may be shared. */
function loadavg(): string {
  return `${os.loadavg()[0]!.toFixed(2)} on ${os.cpus().length} cores`;
}

async function main(): Promise<void> {
  quietAwsNodeWarning();
  const runs = arg('runs', 5);
  const dbMB = Number(process.env.BENCH_DB_MB ?? 1024);
  const deltaCount = Number(process.env.BENCH_DELTAS ?? 1000);
  const perDelta = Number(process.env.BENCH_DELTA_EVENTS ?? 100);
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'verify-bench-'));
  const s3rver = await startS3rver({ bucket: 'bench' });
  try {
    const store = await openS3Store({
      provider: 'S3',
      container: 'bench',
      prefix: 'bench/v2',
      maxParallelChunkUploads: 5,
      minChunkSize: 5 * MiB,
      tempDir: tmp,
      endpointOverride: s3rver.endpoint,
      credentials: { region: 'us-east-1', accessKeyID: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY, s3ForcePathStyle: true },
    });
    const t0 = Date.now();
    await buildStore(store, tmp, dbMB, deltaCount, perDelta);
    const plan = planVerification(await store.list(), { all: false });
    const chain = plan.chains[0]!;
    console.log(
      `node ${process.version}, ${os.cpus().length} CPUs; store on s3rver: a full of ${round1((chain.base.sizeBytes ?? 0) / MiB)} MiB and ` +
        `${chain.deltas.length} gzip deltas of ${perDelta} events (set up in ${round1((Date.now() - t0) / 1000)} s)`,
    );
    const download: number[] = [];
    const verify: number[] = [];
    const downloadCpu: number[] = [];
    const verifyCpu: number[] = [];
    // s3rver shares the cores: its CPU seconds show how much of a run was the server's.
    const serverCpu = { download: [] as number[], verify: [] as number[] };
    const cpuSince = (c0: NodeJS.CpuUsage): number => {
      const c = process.cpuUsage(c0);
      return (c.user + c.system) / 1e6;
    };
    for (let r = 0; r < runs; r++) {
      let t = process.hrtime.bigint();
      let c = process.cpuUsage();
      let s = await processCpuSeconds(s3rver.pid);
      const bytes = await downloadAll(store, chain.base, chain.deltas);
      download.push(Number(process.hrtime.bigint() - t) / 1e9);
      downloadCpu.push(cpuSince(c));
      serverCpu.download.push((await processCpuSeconds(s3rver.pid)) - s);
      t = process.hrtime.bigint();
      c = process.cpuUsage();
      s = await processCpuSeconds(s3rver.pid);
      const report = await verifyBackups(store, plan, { maxFetchers: FETCHERS });
      verify.push(Number(process.hrtime.bigint() - t) / 1e9);
      verifyCpu.push(cpuSince(c));
      serverCpu.verify.push((await processCpuSeconds(s3rver.pid)) - s);
      if (!report.restorable) throw new Error(`verify found the bench store broken: ${JSON.stringify(report.firstBroken)}`);
      if (report.bytes !== bytes) throw new Error(`verify read ${report.bytes} bytes, the download ${bytes}`);
      console.log(
        `  run ${r + 1}: download ${download.at(-1)!.toFixed(2)} s (CPU ${downloadCpu.at(-1)!.toFixed(2)} s, s3rver ${serverCpu.download.at(-1)!.toFixed(2)} s), ` +
          `verify ${verify.at(-1)!.toFixed(2)} s (CPU ${verifyCpu.at(-1)!.toFixed(2)} s, s3rver ${serverCpu.verify.at(-1)!.toFixed(2)} s), ` +
          `ratio ${(verify.at(-1)! / download.at(-1)!).toFixed(2)}; ` +
          `${round1(bytes / MiB)} MiB; load ${loadavg()}`,
      );
    }
    const d = median(download);
    const v = median(verify);
    const paired = median(verify.map((x, i) => x / download[i]!));
    console.log(
      table(
        ['case', 'seconds (median)', 'CPU s, this process', 'CPU s, s3rver'],
        [
          ['download', d.toFixed(2), median(downloadCpu).toFixed(2), median(serverCpu.download).toFixed(2)],
          ['verify', v.toFixed(2), median(verifyCpu).toFixed(2), median(serverCpu.verify).toFixed(2)],
        ],
      ),
    );
    const ratio = paired;
    console.log(
      `verify ÷ download: ${ratio.toFixed(2)} (median of the runs' ratios; ratio of the medians ${(v / d).toFixed(2)}); ` +
        `target <= ${TARGET}: ${ratio <= TARGET ? 'met' : 'MISSED'}`,
    );
    console.log(
      JSON.stringify({
        bench: 'verify',
        dbMB,
        deltas: deltaCount,
        downloadSeconds: round1(d),
        verifySeconds: round1(v),
        downloadCpuSeconds: round1(median(downloadCpu)),
        verifyCpuSeconds: round1(median(verifyCpu)),
        ratio: Math.round(ratio * 100) / 100,
        ratioOfMedians: Math.round((v / d) * 100) / 100,
        met: ratio <= TARGET,
      }),
    );
    await store.close();
  } finally {
    await s3rver.stop();
    await rm(tmp, { recursive: true, force: true });
  }
}

await main();
