/**
 * Restore with offline delta replay (the default): how fast the delta revisions go into the backend, against
 * the online replay through etcd on the same chain, and a chain of a million revisions end to end.
 *
 *   npm run bench -- offline-replay [-- --runs=3 --only=small,rate,million]
 *   env: BENCH_REVISIONS (50000: the rate chain), BENCH_MILLION (1000000), BENCH_MILLION_STORE (a directory
 *   that keeps the million chain between runs), BENCH_MILLION_QUOTA (--embedded-etcd-quota-bytes for the
 *   million restores), ETCDBRCTL_PEER (optional: the Go etcdbrctl binary; when set, it restores the million
 *   chain too and ours ÷ peer is printed)
 *
 * (small) the Go-written gzip fixture (2.7 MB backend, a base and 4 deltas) restored by the CLI in a child
 *        process, at least 5 runs: the fixed cost of a restore (process start, modules, base restore).
 * (rate) a real base snapshot plus BENCH_REVISIONS single-op revisions (10 % new keys, the rest overwrites,
 *        one in 50 a delete) as gzip deltas of 10,000 events, written straight into a Local store with
 *        create revisions and versions as etcd writes them. `executeRestore` with --delta-replay=offline and
 *        =online; the rate is revisions / replay time (after the base restore). Target: offline >= 50,000 rev/s.
 * (million) BENCH_MILLION revisions the same way (about 100 new keys per 1,000 revisions), restored by the
 *        real CLI (`bin/etcdbrctl restore`, compiled) in a child process: wall time end to end (process start,
 *        base restore, fetch and decompression, replay, the backend check) and its peak RSS (VmHWM, polled).
 *        Targets: <= 60 s, RSS < 300 MB.
 * Medians over the runs; the last line is JSON.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Snapshot } from '../../snapstore/src/index.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import { planRestore } from '../../src/restorer/plan.js';
import { executeRestore, type DeltaReplayMode } from '../../src/restorer/restore.js';
import { etcdBinaries } from '../../test/support/etcd.js';
import { benchLocalStore, benchRestoreOptions, smallBaseSnapshot } from './support/restore-setup.js';
import { arg, median, pollPeakRss, round1, table } from './support/measure.js';
import { writeChurnChain } from '../../test/support/restore-chain.js';

const RATE_TARGET = 50_000;
const MILLION_SECONDS_TARGET = 60;
const RSS_TARGET_MB = 300;
/** This bench's directory, or ETCDBR_BENCH_DIR when it runs bundled (scripts/bench.mjs --compiled). */
const benchDir = process.env.ETCDBR_BENCH_DIR ?? path.dirname(fileURLToPath(import.meta.url));
const BIN = path.join(benchDir, '..', '..', 'bin', 'etcdbrctl');

function flag(name: string): string | undefined {
  return process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
}

/** A store with a real base snapshot (a few hundred keys) and `revisions` churn revisions after it. */
async function chainStore(root: string, tmp: string, revisions: number): Promise<{ base: Snapshot; deltas: number }> {
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
  return { base, deltas };
}

async function benchRate(binaries: EtcdBinaries, tmp: string, runs: number, revisions: number) {
  const root = path.join(tmp, 'rate-store');
  const t0 = Date.now();
  const { base, deltas } = await chainStore(root, tmp, revisions);
  console.log(
    `  chain: base at revision ${base.lastRevision}, ${revisions} revisions in ${deltas} gzip deltas (${((Date.now() - t0) / 1000).toFixed(1)} s to write)`,
  );
  const store = await benchLocalStore(root, tmp);
  const rates: Record<DeltaReplayMode, number[]> = { offline: [], online: [], auto: [] };
  const totals: Record<DeltaReplayMode, number[]> = { offline: [], online: [], auto: [] };
  try {
    for (let r = 0; r < runs; r++) {
      for (const mode of ['offline', 'online'] as const) {
        const dir = await mkdtemp(path.join(tmp, `rate-${mode}-`));
        try {
          const res = await executeRestore(
            store,
            planRestore(await store.list()),
            benchRestoreOptions(binaries, dir, { deltaReplay: mode }),
          );
          if (res.revisionsApplied !== revisions) throw new Error(`${mode}: replayed ${res.revisionsApplied} of ${revisions} revisions`);
          rates[mode].push(res.revisionsApplied / (res.replayMs / 1000));
          totals[mode].push(res.durationMs / 1000);
          console.log(
            `  run ${r + 1} ${mode}: ${Math.round(rates[mode].at(-1)!)} rev/s replay, ${round1(res.durationMs / 1000)} s whole restore`,
          );
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      }
    }
  } finally {
    await store.close();
  }
  return { rates, totals };
}

interface ChildRun {
  seconds: number;
  peakRssMB: number;
}

/** Runs a restore command to its end: wall time, and the peak RSS of that process (VmHWM, polled). */
function runRestoreProcess(cmd: string, args: string[]): Promise<ChildRun> {
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
      if (code !== 0) return reject(new Error(`${cmd} restore failed (exit ${code}): ${stderr}`));
      resolve({ seconds, peakRssMB: round1((rss.peakKb * 1024) / 1e6) });
    });
  });
}

