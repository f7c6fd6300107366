/**
 * Full snapshot of a real etcd: our `takeFullSnapshot` against `etcdctl snapshot save`.
 *
 *   BENCH_DB_MB=1024 node --expose-gc --conditions=development --import tsx e2e/bench/full-snapshot.bench.ts [--runs=3]
 *
 * Starts an etcd (quota 8 GiB) in a temp dir, fills it with ~BENCH_DB_MB MiB of kube-like values from a
 * child process (support/fill-etcd.ts, so this process never holds the data), then, `--runs` times and
 * interleaved so load drift on a shared machine hits every case alike:
 *   etcdctl      `ETCDCTL_API=3 etcdctl snapshot save <file>` (the baseline; writes and fsyncs a file)
 *   local/none   takeFullSnapshot -> Local store, uncompressed
 *   local/zstd   takeFullSnapshot -> Local store, zstd
 *   s3/none      takeFullSnapshot -> S3 store on s3rver (a child process), uncompressed
 *   s3/zstd      takeFullSnapshot -> S3 store on s3rver, zstd
 * Then the stages of our path, each into a sink that drops the bytes, to show where time goes:
 *   drain        etcd's snapshot stream through the etcd3 client, nothing else
 *   verify       + the sha256 trailer check (FullSnapshotVerifier)
 *   verify+zstd  + zstd compression
 * Reports medians: seconds, MiB/s, ours/etcdctl, CPU seconds of this process, peak RSS (sampled every
 * 20 ms) and its growth above the RSS right before the run. Targets: ours/etcdctl <= 1.25 for the Local
 * store, peak RSS < 150 MB. The last line is a JSON summary.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import type { Etcd3 } from 'etcd3';
import { createCompressStream, silentLogger } from '../../snapstore/src/index.js';
import type { CompressionPolicy, SnapStore, Snapshot } from '../../snapstore/src/index.js';
import { openLocalStore } from '../../snapstore/src/providers/local.js';
import { openS3Store } from '../../snapstore/src/providers/s3.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from '../../snapstore/test/support/s3rver.js';
import { FullSnapshotVerifier } from '../../src/backup/full-verify.js';
import { createEtcdClient } from '../../src/etcd/client.js';
import { takeFullSnapshot } from '../../src/snapshotter/full-snapshot.js';
import { etcdBinaries, startTestEtcd } from '../../test/support/etcd.js';
import { MiB, arg, measured, median, quietAwsNodeWarning, round1, round3, table } from './support/measure.js';
import type { Run } from './support/measure.js';

const RSS_TARGET_MB = 150;
const RATIO_TARGET = 1.25;
const GiB = 1024 * MiB;

interface CaseResult {
  name: string;
  runs: Run[];
  /** Bytes written per run (the stored object or file). */
  storedBytes: number[];
}

const NULL_PREFIX = 'null/v2';

/** A store that reads everything and keeps nothing: isolates the cost of what comes before the store. */
function nullStore(): SnapStore {
  return {
    provider: 'Local',
    prefix: NULL_PREFIX,
    list: async () => [],
    fetch: async () => {
      throw new Error('null store');
    },
    save: async (_snap: Snapshot, data: Readable) => {
      for await (const _ of data) {
        /* drop */
      }
    },
    delete: async () => undefined,
    close: async () => undefined,
  };
}

/** The snapshot stream as a Readable of blobs, straight from the etcd3 client. */
async function snapshotBlobs(client: Etcd3): Promise<Readable> {
  const stream = (await client.maintenance.snapshot()) as unknown as AsyncIterable<{ blob?: Buffer }>;
  async function* blobs(): AsyncGenerator<Buffer> {
    for await (const m of stream) if (m.blob?.length) yield m.blob;
  }
  return Readable.from(blobs());
}

async function etcdctlSave(endpoint: string, file: string): Promise<void> {
  const { etcdctl } = await etcdBinaries();
  if (!etcdctl) throw new Error('etcdctl not found beside etcd or on PATH');
  await new Promise<void>((resolve, reject) => {
    const child = spawn(etcdctl, [`--endpoints=${endpoint}`, 'snapshot', 'save', file], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, ETCDCTL_API: '3' },
    });
    let err = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err = (err + d).slice(-2000)));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`etcdctl snapshot save exited ${code}: ${err}`))));
  });
}

