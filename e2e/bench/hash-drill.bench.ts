/**
 * The hash drill end to end: `bin/etcdbrctl verify --against-endpoints` (compiled JS, a child process) against
 * a real etcd that holds what the chain holds, wall time and peak RSS (VmHWM, polled), both before and after
 * the member compacted (a compaction revision makes the drill read the chain twice: once for what the
 * compaction keeps, once to hash). The member is the chain restored by our own restore and started.
 *
 *   npm run bench -- hash-drill [-- --runs=3 --only=million,gib]
 *   env: BENCH_MILLION (1000000), BENCH_MILLION_STORE (a directory that keeps the million chain between runs,
 *        shared with the offline-replay bench), BENCH_DB_MB (1024: the backend of the gib case)
 *
 * (million) a real base snapshot plus BENCH_MILLION single-op revisions (10 % new keys, so ~100,000 distinct
 *           keys; the rest overwrites, one in 50 a delete; 100-byte values) as 100 gzip deltas: the chain of
 *           offline-replay's million case. Target: peak RSS <= 128 MiB.
 * (gib)     one full snapshot of a BENCH_DB_MB MiB backend (1 KiB values over 50,000 keys, a consistent history
 *           written by our bbolt writer) and no delta: the drill's cost for a large database.
 * Every drill must find the chain equal to etcd; medians over the runs; the last line is JSON.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { newSnapshot, type SnapStore } from '../../snapstore/src/index.js';
import { BoltWriter, type WriterEntry } from '../../src/bbolt/writer.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import { GrpcEtcdClient } from '../../src/etcd/calls.js';
import { freePort } from '../../src/etcd/ports.js';
import { startLocalEtcd, type LocalEtcd } from '../../src/etcd/local-etcd.js';
import { KEY_BUCKET, META_BUCKET } from '../../src/backend/schema.js';
import { planRestore } from '../../src/restorer/plan.js';
import { executeRestore } from '../../src/restorer/restore.js';
import { encodePutValue, revisionKey } from '../../src/restorer/mvcc.js';
import { etcd35Binaries, etcdBinaries } from '../../test/support/etcd.js';
import { MiB, arg, median, pollPeakRss, round1, table } from './support/measure.js';
import { writeChurnChain } from '../../test/support/restore-chain.js';
import { benchLocalStore, benchRestoreOptions, smallBaseSnapshot } from './support/restore-setup.js';

const RSS_TARGET_MIB = 128;
/** This bench's directory, or ETCDBR_BENCH_DIR when it runs bundled (scripts/bench.mjs --compiled). */
const benchDir = process.env.ETCDBR_BENCH_DIR ?? path.dirname(fileURLToPath(import.meta.url));
const BIN = path.join(benchDir, '..', '..', 'bin', 'etcdbrctl');

function only(): string[] {
  return (process.argv.find((a) => a.startsWith('--only='))?.slice(7) ?? 'million,gib').split(',');
}

interface DrillRun {
  seconds: number;
  peakRssMiB: number;
  stdout: string;
}

