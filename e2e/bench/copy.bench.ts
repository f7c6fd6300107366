/**
 * Copy throughput and memory across providers: a ~1 GiB store (3 full snapshots of ~300 MiB and 100 gzip
 * deltas of ~1 MiB, all with valid sha256 trailers, so the copier's integrity check does its full work)
 * goes round a ring Local → S3 (s3rver) → ABS (Azurite) → GCS (the fake JSON API) → Local with
 * `copyBackups` and the CLI's defaults (10 parallel copies, 5 MiB parts/blocks/chunks × 5 in flight, the
 * destination's save buffer from `saveBufferBytes`, 32 MiB budget).
 *
 * Each leg copies from the previous leg's destination and runs in a fresh process (this file with
 * --child=leg), as `etcdbrctl copy` does, so one leg's SDKs and garbage do not count against the next.
 * Every emulator is a separate process too, so only the copying process is measured: time, MiB/s and
 * its peak RSS, sampled every 20 ms (target < 200 MB). After each leg every object at its destination is
 * read back and compared byte for byte (sha256) with the source; then the leg runs a second time, which
 * must copy nothing.
 *
 *   npm run bench -- [--compiled] copy [-- --full-mib=300 --fulls=3 --deltas=100 --delta-kib=1024 --budget-mib=32 --via=S3,ABS,GCS]
 *
 * --via picks the remote stores of the ring, in order (e.g. --via=S3 gives Local → S3 → Local).
 * The last line is a JSON summary.
 */
import { spawn } from 'node:child_process';
import { createHash, randomFillSync } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { createCompressStream, newSnapshot, openSnapStore, silentLogger, type SnapStore, type StoreConfig } from '@etcdbrctl/snapstore';
import { AZURITE_ACCOUNT, AZURITE_KEY, startAzurite } from '../../snapstore/test/support/azurite.js';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver } from '../../snapstore/test/support/s3rver.js';
import { systemClock } from '../../src/clock.js';
import { copyBackups, type CopyResult } from '../../src/copier/copier.js';
import { saveBufferBytes } from '../../src/copier/save-buffer.js';
import { arg, measured, MiB, quietAwsNodeWarning, round1, table, type Run } from './support/measure.js';

/** This bench's directory; ETCDBR_BENCH_DIR when it runs bundled (scripts/bench.mjs --compiled). */
const benchDir = process.env.ETCDBR_BENCH_DIR ?? path.dirname(fileURLToPath(import.meta.url));
const RSS_TARGET_MB = 200;
const BUCKET = 'bench';
const REMOTES = ['S3', 'ABS', 'GCS'] as const;
type Remote = (typeof REMOTES)[number];

const fullMiB = arg('full-mib', 300);
const fulls = arg('fulls', 3);
const deltas = arg('deltas', 100);
const deltaKiB = arg('delta-kib', 1024);
/** Upload-buffer budget of the copier; default: the copier's own default. */
const budgetMiB = process.argv.some((a) => a.startsWith('--budget-mib=')) ? arg('budget-mib', 32) : undefined;

function flag(name: string): string | undefined {
  return process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
}

function via(): Remote[] {
  const list = (flag('via') ?? REMOTES.join(',')).split(',').filter((s) => s !== '');
  for (const r of list) {
    if (!(REMOTES as readonly string[]).includes(r)) throw new Error(`bad --via: ${JSON.stringify(r)} is not one of ${REMOTES.join(', ')}`);
  }
  if (list.length === 0) throw new Error('bad --via: name at least one of S3, ABS, GCS');
  return list as Remote[];
}

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
      const snap = newSnapshot({
        kind: 'Incr',
        startRevision: rev + 1,
        lastRevision: rev + 100,
        createdOn: new Date(++second * 1000),
        compressionSuffix: '.gz',
      });
      rev += 100;
      await store.save(snap, payloadStream(deltaKiB * 1024).pipe(createCompressStream('gzip')));
    }
  }
  return (await store.list()).reduce((n, s) => n + (s.sizeBytes ?? 0), 0);
}

/** Snapshot name → sha256 of its stored bytes, read back through the store as a restore would. */
async function storeHashes(config: StoreConfig): Promise<Map<string, string>> {
  const store = await openSnapStore(config);
  try {
    const out = new Map<string, string>();
    for (const s of await store.list()) {
      const h = createHash('sha256');
      for await (const c of await store.fetch(s)) h.update(c as Buffer);
      out.set(s.snapName, h.digest('hex'));
    }
    return out;
  } finally {
    await store.close();
  }
}

function sameContents(a: ReadonlyMap<string, string>, b: ReadonlyMap<string, string>): boolean {
  return a.size === b.size && [...a].every(([k, h]) => b.get(k) === h);
}

// ------------------------------------------------------------------------------------------- one leg

interface LegSetup {
  from: StoreConfig;
  to: StoreConfig;
}

