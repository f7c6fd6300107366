/**
 * Shared pieces of the multi-node process tests: each member's sidecar started the etcd-druid way, who
 * leads (asked of etcd itself), what each sidecar's /metrics says it did, the store's delta chain read back
 * event by event, and a restore of the store through `etcdbrctl restore` into an etcd the test can read.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { sortSnapshots, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { memberStatus } from '../../src/cluster/leadership.js';
import { startLocalEtcd, type LocalEtcd } from '../../src/etcd/local-etcd.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import type { TestCluster } from '../../test/support/cluster.js';
import { readDeltaEvents } from '../../test/support/deltas.js';
import { etcdClient } from '../../test/support/etcd-client.js';
import { SINGLE_MEMBER_RAFT_ARGS } from '../../test/support/etcd.js';
import { BIN, startSidecar, type SidecarProcess } from './sidecar.js';

/**
 * `etcdbrctl server` for member `index` of `cluster` as etcd-druid starts it: the member's etcd, data dir
 * and place in the cluster as flags, its etcd config template in ETCD_CONF, the pod name; `extraFlags` after.
 */
export function startMemberSidecar(cluster: TestCluster, index: number, template: string, extraFlags: string[]): Promise<SidecarProcess> {
  const m = cluster.members[index]!;
  return startSidecar(
    [
      `--endpoints=${m.clientUrl}`,
      `--data-dir=${m.dataDir}`,
      `--name=${m.name}`,
      `--initial-cluster=${cluster.initialCluster}`,
      `--initial-advertise-peer-urls=${m.peerUrl}`,
      `--initial-cluster-token=${cluster.token}`,
      '--etcd-connection-timeout-leader-election=2s',
      ...extraFlags,
    ],
    { ETCD_CONF: template, POD_NAME: m.name },
  );
}

/** The raft leader as `clientUrl` sees it: its hex id and name; undefined when that member knows none. */
export async function etcdLeader(clientUrl: string): Promise<{ id: string; name: string } | undefined> {
  const c = etcdClient(clientUrl);
  try {
    const st = await memberStatus(c, 2_000);
    if (st.leaderId === '0') return undefined;
    const list = await c.memberList();
    const leader = list.members.find((m) => m.id === st.leaderId);
    return leader ? { id: st.leaderId, name: leader.name } : undefined;
  } catch {
    return undefined;
  } finally {
    c.close();
  }
}

/** Sum of every sample of `name` whose labels include `labels` (Prometheus text format). */
export function metricSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = new Map([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1]!, x[2]!]));
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) sum += Number(m[3]);
  }
  return sum;
}

export interface SnapshotCounts {
  full: number;
  incr: number;
}

/** How many full and delta snapshots this sidecar tried to store (any outcome), from its /metrics. */
export async function snapshotCounts(sidecarUrl: string): Promise<SnapshotCounts> {
  const text = await (await fetch(`${sidecarUrl}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
  return {
    full: metricSum(text, 'etcdbr_snapshot_duration_seconds_count', { kind: 'Full' }),
    incr: metricSum(text, 'etcdbr_snapshot_duration_seconds_count', { kind: 'Incr' }),
  };
}

export async function healthz(sidecarUrl: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${sidecarUrl}/healthz`, { signal: AbortSignal.timeout(10_000) });
  return { status: res.status, body: await res.json() };
}

export interface ChainReport {
  /** Complete objects in revision order. */
  snapshots: Snapshot[];
  /** Every break of the rules, each naming the objects; empty when the chain is sound. */
  problems: string[];
  /** Revision every event of every delta, in order (for "each revision exactly once"). */
  deltaRevisions: number[];
}

/**
 * Reads the whole store and checks what a single writer leaves behind: the first object is a full; every
 * delta after a delta starts at the previous last revision + 1; a delta after a full starts at or before
 * the full's last revision + 1 and reaches past it (fulls may overlap deltas); every delta's events lie in
 * its name's range and end at its last revision; no revision is stored by two deltas.
 */
export async function readChain(store: SnapStore): Promise<ChainReport> {
  const snapshots = sortSnapshots((await store.list()).filter((s) => !s.isChunk));
  const problems: string[] = [];
  const deltaRevisions: number[] = [];
  const seen = new Map<number, string>();
  let prev: Snapshot | undefined;
  for (const s of snapshots) {
    if (s.kind === 'Incr') {
      if (!prev) problems.push(`${s.snapName} has no full snapshot before it`);
      else if (prev.kind === 'Incr' && s.startRevision !== prev.lastRevision + 1) {
        problems.push(
          `${s.snapName} starts at ${s.startRevision}, but the delta before it (${prev.snapName}) ends at ${prev.lastRevision}`,
        );
      } else if (prev.kind === 'Full' && (s.startRevision > prev.lastRevision + 1 || s.lastRevision <= prev.lastRevision)) {
        problems.push(`${s.snapName} does not continue the full snapshot ${prev.snapName} (last revision ${prev.lastRevision})`);
      }
      const events = await readDeltaEvents(store, s);
      if (events.length === 0) problems.push(`${s.snapName} holds no events`);
      for (const e of events) {
        if (e.modRevision < s.startRevision || e.modRevision > s.lastRevision) {
          problems.push(`${s.snapName} holds an event at revision ${e.modRevision}, outside its range`);
        }
        const other = seen.get(e.modRevision);
        // Several events of one transaction share a revision; only another object storing it is a duplicate.
        if (other !== undefined && other !== s.snapName) problems.push(`revision ${e.modRevision} is in both ${other} and ${s.snapName}`);
        seen.set(e.modRevision, s.snapName);
        deltaRevisions.push(e.modRevision);
      }
      if (events.length > 0 && events.at(-1)!.modRevision !== s.lastRevision) {
        problems.push(`${s.snapName} ends at revision ${events.at(-1)!.modRevision}, not at its name's ${s.lastRevision}`);
      }
    } else if (!prev && s.kind !== 'Full') {
      problems.push(`${s.snapName} is first but not a full snapshot`);
    }
    prev = s;
  }
  return { snapshots, problems, deltaRevisions };
}

/** Runs bin/etcdbrctl to its end (killed after 120 s). */
export function runEtcdbrctl(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * `etcdbrctl restore` of a Local store into `<dir>/restored.etcd`, then a single etcd on it (free ports).
 * The caller stops the returned etcd.
 */
export async function restoreIntoEtcd(storeDir: string, dir: string, binaries: EtcdBinaries): Promise<LocalEtcd> {
  const dataDir = join(dir, 'restored.etcd');
  const r = await runEtcdbrctl([
    'restore',
    '--storage-provider=Local',
    `--store-container=${storeDir}`,
    `--data-dir=${dataDir}`,
    '--initial-cluster=default=http://127.0.0.1:2380',
    '--initial-advertise-peer-urls=http://127.0.0.1:2380',
    `--restoration-temp-snapshots-dir=${join(dir, 'restore-tmp')}`,
  ]);
  if (r.code !== 0) throw new Error(`etcdbrctl restore exited ${r.code}:\n${r.stderr}`);
  return startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
}