/** `bin/etcdbrctl verify --against-endpoints` to its end: wall time and its peak RSS. Fails unless it exits 0. */
function runDrill(root: string, endpoint: string, tmp: string): Promise<DrillRun> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const args = [BIN, 'verify', '--storage-provider=Local', `--store-container=${root}`, `--snapstore-temp-directory=${tmp}`];
    const child = spawn(process.execPath, [...args, `--against-endpoints=${endpoint}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (out = (out + d).slice(-8000)));
    const rss = pollPeakRss(child.pid!);
    child.once('error', reject);
    child.once('exit', (code) => {
      rss.stop();
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      if (code !== 0) return reject(new Error(`the drill exited ${code}: ${out}`));
      resolve({ seconds, peakRssMiB: round1(rss.peakKb / 1024), stdout: out });
    });
  });
}

/** The chain restored by our restore and started as a single member: what the drill compares with. */
async function memberOf(binaries: EtcdBinaries, store: SnapStore, dir: string): Promise<LocalEtcd> {
  const peerPort = await freePort();
  const peer = `http://127.0.0.1:${peerPort}`;
  const opts = benchRestoreOptions(binaries, dir, { initialCluster: `default=${peer}`, initialAdvertisePeerUrls: [peer] });
  await executeRestore(store, planRestore(await store.list()), opts);
  return startLocalEtcd({ binaries, dataDir: opts.dataDir, name: 'default', peerPort, initialCluster: `default=${peer}` });
}

/** Drills `runs` times against the member as it is, then as many times after compacting it at `compactAt`. */
async function drillBoth(root: string, etcd: LocalEtcd, tmp: string, runs: number, compactAt: number) {
  const out: Record<'uncompacted' | 'compacted', DrillRun[]> = { uncompacted: [], compacted: [] };
  for (const phase of ['uncompacted', 'compacted'] as const) {
    if (phase === 'compacted') {
      const client = new GrpcEtcdClient({ endpoints: [etcd.clientUrl] });
      try {
        await client.compact(compactAt);
      } finally {
        client.close();
      }
    }
    for (let r = 0; r < runs; r++) {
      const run = await runDrill(root, etcd.clientUrl, tmp);
      if (!run.stdout.includes('proven: the store gives back what etcd holds')) throw new Error(`no proof: ${run.stdout}`);
      out[phase].push(run);
      console.log(`  ${phase} run ${r + 1}: ${round1(run.seconds)} s, peak RSS ${run.peakRssMiB} MiB`);
    }
  }
  return out;
}

async function benchMillion(binaries: EtcdBinaries, tmp: string, runs: number, revisions: number) {
  const kept = process.env.BENCH_MILLION_STORE;
  const root = kept ?? path.join(tmp, 'million-store');
  // Checked before the store is opened (opening makes its directories).
  const reuse = kept !== undefined && existsSync(path.join(kept, 'v2'));
  const store = await benchLocalStore(root, path.join(tmp, 'scratch'));
  try {
    if (reuse) console.log(`  chain: reusing ${kept}`);
    else {
      const t0 = Date.now();
      const base = await smallBaseSnapshot(store);
      const deltas = await writeChurnChain(store, base, {
        revisions,
        perDelta: 10_000,
        newKeyEvery: 10,
        deleteEvery: 50,
        valueBytes: 100,
        compression: 'gzip',
      });
      console.log(`  chain: ${revisions} revisions in ${deltas} gzip deltas (${((Date.now() - t0) / 1000).toFixed(1)} s to write)`);
    }
    const head = (await store.list()).at(-1)!.lastRevision;
    const etcd = await memberOf(binaries, store, await mkdtemp(path.join(tmp, 'million-member-')));
    try {
      return await drillBoth(root, etcd, path.join(tmp, 'drill'), runs, Math.floor(head / 2));
    } finally {
      await etcd.stop();
    }
  } finally {
    await store.close();
  }
}

/** A full snapshot of an etcd backend of about `mb` MiB (puts of 1 KiB values over 50,000 keys, as etcd stores them). */
async function writeGibStore(store: SnapStore, tmp: string, mb: number): Promise<number> {
  const valueBytes = 1024;
  const revisions = Math.max(1, Math.floor((mb * MiB) / (valueBytes + 120)));
  const value = Buffer.alloc(valueBytes, 0x76);
  const keySpace = 50_000;
  const created = new Float64Array(keySpace);
  const versions = new Float64Array(keySpace);
  function* entries(): Generator<WriterEntry> {
    for (let rev = 2; rev < revisions + 2; rev++) {
      const k = rev % keySpace;
      if (versions[k] === 0) created[k] = rev;
      versions[k]! += 1;
      const key = Buffer.from(`/registry/bench/gib/${String(k).padStart(6, '0')}`);
      yield {
        key: revisionKey(rev, 0, false),
        value: encodePutValue({ key, createRevision: created[k]!, modRevision: rev, version: versions[k]!, value }),
      };
    }
  }
  const db = path.join(tmp, 'gib.db');
  const w = await BoltWriter.create(db, { pageSize: 4096, txid: 2 });
  await w.writeBucket(KEY_BUCKET, entries());
  await w.writeBucket(META_BUCKET, [{ key: Buffer.from('consistent_index'), value: Buffer.alloc(8) }]);
  await w.finish();
  const hash = createHash('sha256');
  for await (const c of createReadStream(db)) hash.update(c as Buffer);
  const head = revisions + 1;
  const full = newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: head, createdOn: new Date(), compressionSuffix: '' });
  async function* payload() {
    yield* createReadStream(db, { highWaterMark: MiB });
    yield hash.digest();
  }
  await store.save(full, Readable.from(payload()));
  await rm(db, { force: true });
  return head;
}

async function benchGib(binaries: EtcdBinaries, tmp: string, runs: number, mb: number) {
  const root = path.join(tmp, 'gib-store');
  const store = await benchLocalStore(root, path.join(tmp, 'scratch'));
  try {
    const t0 = Date.now();
    const head = await writeGibStore(store, tmp, mb);
    console.log(`  store: one full snapshot of a ${mb} MiB backend up to revision ${head} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    const etcd = await memberOf(binaries, store, await mkdtemp(path.join(tmp, 'gib-member-')));
    try {
      return await drillBoth(root, etcd, path.join(tmp, 'drill'), runs, Math.floor(head / 2));
    } finally {
      await etcd.stop();
    }
  } finally {
    await store.close();
  }
}

async function main(): Promise<void> {
  const runs = arg('runs', 1);
  const binaries = await etcd35Binaries().catch(() => etcdBinaries());
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'etcdbr-bench-drill-'));
  await mkdir(path.join(tmp, 'scratch'), { recursive: true });
  console.log(
    `etcd ${await binaries.version()}, node ${process.version}, ${os.cpus().length} CPUs, load average ${os.loadavg()[0]!.toFixed(2)}`,
  );
  const summary: Record<string, unknown> = { bench: 'hash-drill', etcd: await binaries.version(), runs };
  const rows: Array<Array<string | number>> = [];
  const report = (name: string, r: Record<'uncompacted' | 'compacted', DrillRun[]>) => {
    for (const phase of ['uncompacted', 'compacted'] as const) {
      const s = median(r[phase].map((x) => x.seconds));
      const m = median(r[phase].map((x) => x.peakRssMiB));
      rows.push([`${name}, ${phase}`, round1(s), m, m <= RSS_TARGET_MIB ? 'ok' : 'OVER']);
      summary[`${name}_${phase}`] = { seconds: round1(s), peakRssMiB: m };
    }
  };
  try {
    if (only().includes('million')) {
      console.log('\n(million) 1,000,000 delta revisions over ~100,000 keys, 100 gzip deltas');
      report('million', await benchMillion(binaries, tmp, runs, Number(process.env.BENCH_MILLION ?? 1_000_000)));
    }
    if (only().includes('gib')) {
      const mb = Number(process.env.BENCH_DB_MB ?? 1024);
      console.log(`\n(gib) one full snapshot of a ${mb} MiB backend`);
      report('gib', await benchGib(binaries, tmp, runs, mb));
    }
    console.log(`\n${table(['drill', 'wall s', `peak RSS MiB (target <= ${RSS_TARGET_MIB})`, ''], rows)}`);
    console.log(JSON.stringify(summary));
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

await main();