interface LegOutcome {
  run: Run;
  copied: number;
  skipped: number;
  failed: number;
  bytes: number;
  /** The leg process's own high-water mark (resourceUsage), start-up included, MiB. */
  processMaxRssMB: number;
}

/** --child=leg: one copy in this fresh process; prints a LegOutcome as JSON. */
async function leg(setup: LegSetup): Promise<void> {
  quietAwsNodeWarning();
  const from = await openSnapStore(setup.from);
  const to = await openSnapStore(setup.to);
  try {
    // Connect both before measuring, as the CLI has done before it copies anything.
    await from.list();
    await to.list();
    const { run, value } = await measured<CopyResult>(() =>
      copyBackups(
        {
          source: from,
          destination: to,
          logger: silentLogger,
          clock: systemClock,
          saveBufferBytes: saveBufferBytes(setup.to),
          ...(budgetMiB ? { memoryBudgetBytes: budgetMiB * MiB } : {}),
        },
        {
          maxBackupsToCopy: -1,
          maxBackupAge: -1,
          maxParallelCopyOperations: 10,
          waitForFinalSnapshot: false,
          waitForFinalSnapshotTimeout: 0,
        },
      ),
    );
    const outcome: LegOutcome = {
      run,
      copied: value.copied.length,
      skipped: value.skipped.length,
      failed: value.failures.length,
      bytes: value.bytes,
      processMaxRssMB: round1(process.resourceUsage().maxRSS / 1024),
    };
    console.log(JSON.stringify(outcome));
  } finally {
    await from.close();
    await to.close();
  }
}

function runLeg(label: string, setup: LegSetup): Promise<LegOutcome> {
  return new Promise((resolve, reject) => {
    const args = [
      ...process.execArgv,
      process.argv[1] as string,
      ...process.argv.slice(2),
      '--child=leg',
      `--setup=${JSON.stringify(setup)}`,
    ];
    const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    proc.once('error', reject);
    proc.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`${label} failed (exit ${code})`));
      try {
        resolve(JSON.parse(out.trim().split('\n').pop() ?? '') as LegOutcome);
      } catch (e) {
        reject(e as Error);
      }
    });
  });
}

// ------------------------------------------------------------------------------------------ emulators

interface FakeGcsProcess {
  endpoint: string;
  stop(): Promise<void>;
}

/** The fake GCS server in its own process (support/fake-gcs-server.ts), so its memory is not measured. */
function startFakeGcsProcess(bucket: string): Promise<FakeGcsProcess> {
  const script = path.join(benchDir, 'support', 'fake-gcs-server.ts');
  // Always through tsx, whether this bench runs from TypeScript or bundled.
  const proc = spawn(process.execPath, ['--conditions=development', '--import', 'tsx', script, `--bucket=${bucket}`], {
    cwd: path.resolve(benchDir, '..', '..'),
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const stop = async (): Promise<void> => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    proc.stdin.end(); // its cue to stop and remove its data
    const t = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(t);
  };
  return new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) resolve({ endpoint: (JSON.parse(line) as { endpoint: string }).endpoint, stop });
    });
    proc.once('error', reject);
    proc.once('exit', (code) => reject(new Error(`fake GCS server exited with ${String(code)} before listening`)));
  });
}

// ------------------------------------------------------------------------------------------------ main

interface Row {
  leg: string;
  pass: 'first' | 'again';
  outcome: LegOutcome;
  /** First pass: the destination is byte-identical to the source afterwards. */
  identical?: boolean;
}