async function fill(endpoint: string, mb: number): Promise<{ keys: number; bytes: number; seconds: number }> {
  const script = fileURLToPath(new URL('./support/fill-etcd.ts', import.meta.url));
  return new Promise((resolve, reject) => {
    // Same node flags as this process (tsx loader, conditions), its own heap.
    const child = spawn(process.execPath, [...process.execArgv, script, `--endpoint=${endpoint}`, `--mb=${mb}`], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`filling etcd failed (exit ${code})`));
      try {
        resolve(JSON.parse(out.trim().split('\n').pop() ?? '') as { keys: number; bytes: number; seconds: number });
      } catch (e) {
        reject(e as Error);
      }
    });
  });
}

async function main(): Promise<void> {
  quietAwsNodeWarning();
  const dbMB = Number(process.env.BENCH_DB_MB ?? 1024);
  if (!Number.isFinite(dbMB) || dbMB <= 0) throw new Error('BENCH_DB_MB must be a positive number');
  const runs = arg('runs', 3);
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'full-snapshot-bench-'));
  const etcd = await startTestEtcd({ quotaBackendBytes: 8 * GiB });
  const s3rver = await startS3rver({ bucket: 'bench' });
  const stores: SnapStore[] = [];
  let client: Etcd3 | undefined;
  try {
    console.log(`etcd ${(await etcdBinaries()).version} at ${etcd.clientUrl}, filling with ~${dbMB} MiB ...`);
    const filled = await fill(etcd.clientUrl, dbMB);
    client = await createEtcdClient({
      endpoints: [etcd.clientUrl],
      insecureTransport: true,
      insecureSkipVerify: false,
      connectionTimeoutMs: 10_000,
    });
    const status = await client.maintenance.status();
    const dbBytes = Number(status.dbSize);
    console.log(
      `filled ${filled.keys} keys, ${round1(filled.bytes / MiB)} MiB of values in ${round1(filled.seconds)} s ` +
        `(${round1(filled.bytes / MiB / filled.seconds)} MiB/s); db size ${round1(dbBytes / MiB)} MiB, revision ${status.header.revision}`,
    );

    const base = { container: 'bench', prefix: 'bench/v2', maxParallelChunkUploads: 5, minChunkSize: 5 * MiB, tempDir: tmp };
    const local = await openLocalStore({ ...base, provider: 'Local', rootDir: path.join(tmp, 'local') });
    const s3 = await openS3Store({
      ...base,
      provider: 'S3',
      endpointOverride: s3rver.endpoint,
      credentials: { region: 'us-east-1', accessKeyID: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY, s3ForcePathStyle: true },
    });
    stores.push(local, s3);
    const etcdClient = client;

    const ours = (store: SnapStore, compression: CompressionPolicy | undefined) => async (): Promise<number> => {
      const snap = await takeFullSnapshot(
        { client: etcdClient, store, compression, now: () => new Date(), logger: silentLogger },
        { isFinal: false, snapshotTimeoutMs: 30 * 60_000, connectionTimeoutMs: 10_000 },
      );
      if (store.prefix === NULL_PREFIX) return NaN;
      const listed = (await store.list()).find((s) => s.snapName === snap.snapName);
      if (!listed) throw new Error(`${snap.snapName} was not stored`);
      await store.delete(listed);
      return listed.sizeBytes ?? NaN;
    };
    const cases: Array<{ name: string; run: () => Promise<number> }> = [
      {
        name: 'etcdctl',
        run: async () => {
          const file = path.join(tmp, 'etcdctl.db');
          await etcdctlSave(etcd.clientUrl, file);
          const size = (await stat(file)).size;
          await rm(file, { force: true });
          return size;
        },
      },
      { name: 'local/none', run: ours(local, undefined) },
      { name: 'local/zstd', run: ours(local, 'zstd') },
      { name: 's3/none', run: ours(s3, undefined) },
      { name: 's3/zstd', run: ours(s3, 'zstd') },
      { name: 'drain', run: async () => drained(await snapshotBlobs(etcdClient), []) },
      { name: 'verify', run: async () => drained(await snapshotBlobs(etcdClient), [new FullSnapshotVerifier()]) },
      { name: 'verify+zstd', run: async () => drained(await snapshotBlobs(etcdClient), [new FullSnapshotVerifier(), createCompressStream('zstd')]) },
      { name: 'null/zstd', run: ours(nullStore(), 'zstd') },
    ];

    const results: CaseResult[] = cases.map((c) => ({ name: c.name, runs: [], storedBytes: [] }));
    for (let r = 0; r < runs; r++) {
      for (const [i, c] of cases.entries()) {
        const { run, value } = await measured(c.run);
        const res = results[i] as CaseResult;
        res.runs.push(run);
        res.storedBytes.push(value);
        console.log(
          `  run ${r + 1}/${runs} ${c.name.padEnd(12)} ${run.seconds.toFixed(2)} s, cpu ${run.cpuSeconds.toFixed(2)} s, ` +
            `peak RSS ${run.peakRssMB} MiB (+${round1(run.peakRssMB - run.baselineRssMB)})`,
        );
      }
    }

    const etcdctlSeconds = median((results[0] as CaseResult).runs.map((x) => x.seconds));
    const summary = results.map((res) => {
      const seconds = median(res.runs.map((x) => x.seconds));
      const peak = median(res.runs.map((x) => x.peakRssMB));
      const growth = median(res.runs.map((x) => x.peakRssMB - x.baselineRssMB));
      return {
        name: res.name,
        seconds: round3(seconds),
        mibPerSec: round1(dbBytes / MiB / seconds),
        ratio: round3(seconds / etcdctlSeconds),
        cpuSeconds: round3(median(res.runs.map((x) => x.cpuSeconds))),
        peakRssMB: round1(peak),
        maxPeakRssMB: round1(Math.max(...res.runs.map((x) => x.peakRssMB))),
        rssGrowthMB: round1(growth),
        outMB: round1(median(res.storedBytes) / MiB), // NaN for the null store
      };
    });
    console.log(`\nmedians of ${runs} runs, db ${round1(dbBytes / MiB)} MiB (RSS of this process; etcdctl is a child, its RSS is not ours)`);
    console.log(
      table(
        ['case', 'seconds', 'MiB/s', 'x etcdctl', 'cpu s', 'peak RSS MiB', '+ over before', 'out MiB'],
        summary.map((s) => [
          s.name,
          s.seconds.toFixed(2),
          s.mibPerSec.toFixed(1),
          s.ratio.toFixed(2),
          s.name === 'etcdctl' ? '-' : s.cpuSeconds.toFixed(2),
          s.name === 'etcdctl' ? '-' : s.peakRssMB.toFixed(1),
          s.name === 'etcdctl' ? '-' : s.rssGrowthMB.toFixed(1),
          Number.isFinite(s.outMB) ? s.outMB.toFixed(1) : '-',
        ]),
      ),
    );
    const ourCases = summary.filter((s) => s.name !== 'etcdctl');
    const ratioOk = summary.filter((s) => s.name.startsWith('local/')).every((s) => s.ratio <= RATIO_TARGET);
    const rssOk = ourCases.every((s) => s.maxPeakRssMB < RSS_TARGET_MB);
    console.log(
      `targets: local ours/etcdctl <= ${RATIO_TARGET}: ${ratioOk ? 'met' : 'NOT met'}; peak RSS < ${RSS_TARGET_MB} MB in every run: ${rssOk ? 'met' : 'NOT met'}`,
    );
    console.log(
      JSON.stringify({
        bench: 'full-snapshot',
        node: process.version,
        etcd: (await etcdBinaries()).version,
        dbMB: round1(dbBytes / MiB),
        keys: filled.keys,
        fillSeconds: round1(filled.seconds),
        runs,
        results: summary,
        ratioTarget: RATIO_TARGET,
        rssTargetMB: RSS_TARGET_MB,
        ratioOk,
        rssOk,
      }),
    );
  } finally {
    client?.close();
    for (const s of stores) await s.close().catch(() => undefined);
    await s3rver.stop();
    await etcd.cleanup();
    await rm(tmp, { recursive: true, force: true });
  }
}

/** Pipes `source` through `stages` into a sink that counts and drops; returns the bytes that reached it. */
async function drained(source: Readable, stages: NodeJS.ReadWriteStream[]): Promise<number> {
  let bytes = 0;
  const counter = new Writable({
    highWaterMark: 64 * 1024,
    write(chunk: Buffer, _enc, cb) {
      bytes += chunk.length;
      cb();
    },
  });
  await pipeline([source, ...stages, counter]);
  return bytes;
}

await main();
