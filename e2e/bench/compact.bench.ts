/**
 * `etcdbrctl compact` of the 1,000,000-revision chain, end to end: the real CLI (`bin/etcdbrctl compact`,
 * compiled) in a child process, wall time from spawn to exit and its peak RSS (VmHWM, polled every 25 ms).
 * Targets: <= 10 s and <= 160 MB. With ETCDBRCTL_PEER (the Go etcdbrctl binary) the Go tool compacts the
 * same chain after ours in every run, and ours ÷ peer is printed.
 *
 *   npm run bench -- --compiled compact [-- --runs=3 --check=1]
 *   env: BENCH_MILLION (1000000), BENCH_MILLION_STORE (a directory that keeps the chain between runs)
 *
 * The chain is the offline-replay bench's: a real base snapshot (a few hundred keys) and BENCH_MILLION
 * single-op revisions (10 % new keys, the rest overwrites, one in 50 a delete; ~100,000 distinct keys) as
 * gzip deltas of 10,000 events, written straight into a Local store. Each run's compacted full is removed
 * again afterwards, so every run compacts the same chain.
 *
 * --check=1 (default): after the first run, the compacted full alone and the whole chain are restored with
 * `executeRestore` (not timed) and etcd serves the same keys, values, create/mod revisions and versions from
 * both, and refuses a read below the head of the compacted one as compacted.
 *
 * Time figures are noisy on a shared machine: the load average is printed before and after. The last line is JSON.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import type { SnapStore } from '../../snapstore/src/index.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { planRestore, type RestorePlan } from '../../src/restorer/plan.js';
import { executeRestore } from '../../src/restorer/restore.js';
import { etcdBinaries, SINGLE_MEMBER_RAFT_ARGS } from '../../test/support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../../test/support/etcd-dump.js';
import { benchLocalStore, benchRestoreOptions, smallBaseSnapshot } from './support/restore-setup.js';
import { arg, flag, median, pollPeakRss, round1 } from './support/measure.js';
import { writeChurnChain } from '../../test/support/restore-chain.js';

const SECONDS_TARGET = 10;
const RSS_TARGET_MB = 160;
/** This bench's directory, or ETCDBR_BENCH_DIR when it runs bundled (scripts/bench.mjs --compiled). */
const benchDir = process.env.ETCDBR_BENCH_DIR ?? path.dirname(fileURLToPath(import.meta.url));
const BIN = path.join(benchDir, '..', '..', 'bin', 'etcdbrctl');

interface ChildRun {
  seconds: number;
  peakRssMB: number;
}

/** Runs a command to its end: wall time, and the peak RSS of that process (VmHWM, polled). */
function runProcess(cmd: string, args: string[]): Promise<ChildRun> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr = (stderr + d).slice(-4000)));
    const rss = pollPeakRss(child.pid!);
    child.once('error', reject);
    child.once('exit', (code) => {
      rss.stop();
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      if (code !== 0) return reject(new Error(`${cmd} compact failed (exit ${code}): ${stderr}`));
      resolve({ seconds, peakRssMB: round1((rss.peakKb * 1024) / 1e6) });
    });
  });
}

const loadAverage = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

/** The full snapshots in the store's v2 directory. */
async function fulls(root: string): Promise<string[]> {
  return (await readdir(path.join(root, 'v2'))).filter((n) => n.startsWith('Full-')).sort();
}