async function main(): Promise<void> {
  quietAwsNodeWarning();
  const remotes = via();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'copy-bench-'));
  const stops: Array<() => Promise<unknown>> = [() => rm(dir, { recursive: true, force: true })];
  const rows: Row[] = [];
  try {
    const base = { container: BUCKET, prefix: 'bench/v2', maxParallelChunkUploads: 5, minChunkSize: 5 * MiB, tempDir: dir };
    const localConfig = (name: string): StoreConfig => ({ ...base, provider: 'Local', rootDir: path.join(dir, name) });
    const remoteConfig = async (remote: Remote): Promise<StoreConfig> => {
      switch (remote) {
        case 'S3': {
          const s3rver = await startS3rver({ bucket: BUCKET });
          stops.push(() => s3rver.stop());
          return {
            ...base,
            provider: 'S3',
            endpointOverride: s3rver.endpoint,
            credentials: {
              region: 'us-east-1',
              accessKeyID: S3RVER_ACCESS_KEY,
              secretAccessKey: S3RVER_SECRET_KEY,
              s3ForcePathStyle: true,
            },
          };
        }
        case 'ABS': {
          const azurite = await startAzurite();
          stops.push(() => azurite.stop());
          await azurite.createContainer(BUCKET);
          return {
            ...base,
            provider: 'ABS',
            endpointOverride: azurite.accountEndpoint,
            credentials: { storageAccount: AZURITE_ACCOUNT, storageKey: AZURITE_KEY },
          };
        }
        case 'GCS': {
          const gcs = await startFakeGcsProcess(BUCKET);
          stops.push(() => gcs.stop());
          return { ...base, provider: 'GCS', endpointOverride: gcs.endpoint };
        }
      }
    };

    const ring: Array<{ name: string; config: StoreConfig }> = [{ name: 'Local', config: localConfig('source') }];
    for (const r of remotes) ring.push({ name: r, config: await remoteConfig(r) });
    ring.push({ name: 'Local', config: localConfig('back') });

    const source = await openSnapStore(ring[0]!.config);
    const t0 = Date.now();
    const total = await buildSource(source).finally(() => source.close());
    console.log(
      `source: ${fulls} fulls of ${fullMiB} MiB + ${deltas} gzip deltas of ${deltaKiB} KiB = ${round1(total / MiB)} MiB, written in ${round1((Date.now() - t0) / 1000)} s`,
    );
    const expected = await storeHashes(ring[0]!.config);

    for (let i = 0; i + 1 < ring.length; i++) {
      const from = ring[i]!;
      const to = ring[i + 1]!;
      const label = `${from.name} → ${to.name}`;
      const setup = { from: from.config, to: to.config };
      const first = await runLeg(label, setup);
      const identical = sameContents(expected, await storeHashes(to.config));
      rows.push({ leg: label, pass: 'first', outcome: first, identical });
      console.log(
        `${label}: ${first.copied} objects, ${round1(first.bytes / MiB)} MiB in ${round1(first.run.seconds)} s, peak RSS ${first.run.peakRssMB} MiB; identical to the source: ${identical}`,
      );
      const again = await runLeg(`${label} (again)`, setup);
      rows.push({ leg: label, pass: 'again', outcome: again });
      console.log(
        `${label} again: ${again.copied} copied, ${again.skipped} already present, in ${round1(again.run.seconds)} s, peak RSS ${again.run.peakRssMB} MiB`,
      );
    }

    const firsts = rows.filter((r) => r.pass === 'first');
    const agains = rows.filter((r) => r.pass === 'again');
    const allIdentical = firsts.every((r) => r.identical === true && r.outcome.failed === 0 && r.outcome.copied === expected.size);
    const againCopiedNothing = agains.every((r) => r.outcome.copied === 0 && r.outcome.failed === 0 && r.outcome.skipped === expected.size);
    const peak = Math.max(...rows.map((r) => r.outcome.run.peakRssMB));
    const met = peak < RSS_TARGET_MB;
    console.log(
      `\nruntime: ${process.execArgv.some((a) => a.includes('tsx')) ? 'tsx' : 'plain node'}, a fresh process per leg\n` +
        table(
          ['copy', 'run', 'copied', 'present', 'MiB', 'seconds', 'MiB/s', 'cpu s', 'peak RSS MiB', 'baseline RSS MiB', 'identical'],
          rows.map((r) => [
            r.leg,
            r.pass,
            r.outcome.copied,
            r.outcome.skipped,
            round1(r.outcome.bytes / MiB),
            round1(r.outcome.run.seconds),
            r.pass === 'first' ? round1(r.outcome.bytes / MiB / r.outcome.run.seconds) : '-',
            round1(r.outcome.run.cpuSeconds),
            r.outcome.run.peakRssMB,
            r.outcome.run.baselineRssMB,
            r.identical === undefined ? '-' : String(r.identical),
          ]),
        ),
    );
    console.log(
      `every leg identical to the source: ${allIdentical}; every second run copied nothing: ${againCopiedNothing}; ` +
        `target peak RSS < ${RSS_TARGET_MB} MB: ${met ? 'met' : 'MISSED'} (highest ${peak} MiB)`,
    );
    console.log(
      JSON.stringify({
        bench: 'copy',
        bytes: total,
        objects: expected.size,
        ring: ring.map((s) => s.name),
        results: rows.map((r) => ({
          leg: r.leg,
          pass: r.pass,
          copied: r.outcome.copied,
          present: r.outcome.skipped,
          bytes: r.outcome.bytes,
          seconds: round1(r.outcome.run.seconds),
          mibPerSec: r.pass === 'first' ? round1(r.outcome.bytes / MiB / r.outcome.run.seconds) : undefined,
          peakRssMB: r.outcome.run.peakRssMB,
          processMaxRssMB: r.outcome.processMaxRssMB,
          identical: r.identical,
        })),
        peakRssMB: peak,
        rssTargetMB: RSS_TARGET_MB,
        rssTargetMet: met,
        identical: allIdentical,
        secondRunCopiedNothing: againCopiedNothing,
      }),
    );
    if (!allIdentical) throw new Error('a leg of the ring did not give back the source byte for byte');
    if (!againCopiedNothing) throw new Error('a second run of a leg copied something');
  } finally {
    while (stops.length > 0) await stops.pop()?.();
  }
}

const setupArg = flag('setup');
await (flag('child') === 'leg' && setupArg ? leg(JSON.parse(setupArg) as LegSetup) : main());
