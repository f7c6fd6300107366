/**
 * Carries out a fault schedule against a running soak cluster: each fault starts at its time and lasts its
 * duration, independently of the others (so they overlap). A fault whose target is already down (another
 * fault holds it) is skipped and counted as such; the schedule itself never changes.
 */
import { open, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { waitFor } from '../../test/support/wait.js';
import { describeFault, type Fault, type FaultKind } from './schedule.js';
import type { Member, SoakCluster } from './topology.js';

export interface StoreFaults {
  inject(f: Fault): Promise<void>;
}

export interface NemesisReport {
  injected: Partial<Record<FaultKind, number>>;
  skipped: Partial<Record<FaultKind, number>>;
  /** What happened, in order, for a failure report. */
  journal: string[];
  /** The largest (last acknowledged − last backed-up revision) seen when a fault struck. */
  maxRecoveryPoint: number;
  /**
   * The last acknowledged revision when a fault that may move leadership or leave an upload ambiguous struck:
   * the seams where two writers' deltas meet, which check 4 restores on both sides of.
   */
  seams: number[];
}

export interface NemesisDeps {
  cluster: SoakCluster;
  storeFaults?: StoreFaults;
  /** Last acknowledged and last backed-up revision right now (for the recovery point). */
  revisions(): Promise<{ acked: number; backedUp: number }>;
  log(line: string): void;
}

let dataFaultActive = false;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runNemesis(schedule: Fault[], deps: NemesisDeps, startedAt: number): Promise<NemesisReport> {
  const report: NemesisReport = { injected: {}, skipped: {}, journal: [], maxRecoveryPoint: 0, seams: [] };
  const note = (s: string) => {
    const line = `[${((Date.now() - startedAt) / 1000).toFixed(1)}s] ${s}`;
    report.journal.push(line);
    deps.log(line);
  };
  const running: Array<Promise<void>> = [];
  for (const f of schedule) {
    const wait = startedAt + f.at - Date.now();
    if (wait > 0) await sleep(wait);
    running.push(
      inject(f, deps, report, note).catch((err: unknown) => {
        note(`fault ${describeFault(f)} failed to run: ${String(err)}`);
        throw err;
      }),
    );
  }
  await Promise.all(running);
  return report;
}

async function resolveTarget(f: Fault, cluster: SoakCluster): Promise<Member | undefined> {
  if ('member' in f.target) return cluster.members[f.target.member];
  const leader = await cluster.leaderIndex();
  if (leader === undefined) return undefined;
  if (f.target.role === 'leader') return cluster.members[leader];
  return cluster.members.find((m) => m.index !== leader && m.etcd.running);
}

async function inject(f: Fault, deps: NemesisDeps, report: NemesisReport, note: (s: string) => void): Promise<void> {
  const count = (which: 'injected' | 'skipped') => (report[which][f.kind] = (report[which][f.kind] ?? 0) + 1);
  // A store fault hits the store every sidecar shares, whoever leads.
  const m = f.kind.startsWith('store') ? deps.cluster.members[0] : await resolveTarget(f, deps.cluster);
  if (f.kind === 'temp-full' && m && !m.tmpfs) {
    report.skipped[f.kind] = (report.skipped[f.kind] ?? 0) + 1;
    note(`skip ${describeFault(f)} (no tmpfs: the soak is not root or cannot mount)`);
    return;
  }
  const dataFault = f.kind === 'data-dir-lost' || f.kind === 'data-dir-corrupt';
  // Three members survive the loss of one member's data, not of a second one while the first is still
  // being re-added: a data fault waits for a cluster of three started voting members and no other data fault.
  const busy =
    !m ||
    (f.kind.startsWith('sidecar') ? !m.sidecar.running : f.kind.startsWith('store') || f.kind === 'temp-full' ? false : !m.etcd.running) ||
    (dataFault && (dataFaultActive || !(await deps.cluster.allVoting())));
  if (busy) {
    count('skipped');
    note(`skip ${describeFault(f)} (target down, leader unknown or a data fault in progress)`);
    return;
  }
  const { acked, backedUp } = await deps.revisions();
  report.maxRecoveryPoint = Math.max(report.maxRecoveryPoint, acked - backedUp);
  if (dataFault) dataFaultActive = true;
  // Every fault but a follower's sidecar may move leadership or cut an upload short.
  if (!(f.kind.startsWith('sidecar') && 'role' in f.target && f.target.role === 'follower')) report.seams.push(acked);
  count('injected');
  note(`inject ${describeFault(f)} on ${m.name} (acked ${acked}, backed up ${backedUp})`);
  switch (f.kind) {
    case 'sidecar-sigkill':
    case 'sidecar-sigterm': {
      const exit = await m.sidecar.kill(f.kind === 'sidecar-sigkill' ? 'SIGKILL' : 'SIGTERM');
      note(`sidecar ${m.name} exited code=${exit?.code} signal=${exit?.signal}`);
      await sleep(f.durationMs);
      m.sidecar.start();
      note(`sidecar ${m.name} restarted`);
      return;
    }
    case 'etcd-sigkill':
    case 'data-dir-lost':
    case 'data-dir-corrupt': {
      await m.etcd.kill('SIGKILL');
      if (f.kind === 'data-dir-lost') await rm(m.dataDir, { recursive: true, force: true });
      if (f.kind === 'data-dir-corrupt') note(`corrupted ${await corruptDataDir(m.dataDir, f.amount)}`);
      await sleep(f.durationMs);
      await deps.cluster.startEtcd(m);
      note(`etcd ${m.name} restarted`);
      if (dataFault) {
        await waitFor(() => deps.cluster.allVoting(), `${m.name} to be a voting member again`, 600_000, 500);
        note(`${m.name} is a voting member again`);
        dataFaultActive = false;
      }
      return;
    }
    case 'leader-move': {
      const leader = await deps.cluster.leaderIndex();
      const to =
        deps.cluster.members.find((x) => x.index !== leader && x.etcd.running && x.index === (m.index + 1) % deps.cluster.members.length) ??
        deps.cluster.members.find((x) => x.index !== leader && x.etcd.running);
      if (leader === undefined || !to) {
        note('leader-move: no leader or no follower up');
        return;
      }
      await deps.cluster.moveLeader(deps.cluster.members[leader]!, to).catch((err: unknown) => note(`leader-move failed: ${String(err)}`));
      note(`leader moved from m${leader} to ${to.name}`);
      return;
    }
    case 'temp-full': {
      const filler = join(m.tempDir, `soak-filler-${f.at}`);
      const filled = await fillDir(filler);
      note(`temp dir of ${m.name} full (${filled} bytes written)`);
      await sleep(f.durationMs);
      await rm(filler, { force: true });
      note(`temp dir of ${m.name} freed`);
      return;
    }
    default:
      if (!deps.storeFaults) throw new Error(`fault ${f.kind} is not available in this run`);
      await deps.storeFaults.inject(f);
      note(`store fault ${f.kind} over`);
  }
}

/**
 * Overwrites 4 KiB in the middle of the member's bbolt file (or, when `amount` is odd, of its newest WAL
 * file): the damage a failing disk leaves. Returns what it hit.
 */
async function corruptDataDir(dataDir: string, amount: number): Promise<string> {
  const wal = join(dataDir, 'member', 'wal');
  const walFiles = (await readdir(wal).catch(() => [] as string[])).filter((f) => f.endsWith('.wal')).sort();
  const target = amount % 2 === 1 && walFiles.length > 0 ? join(wal, walFiles.at(-1)!) : join(dataDir, 'member', 'snap', 'db');
  const size = (await stat(target)).size;
  const fh = await open(target, 'r+');
  try {
    await fh.write(Buffer.alloc(4096, 0xa5), 0, 4096, Math.max(0, Math.floor(size / 2) - 2048));
  } finally {
    await fh.close();
  }
  return `${target} (${size} bytes) at ${Math.floor(size / 2)}`;
}

/** Writes `path` until the file system says ENOSPC; returns the bytes written. */
async function fillDir(path: string): Promise<number> {
  const fh = await open(path, 'w');
  const chunk = Buffer.alloc(1 << 20);
  let written = 0;
  try {
    for (;;) written += (await fh.write(chunk)).bytesWritten;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
  } finally {
    await fh.close();
  }
  return written;
}
