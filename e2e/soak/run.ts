/**
 * One soak run: the cluster and its sidecars, the workload, the nemesis for the run's duration, then quiet,
 * catch-up and the checker. Every process it starts is stopped when it ends, also on failure.
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { S3RVER_CREDENTIALS, startS3rver, type S3rverInstance } from '../../snapstore/test/support/s3rver.js';
import { waitFor } from '../../test/support/wait.js';
import { readAckLog } from './ack-log.js';
import {
  checkAcknowledged,
  firstDifference,
  hashKv,
  headRevision,
  leftoverObjects,
  pickRestorable,
  seamRevisions,
  readAt,
  restorableRanges,
  restoreAndStart,
  storedSnapshots,
  storeLastRevision,
  unreachableRanges,
  verifyStore,
  type CheckerEnv,
} from './checker.js';
import { runNemesis, type NemesisReport } from './nemesis.js';
import { createPrng } from './prng.js';
import { ManagedProcess, type ExitRecord } from './processes.js';
import { buildSchedule, describeFault, type Fault, type StoreKind, type Topology } from './schedule.js';
import { startFaultProxy, type FaultProxy } from './store-proxy.js';
import { SoakCluster } from './topology.js';

export interface SoakOptions {
  seed: number;
  durationMs: number;
  topology: Topology;
  store: StoreKind;
  /** Point-in-time restores the checker compares with etcd's history. */
  pointInTimeChecks: number;
  etcdPath: string;
  etcdctlPath: string;
  /** Keep the run's directory (logs, store) even when it passes. */
  keep: boolean;
  log(line: string): void;
}

export interface SoakResult {
  seed: number;
  topology: Topology;
  store: StoreKind;
  schedule: Fault[];
  nemesis: NemesisReport;
  writesAcked: number;
  writesUnknown: number;
  lost: number;
  headRevision: number;
  storeRevision: number;
  catchUpMs: number;
  /** Whether the workload wrote keys with leases (odd seeds). */
  leases: boolean;
  pointInTime: number[];
  /** Revisions between the first full and the store's last one that no restore reaches (see `restorableRanges`). */
  unreachable: string[];
  crashes: ExitRecord[];
  /** Empty when every check passed; else the checker's differences, the first one first. */
  failures: string[];
  runDir: string;
}

const WORKLOAD = fileURLToPath(new URL('./workload.ts', import.meta.url));
const DELTA_PERIOD_S = 2;

/** Highest revision any complete snapshot in the store reaches, from the object names alone. */
function backedUpRevision(storeRoot: string): number {
  return Math.max(0, ...storedSnapshots(storeRoot).map((s) => s.last));
}

function lastAckedRevision(path: string): number {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return 0;
  }
  let max = 0;
  for (const m of text.matchAll(/"outcome":"ok","rev":(\d+)/g)) max = Math.max(max, Number(m[1]));
  return max;
}