async function benchMillion(tmp: string, runs: number, revisions: number) {
  // BENCH_MILLION_STORE keeps the chain between bench runs (written once, reused while it exists).
  const kept = process.env.BENCH_MILLION_STORE;
  const root = kept ?? path.join(tmp, 'million-store');
  if (kept && existsSync(path.join(kept, 'v2'))) {
    console.log(`  chain: reusing ${kept}`);
  } else {
    const t0 = Date.now();
    const { deltas } = await chainStore(root, tmp, revisions);
    console.log(`  chain: ${revisions} revisions in ${deltas} gzip deltas (${((Date.now() - t0) / 1000).toFixed(1)} s to write)`);
  }
  const ours: ChildRun[] = [];
  const peer: ChildRun[] = [];
  const peerBin = process.env.ETCDBRCTL_PEER;
  for (let r = 0; r < runs; r++) {
    const dir = await mkdtemp(path.join(tmp, 'million-'));
    try {
      // The store's objects sit under <root>/v2: no --store-prefix. BENCH_MILLION_QUOTA: a quota that the
      // result passes 80 % of (ours then compacts while it writes, issue 27), given to both tools.
      const quota = process.env.BENCH_MILLION_QUOTA;
      const common = [
        'restore',
        '--storage-provider=Local',
        `--store-container=${root}`,
        ...(quota ? [`--embedded-etcd-quota-bytes=${quota}`] : []),
      ];
      const run = await runRestoreProcess(process.execPath, [
        BIN,
        ...common,
        `--data-dir=${path.join(dir, 'ours')}`,
        `--restoration-temp-snapshots-dir=${path.join(dir, 'ours-tmp')}`,
      ]);
      ours.push(run);
      let line = `  run ${r + 1} ours: ${run.seconds.toFixed(1)} s, peak RSS ${run.peakRssMB} MB`;
      if (peerBin) {
        const p = await runRestoreProcess(peerBin, [
          ...common,
          `--data-dir=${path.join(dir, 'peer')}`,
          `--restoration-temp-snapshots-dir=${path.join(dir, 'peer-tmp')}`,
        ]);
        peer.push(p);
        line += `; peer: ${p.seconds.toFixed(1)} s, ours ÷ peer ${(run.seconds / p.seconds).toFixed(2)}`;
      }
      console.log(line);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  return { ours, peer };
}

/**
 * A small restore end to end: the Go-written `gzip` fixture (a 2.7 MB backend: a base and 4 deltas, 84
 * revisions) restored by the CLI, where process start, module loading and the base restore dominate.
 */
async function benchSmall(tmp: string, runs: number) {
  const root = path.join(benchDir, '..', '..', 'test', 'fixtures', 'upstream-v0.23', 'gzip', 'snapstore');
  const ours: ChildRun[] = [];
  const peer: ChildRun[] = [];
  const peerBin = process.env.ETCDBRCTL_PEER;
  for (let r = 0; r < runs; r++) {
    const dir = await mkdtemp(path.join(tmp, 'small-'));
    try {
      const common = ['restore', '--storage-provider=Local', `--store-container=${root}`];
      const at = (who: string) => [`--data-dir=${path.join(dir, who)}`, `--restoration-temp-snapshots-dir=${path.join(dir, `${who}-tmp`)}`];
      ours.push(await runRestoreProcess(process.execPath, [BIN, ...common, ...at('ours')]));
      if (peerBin) peer.push(await runRestoreProcess(peerBin, [...common, ...at('peer')]));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  return { ours, peer };
}

async function main(): Promise<void> {
  const runs = arg('runs', 3);
  const only = (flag('only') ?? 'small,rate,million').split(',');
  const revisions = Number(process.env.BENCH_REVISIONS ?? 50_000);
  const million = Number(process.env.BENCH_MILLION ?? 1_000_000);
  const binaries = await etcdBinaries();
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'etcdbr-bench-offline-'));
  await mkdir(path.join(tmp, 'scratch'), { recursive: true });
  console.log(
    `etcd ${await binaries.version()}, node ${process.version}, ${os.cpus().length} CPUs, load average ${os.loadavg()[0]!.toFixed(2)}, runs ${runs}`,
  );
  const summary: Record<string, unknown> = { bench: 'offline-replay', etcd: await binaries.version(), runs };
  try {
    if (only.includes('small')) {
      console.log('\n(small) the Go-written gzip fixture (2.7 MB backend, 84 delta revisions) restored by bin/etcdbrctl restore');
      const { ours, peer } = await benchSmall(tmp, Math.max(runs, 5));
      const secs = median(ours.map((r) => r.seconds));
      let line = `median ${secs.toFixed(2)} s, peak RSS ${median(ours.map((r) => r.peakRssMB))} MB`;
      if (peer.length > 0)
        line += `; peer ${median(peer.map((r) => r.seconds)).toFixed(2)} s, ours ÷ peer ${(secs / median(peer.map((r) => r.seconds))).toFixed(2)}`;
      console.log(line);
      summary.small = {
        seconds: Math.round(secs * 100) / 100,
        ...(peer.length > 0 ? { peerSeconds: median(peer.map((r) => r.seconds)) } : {}),
      };
    }
    if (only.includes('rate')) {
      console.log(`\n(rate) delta replay of ${revisions} revisions, offline against online`);
      const { rates, totals } = await benchRate(binaries, tmp, runs, revisions);
      const off = median(rates.offline);
      const on = median(rates.online);
      console.log(
        table(
          ['replay', 'rev/s (median)', 'whole restore s (median)'],
          [
            ['offline', Math.round(off), round1(median(totals.offline))],
            ['online (etcd ' + (await binaries.version()) + ', fsync on)', Math.round(on), round1(median(totals.online))],
          ],
        ),
      );
      console.log(
        `offline ÷ online: ${(off / on).toFixed(1)}x; target offline >= ${RATE_TARGET} rev/s: ${off >= RATE_TARGET ? 'met' : 'MISSED'}`,
      );
      summary.rate = { revisions, offline: Math.round(off), online: Math.round(on), met: off >= RATE_TARGET };
    }
    if (only.includes('million')) {
      console.log(`\n(million) ${million} revisions restored end to end by bin/etcdbrctl restore`);
      const { ours, peer } = await benchMillion(tmp, runs, million);
      const secs = median(ours.map((r) => r.seconds));
      const rss = median(ours.map((r) => r.peakRssMB));
      console.log(
        `median ${secs.toFixed(1)} s, peak RSS ${rss} MB; target <= ${MILLION_SECONDS_TARGET} s: ${secs <= MILLION_SECONDS_TARGET ? 'met' : 'MISSED'}, RSS < ${RSS_TARGET_MB} MB: ${rss < RSS_TARGET_MB ? 'met' : 'MISSED'}`,
      );
      if (peer.length > 0) console.log(`ours ÷ peer (median): ${(secs / median(peer.map((r) => r.seconds))).toFixed(2)}`);
      else console.log('no ETCDBRCTL_PEER given: the Go etcdbrctl was not measured');
      summary.million = {
        revisions: million,
        seconds: round1(secs),
        peakRssMB: rss,
        met: secs <= MILLION_SECONDS_TARGET && rss < RSS_TARGET_MB,
      };
    }
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
  console.log(JSON.stringify(summary));
}

await main();