/** Restores `plan` into a fresh dir, starts etcd on it and dumps it; `below`: what a read at head - 1 gave. */
async function restoreAndDump(
  binaries: EtcdBinaries,
  store: SnapStore,
  plan: RestorePlan,
  dir: string,
): Promise<{ dump: EtcdDump; below: string; seconds: number }> {
  const t0 = Date.now();
  await executeRestore(store, plan, benchRestoreOptions(binaries, dir));
  const seconds = (Date.now() - t0) / 1000;
  const dataDir = benchRestoreOptions(binaries, dir).dataDir;
  const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
  try {
    const dump = await dumpEtcd(etcd.clientUrl);
    const client = new Etcd3({ hosts: etcd.clientUrl });
    const below = await client
      .get('x')
      .revision(dump.revision - 1)
      .exec()
      .then(
        () => 'served',
        (err: unknown) => String((err as Error).message),
      );
    client.close();
    return { dump, below, seconds };
  } finally {
    await etcd.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

async function check(binaries: EtcdBinaries, root: string, compacted: string, tmp: string): Promise<string> {
  const store = await benchLocalStore(root, tmp);
  try {
    const listing = await store.list();
    const chain = await restoreAndDump(
      binaries,
      store,
      planRestore(listing.filter((s) => s.snapName !== compacted)),
      await mkdtemp(path.join(tmp, 'chain-')),
    );
    const after = await restoreAndDump(binaries, store, planRestore(listing), await mkdtemp(path.join(tmp, 'compacted-')));
    const strip = (d: EtcdDump) => JSON.stringify(d.kvs.map(({ lease: _l, ...kv }) => kv));
    if (after.dump.revision !== chain.dump.revision || strip(after.dump) !== strip(chain.dump)) {
      throw new Error(`the compacted full restores to a different state (revision ${after.dump.revision} vs ${chain.dump.revision})`);
    }
    if (!/compacted/.test(after.below)) throw new Error(`a read below the head of the compacted full gave: ${after.below}`);
    return (
      `check: the compacted full alone restores (${after.seconds.toFixed(1)} s) to the chain's state (${chain.seconds.toFixed(1)} s): ` +
      `${after.dump.kvs.length} keys at revision ${after.dump.revision}, same values, revisions and versions; history below the head compacted`
    );
  } finally {
    await store.close();
  }
}

async function main(): Promise<void> {
  const runs = arg('runs', 3);
  const doCheck = flag('check', true);
  const revisions = Number(process.env.BENCH_MILLION ?? 1_000_000);
  const binaries = await etcdBinaries();
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'etcdbr-bench-compact-'));
  await mkdir(path.join(tmp, 'scratch'), { recursive: true });
  console.log(
    `etcd ${await binaries.version()}, node ${process.version}, ${os.cpus().length} CPUs, load average ${loadAverage()}, runs ${runs}`,
  );
  const kept = process.env.BENCH_MILLION_STORE;
  const root = kept ?? path.join(tmp, 'million-store');
  const ours: ChildRun[] = [];
  const peer: ChildRun[] = [];
  const peerBin = process.env.ETCDBRCTL_PEER;
  let checked = 'check: skipped (--check=0)';
  try {
    if (kept && existsSync(path.join(kept, 'v2'))) {
      console.log(`chain: reusing ${kept}`);
    } else {
      const t0 = Date.now();
      const store = await benchLocalStore(root, tmp);
      const base = await smallBaseSnapshot(store);
      const deltas = await writeChurnChain(store, base, {
        revisions,
        perDelta: 10_000,
        newKeyEvery: 10,
        deleteEvery: 50,
        valueBytes: 100,
        compression: 'gzip',
      });
      await store.close();
      console.log(`chain: ${revisions} revisions in ${deltas} gzip deltas (${((Date.now() - t0) / 1000).toFixed(1)} s to write)`);
    }
    const before = await fulls(root);
    for (let r = 0; r < runs; r++) {
      const dir = await mkdtemp(path.join(tmp, 'run-'));
      try {
        // The store's objects sit under <root>/v2: no --store-prefix.
        const common = ['compact', '--storage-provider=Local', `--store-container=${root}`];
        const at = (who: string) => [
          `--data-dir=${path.join(dir, who)}`,
          `--restoration-temp-snapshots-dir=${path.join(dir, `${who}-tmp`)}`,
        ];
        const run = await runProcess(process.execPath, [BIN, ...common, ...at('ours')]);
        ours.push(run);
        const added = (await fulls(root)).filter((n) => !before.includes(n));
        if (added.length !== 1) throw new Error(`expected one new full snapshot, found ${added.join(', ') || 'none'}`);
        if (r === 0 && doCheck) checked = await check(binaries, root, added[0]!, tmp);
        await rm(path.join(root, 'v2', added[0]!));
        let line = `run ${r + 1} ours: ${run.seconds.toFixed(1)} s, peak RSS ${run.peakRssMB} MB (load ${loadAverage()})`;
        if (peerBin) {
          const p = await runProcess(peerBin, [...common, ...at('peer')]);
          peer.push(p);
          for (const n of (await fulls(root)).filter((f) => !before.includes(f))) await rm(path.join(root, 'v2', n));
          line += `; peer: ${p.seconds.toFixed(1)} s, peak RSS ${p.peakRssMB} MB, ours ÷ peer ${(run.seconds / p.seconds).toFixed(2)}`;
        }
        console.log(line);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }
  } finally {
    if (!kept) await rm(root, { recursive: true, force: true });
    await rm(tmp, { recursive: true, force: true });
  }
  const secs = median(ours.map((r) => r.seconds));
  const rss = Math.max(...ours.map((r) => r.peakRssMB));
  console.log(checked);
  console.log(
    `compact of ${revisions} revisions: median ${secs.toFixed(1)} s, peak RSS ${rss} MB (highest of ${runs} runs); ` +
      `target <= ${SECONDS_TARGET} s: ${secs <= SECONDS_TARGET ? 'met' : 'MISSED'}, RSS <= ${RSS_TARGET_MB} MB: ${rss <= RSS_TARGET_MB ? 'met' : 'MISSED'}; load average ${loadAverage()}`,
  );
  if (peer.length > 0) console.log(`ours ÷ peer (median): ${(secs / median(peer.map((r) => r.seconds))).toFixed(2)}`);
  else console.log('no ETCDBRCTL_PEER given: the Go etcdbrctl was not measured');
  console.log(
    JSON.stringify({
      bench: 'compact',
      revisions,
      runs,
      seconds: round1(secs),
      peakRssMB: rss,
      met: secs <= SECONDS_TARGET && rss <= RSS_TARGET_MB,
      ...(peer.length > 0 ? { peerSeconds: round1(median(peer.map((r) => r.seconds))) } : {}),
      loadAverage: os.loadavg()[0],
    }),
  );
}

await main();