export async function runSoak(opts: SoakOptions): Promise<SoakResult> {
  const runDir = mkdtempSync(join(tmpdir(), `etcdbr-soak-${opts.seed}-`));
  let storeRoot = join(runDir, 'store');
  // The sidecars reach the store through the fault proxy; the checker reaches it directly.
  let sidecarStoreFlags = ['--storage-provider=Local', `--store-container=${storeRoot}`];
  let storeFlags = sidecarStoreFlags;
  const storeEnv: NodeJS.ProcessEnv = {};
  let s3: S3rverInstance | undefined;
  let proxy: FaultProxy | undefined;
  if (opts.store === 's3') {
    s3 = await startS3rver({ bucket: 'soak' });
    proxy = await startFaultProxy(s3.endpoint);
    storeRoot = join(s3.directory, 'soak');
    const credentials = join(runDir, 's3.json');
    writeFileSync(credentials, JSON.stringify(S3RVER_CREDENTIALS));
    storeEnv.AWS_APPLICATION_CREDENTIALS_JSON = credentials;
    const s3Flags = (endpoint: string) => [
      '--storage-provider=S3',
      '--store-container=soak',
      '--store-prefix=etcd-main',
      `--store-endpoint-override=${endpoint}`,
    ];
    sidecarStoreFlags = s3Flags(proxy.endpoint);
    storeFlags = s3Flags(s3.endpoint);
  }
  mkdirSync(storeRoot, { recursive: true });
  const schedule = buildSchedule({ seed: opts.seed, durationMs: opts.durationMs, topology: opts.topology, store: opts.store });
  const failures: string[] = [];
  const cluster = await SoakCluster.create(
    { runDir, etcd: opts.etcdPath, etcdctl: opts.etcdctlPath },
    { topology: opts.topology, storeFlags: sidecarStoreFlags, storeEnv, deltaPeriodSeconds: DELTA_PERIOD_S, schedule: '*/2 * * * *' },
  );
  const ackPath = join(runDir, 'acks.jsonl');
  // Odd seeds write keys with leases, even seeds none. A restore keeps every key's lease (issue 40), so `hashkv`
  // is compared either way; the leased runs also prove the leases come back.
  const leases = opts.seed % 2 === 1;
  const workload = new ManagedProcess(
    'workload',
    process.execPath,
    () => [
      '--conditions=development',
      '--import',
      'tsx',
      WORKLOAD,
      `--endpoints=${cluster.clientUrls.join(',')}`,
      `--seed=${opts.seed}`,
      `--out=${ackPath}`,
      `--leases=${leases}`,
    ],
    join(runDir, 'workload.log'),
    cluster.exits,
  );
  const env: CheckerEnv = { etcdPath: opts.etcdPath, etcdctlPath: opts.etcdctlPath, storeFlags, storeEnv, workDir: join(runDir, 'check') };
  mkdirSync(env.workDir);
  let nemesis: NemesisReport = { injected: {}, skipped: {}, journal: [], maxRecoveryPoint: 0, seams: [] };
  const result: SoakResult = {
    seed: opts.seed,
    topology: opts.topology,
    store: opts.store,
    schedule,
    nemesis,
    writesAcked: 0,
    writesUnknown: 0,
    lost: 0,
    headRevision: 0,
    storeRevision: 0,
    catchUpMs: 0,
    leases,
    pointInTime: [],
    unreachable: [],
    crashes: [],
    failures,
    runDir,
  };
  try {
    opts.log(`soak seed=${opts.seed} topology=${opts.topology} store=${opts.store} ${schedule.length} faults planned; run dir ${runDir}`);
    await cluster.startAll();
    workload.start();
    await waitFor(() => backedUpRevision(storeRoot) > 0, 'the initial full snapshot', 120_000, 200);

    // Faults.
    const startedAt = Date.now();
    nemesis = await runNemesis(
      schedule,
      {
        cluster,
        ...(proxy ? { storeFaults: proxy } : {}),
        revisions: async () => ({ acked: lastAckedRevision(ackPath), backedUp: backedUpRevision(storeRoot) }),
        log: opts.log,
      },
      startedAt,
    );
    result.nemesis = nemesis;
    const rest = startedAt + opts.durationMs - Date.now();
    if (rest > 0) await new Promise((r) => setTimeout(r, rest));

    // Quiet: the workload stops, every process is up, the sidecars catch up with etcd's head.
    await workload.kill('SIGTERM');
    for (const m of cluster.members) m.sidecar.start();
    await Promise.all(cluster.members.filter((m) => !m.etcd.running).map((m) => cluster.startEtcd(m)));
    for (const m of cluster.members) await cluster.etcdReady(m);
    const head = await headRevision(env, cluster.clientUrls);
    result.headRevision = head;
    const quietAt = Date.now();
    // One delta period once quiet, plus a sidecar's start-up (one may have just been restarted) and a loaded
    // machine's slack: a failure bound, never a wait.
    await waitFor(() => backedUpRevision(storeRoot) >= head, `the store to reach etcd's head revision ${head}`, 60_000, 100).catch(
      (err: unknown) => {
        failures.push(`check 3: ${(err as Error).message} (store at ${backedUpRevision(storeRoot)})`);
      },
    );
    result.catchUpMs = Date.now() - quietAt;

    await check(opts, env, cluster, ackPath, storeRoot, result);
  } catch (err) {
    failures.push(`the run itself failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  } finally {
    await workload.close();
    // The sidecars are stopped in order (SIGTERM): a non-zero exit here is a crash like any other.
    for (const m of cluster.members) await m.sidecar.kill('SIGTERM');
    await cluster.stopAll();
    await proxy?.stop();
    if (proxy) opts.log(`store proxy: ${JSON.stringify(proxy.faulted)}`);
  }
  // A SIGTERMed sidecar must exit 0; one that SIGTERM ended by its default action (signal SIGTERM, no code)
  // got it while still loading, before its handler existed and before it had done anything: not a crash.
  const crashes = cluster.exits.filter(
    (e) => e.requested === undefined || (e.requested === 'SIGTERM' && e.code !== 0 && e.signal !== 'SIGTERM' && e.name !== 'workload'),
  );
  result.crashes = crashes;
  for (const c of crashes) {
    const why = c.requested ? `after ${c.requested} (a SIGTERM must end in exit code 0)` : 'without being asked to';
    failures.push(`check 5: ${c.name} (pid ${c.pid}) exited code=${c.code} signal=${c.signal} ${why}`);
  }
  // s3rver's files are copied into the run dir when it is kept (stopping s3rver removes its directory).
  if (s3 && (failures.length > 0 || opts.keep)) cpSync(s3.directory, join(runDir, 's3rver'), { recursive: true });
  await s3?.stop();
  if (failures.length === 0 && !opts.keep) rmSync(runDir, { recursive: true, force: true });
  return result;
}

async function check(
  opts: SoakOptions,
  env: CheckerEnv,
  cluster: SoakCluster,
  ackPath: string,
  storeRoot: string,
  result: SoakResult,
): Promise<void> {
  const failures = result.failures;
  const log = readAckLog(ackPath);
  result.writesAcked = log.filter((r) => r.outcome === 'ok').length;
  result.writesUnknown = log.filter((r) => r.outcome === 'unknown').length;

  // 1. verify passes.
  const verify = await verifyStore(env);
  if (verify) failures.push(`check 1: ${verify}`);

  // 2. A restore equals etcd at the store's last revision, key by key, and hashkv agrees.
  const plan = await storeLastRevision(env);
  if (!plan) {
    failures.push('check 2: the store holds no full snapshot');
    return;
  }
  result.storeRevision = plan.last;
  let restored;
  try {
    restored = await restoreAndStart(env, 'latest');
  } catch (err) {
    failures.push(`check 2: ${(err as Error).message}`);
    return;
  }
  try {
    const want = await readAt(env, cluster.clientUrls, plan.last);
    const have = await readAt(env, [restored.clientUrl], plan.last);
    const diff = firstDifference(want, have, `restore at the store's last revision ${plan.last}`);
    if (diff) failures.push(`check 2: ${diff}`);
    const [h1, h2] = [await hashKv(env, cluster.members[0]!.clientUrl, plan.last), await hashKv(env, restored.clientUrl, plan.last)];
    if (h1 !== h2) failures.push(`check 2: hashkv --rev=${plan.last}: etcd ${h1}, restored ${h2}`);

    // 3. Every acknowledged write at or below that revision is there as written.
    const acked = checkAcknowledged(log, have, plan.last);
    result.lost = acked.lost.length;
    for (const l of acked.lost.slice(0, 5)) failures.push(`check 3: ${l}`);
  } finally {
    await restored.stop();
  }

  // 4. Point-in-time restores at seeded revisions in the middle of the run, among those the store's objects
  // reach: a leader killed before it uploaded its deltas leaves a gap only the next full's revision covers.
  const rng = createPrng(opts.seed ^ 0x9e3779b9);
  const reachable = restorableRanges(storedSnapshots(storeRoot));
  result.unreachable = unreachableRanges(reachable, plan.last);
  // Both sides of every seam (a leadership move, an upload cut short) where the store reaches them, then
  // seeded revisions anywhere.
  const seams = seamRevisions(result.nemesis.seams, storedSnapshots(storeRoot), reachable, plan.last);
  for (let i = 0; i < seams.length + opts.pointInTimeChecks; i++) {
    // The first full is taken before the first fault, in the first few percent of the run.
    const rev = i < seams.length ? seams[i] : pickRestorable(reachable, Math.floor(plan.last * 0.2), plan.last, rng.int);
    if (rev === undefined) {
      failures.push(`check 4: no revision in ${Math.floor(plan.last * 0.2)}–${plan.last} is reachable from the store's objects`);
      break;
    }
    result.pointInTime.push(rev);
    let pit;
    try {
      pit = await restoreAndStart(env, `pit-${i}-${rev}`, rev);
    } catch (err) {
      failures.push(`check 4: restore --to-revision=${rev}: ${(err as Error).message}`);
      continue;
    }
    try {
      const diff = firstDifference(
        await readAt(env, cluster.clientUrls, rev),
        await readAt(env, [pit.clientUrl], rev),
        `restore --to-revision=${rev}`,
      );
      if (diff) failures.push(`check 4: ${diff}`);
      const [h1, h2] = [await hashKv(env, cluster.members[0]!.clientUrl, rev), await hashKv(env, pit.clientUrl, rev)];
      if (h1 !== h2) failures.push(`check 4: hashkv --rev=${rev}: etcd ${h1}, restored ${h2}`);
    } finally {
      await pit.stop();
    }
  }

  // 5. (store side) nothing half-written left in the store.
  for (const o of leftoverObjects(storeRoot)) failures.push(`check 5: leftover object in the store: ${o}`);
}

export function describeFailure(r: SoakResult): string {
  return [
    `SOAK FAILED: seed ${r.seed} (topology ${r.topology}, store ${r.store}); run dir kept: ${r.runDir}`,
    `first difference: ${r.failures[0]}`,
    ...r.failures.slice(1, 10).map((f) => `  then: ${f}`),
    'fault schedule:',
    ...r.schedule.map((f) => `  ${describeFault(f)}`),
    'what the nemesis did:',
    ...r.nemesis.journal.map((l) => `  ${l}`),
  ].join('\n');
}
