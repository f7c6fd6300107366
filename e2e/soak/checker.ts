/**
 * The soak's checker. It knows nothing of our code: it reads etcd through `etcdctl`, and the store only
 * through `etcdbrctl verify` and `etcdbrctl restore` run as processes (plus the ack log the workload wrote).
 * Each check returns the first difference it finds, or nothing.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../src/etcd/ports.js';
import { waitFor } from '../../test/support/wait.js';
import type { AckRecord } from './ack-log.js';
import { ManagedProcess, type ExitRecord } from './processes.js';
import { ETCDBRCTL } from './topology.js';

const run = promisify(execFile);

export interface CheckerEnv {
  etcdPath: string;
  etcdctlPath: string;
  /** Flags naming the store, as the sidecars got them. */
  storeFlags: string[];
  storeEnv: NodeJS.ProcessEnv;
  workDir: string;
}

export interface KeyState {
  value: string;
  create: number;
  mod: number;
  version: number;
}

const b64 = (s: string) => Buffer.from(s, 'base64').toString('latin1');

export async function etcdctl(env: CheckerEnv, endpoints: string[], args: string[]): Promise<string> {
  const { stdout } = await run(env.etcdctlPath, [`--endpoints=${endpoints.join(',')}`, '--command-timeout=30s', ...args], {
    env: { ...process.env, ETCDCTL_API: '3' },
    maxBuffer: 1 << 30,
  });
  return stdout;
}

/** Every key at revision `rev` (value, create/mod revision, version), read with `etcdctl get --rev`. */
export async function readAt(env: CheckerEnv, endpoints: string[], rev: number): Promise<Map<string, KeyState>> {
  const out = JSON.parse(await etcdctl(env, endpoints, ['get', '', '--prefix', `--rev=${rev}`, '-w', 'json'])) as {
    kvs?: Array<{ key: string; value?: string; create_revision: number; mod_revision: number; version: number }>;
  };
  const m = new Map<string, KeyState>();
  for (const kv of out.kvs ?? []) {
    m.set(b64(kv.key), { value: b64(kv.value ?? ''), create: kv.create_revision, mod: kv.mod_revision, version: kv.version });
  }
  return m;
}

export async function headRevision(env: CheckerEnv, endpoints: string[]): Promise<number> {
  const out = JSON.parse(await etcdctl(env, endpoints, ['get', '/soak/none', '-w', 'json'])) as { header: { revision: number } };
  return Number(out.header.revision);
}

export async function hashKv(env: CheckerEnv, endpoint: string, rev: number): Promise<string> {
  const out = await etcdctl(env, [endpoint], ['endpoint', 'hashkv', `--rev=${rev}`, '-w', 'json']);
  const m = /"hash":(\d+)/.exec(out);
  if (!m) throw new Error(`etcdctl endpoint hashkv printed no hash: ${out}`);
  return m[1]!;
}

/** The first difference between two key sets, or undefined when equal. */
export function firstDifference(expected: Map<string, KeyState>, actual: Map<string, KeyState>, what: string): string | undefined {
  for (const [k, e] of expected) {
    const a = actual.get(k);
    if (!a) return `${what}: key ${JSON.stringify(k)} is missing (expected mod ${e.mod}, version ${e.version})`;
    if (a.value !== e.value || a.create !== e.create || a.mod !== e.mod || a.version !== e.version) {
      return `${what}: key ${JSON.stringify(k)} is ${JSON.stringify({ ...a, value: a.value.slice(0, 40) })}, expected ${JSON.stringify({ ...e, value: e.value.slice(0, 40) })}`;
    }
  }
  for (const [k, a] of actual) if (!expected.has(k)) return `${what}: key ${JSON.stringify(k)} should not exist (mod ${a.mod})`;
  return undefined;
}

function etcdbrctl(env: CheckerEnv, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [ETCDBRCTL, ...args],
      { env: { ...process.env, ...env.storeEnv }, maxBuffer: 1 << 28, timeout: 600_000 },
      (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }),
    );
  });
}

/** `etcdbrctl verify`: exit 0 or the first broken object it names. */
export async function verifyStore(env: CheckerEnv): Promise<string | undefined> {
  const r = await etcdbrctl(env, ['verify', ...env.storeFlags, `--snapstore-temp-directory=${env.workDir}`]);
  return r.code === 0 ? undefined : `etcdbrctl verify exited ${r.code}: ${(r.stdout + r.stderr).slice(-2_000)}`;
}

/** The store's last revision, from `etcdbrctl restore --dry-run -o json` (what a restore would reach). */
export async function storeLastRevision(env: CheckerEnv, toRevision?: number): Promise<{ last: number; base: number } | undefined> {
  const args = [
    'restore',
    '--dry-run',
    '-o',
    'json',
    ...env.storeFlags,
    `--snapstore-temp-directory=${env.workDir}`,
    `--data-dir=${join(env.workDir, 'dry')}`,
  ];
  if (toRevision !== undefined) args.push(`--to-revision=${toRevision}`);
  const r = await etcdbrctl(env, args);
  if (r.code !== 0) throw new Error(`etcdbrctl restore --dry-run exited ${r.code}: ${r.stderr.slice(-2_000)}`);
  const plan = JSON.parse(r.stdout) as { base: { lastRevision: number } | null; deltas: Array<{ lastRevision: number }> };
  if (!plan.base) return undefined;
  return { base: plan.base.lastRevision, last: Math.max(plan.base.lastRevision, ...plan.deltas.map((d) => d.lastRevision)) };
}

export interface RestoredEtcd {
  clientUrl: string;
  stop(): Promise<void>;
}

/** `etcdbrctl restore` (to `toRevision` if given) into a fresh dir, and a throw-away etcd on it (free ports). */
export async function restoreAndStart(env: CheckerEnv, label: string, toRevision?: number): Promise<RestoredEtcd> {
  const dir = join(env.workDir, label);
  mkdirSync(dir, { recursive: true });
  const [client, peer] = [await freePort(), await freePort()];
  const peerUrl = `http://127.0.0.1:${peer}`;
  const clientUrl = `http://127.0.0.1:${client}`;
  const dataDir = join(dir, 'data');
  const args = [
    'restore',
    ...env.storeFlags,
    `--snapstore-temp-directory=${dir}`,
    `--data-dir=${dataDir}`,
    '--name=restored',
    `--initial-cluster=restored=${peerUrl}`,
    `--initial-advertise-peer-urls=${peerUrl}`,
    `--restoration-temp-snapshots-dir=${join(dir, 'restore-tmp')}`,
  ];
  if (toRevision !== undefined) args.push(`--to-revision=${toRevision}`);
  const r = await etcdbrctl(env, args);
  if (r.code !== 0)
    throw new Error(`etcdbrctl restore${toRevision ? ` --to-revision=${toRevision}` : ''} exited ${r.code}: ${r.stderr.slice(-3_000)}`);
  const exits: ExitRecord[] = [];
  const etcd = new ManagedProcess(
    `restored etcd ${label}`,
    env.etcdPath,
    () => [
      '--name=restored',
      `--data-dir=${dataDir}`,
      `--listen-client-urls=${clientUrl}`,
      `--advertise-client-urls=${clientUrl}`,
      `--listen-peer-urls=${peerUrl}`,
      `--initial-advertise-peer-urls=${peerUrl}`,
      '--heartbeat-interval=10',
      '--election-timeout=100',
    ],
    join(dir, 'etcd.log'),
    exits,
  );
  etcd.start();
  try {
    await waitFor(
      async () => {
        if (!etcd.running) throw new Error(`the restored etcd exited (see ${join(dir, 'etcd.log')})`);
        return (
          ((await (await fetch(`${clientUrl}/health`, { signal: AbortSignal.timeout(2_000) })).json()) as { health?: string }).health ===
          'true'
        );
      },
      `the etcd restored into ${dataDir}`,
      60_000,
      100,
    );
  } catch (err) {
    await etcd.close();
    throw err;
  }
  return { clientUrl, stop: () => etcd.close() };
}

/**
 * Check 3: every acknowledged write at or below `rev` is present as written (the last one per key), where
 * `state` is the restored state at `rev`. A later write the workload did not see acknowledged (its answer
 * lost in a fault) may stand in its place, never an older state.
 */
export function checkAcknowledged(log: AckRecord[], state: Map<string, KeyState>, rev: number): { checked: number; lost: string[] } {
  type Last = { seq: number; rev: number; v: string | null };
  const last = new Map<string, Last>();
  const prefixDeletes: Array<{ seq: number; rev: number; p: string }> = [];
  let checked = 0;
  for (const r of log) {
    if (r.outcome !== 'ok' || r.rev === undefined || r.rev > rev) continue;
    for (const e of r.effects) {
      if ('p' in e) prefixDeletes.push({ seq: r.seq, rev: r.rev, p: e.p });
      else if (e.maybe !== true) last.set(e.k, { seq: r.seq, rev: r.rev, v: e.v });
    }
  }
  // Unacknowledged operations, and answered ones' uncertain effects: what they might have done to a key,
  // after which sequence number.
  const maybe = (key: string, afterSeq: number, deleting: boolean): boolean =>
    log.some(
      (r) =>
        r.seq > afterSeq &&
        r.effects.some(
          (e) =>
            (r.outcome === 'unknown' || ('k' in e && e.maybe === true)) &&
            ('p' in e ? deleting && key.startsWith(e.p) : e.k === key && (e.v === null) === deleting),
        ),
    );
  const lost: string[] = [];
  for (const [k, w] of last) {
    // An acknowledged range delete after this write removes the key.
    const pd = prefixDeletes.filter((d) => k.startsWith(d.p) && d.rev > w.rev).at(-1);
    const want: Last = pd ? { seq: pd.seq, rev: pd.rev, v: null } : w;
    checked++;
    const have = state.get(k);
    if (want.v === null) {
      if (have && have.mod <= want.rev)
        lost.push(`key ${JSON.stringify(k)} was deleted at revision ${want.rev} (seq ${want.seq}) but exists with mod ${have.mod}`);
      else if (have && !maybe(k, want.seq, false))
        lost.push(`key ${JSON.stringify(k)} was deleted at ${want.rev} but holds a later write (mod ${have.mod}) nobody sent`);
      continue;
    }
    if (!have) {
      if (!maybe(k, want.seq, true)) lost.push(`key ${JSON.stringify(k)} written at revision ${want.rev} (seq ${want.seq}) is missing`);
    } else if (have.mod === want.rev) {
      if (have.value !== want.v) lost.push(`key ${JSON.stringify(k)} at revision ${want.rev} holds another value than written`);
    } else if (have.mod < want.rev) {
      lost.push(`key ${JSON.stringify(k)} holds revision ${have.mod}, older than its acknowledged write at ${want.rev}`);
    } else if (!maybe(k, want.seq, false)) {
      lost.push(
        `key ${JSON.stringify(k)} holds revision ${have.mod}, later than its last write ${want.rev}, and no unacknowledged write explains it`,
      );
    }
  }
  return { checked, lost };
}

export interface StoredSnapshot {
  kind: 'Full' | 'Incr';
  start: number;
  last: number;
}

/** Every file under `root`, as paths relative to it. */
function filesUnder(root: string): string[] {
  // A temp file may be renamed or removed between the listing and its stat (a save finishing): not a file then.
  return (readdirSync(root, { recursive: true }) as string[]).filter(
    (p) => statSync(join(root, p), { throwIfNoEntry: false })?.isFile() === true,
  );
}

/** The complete snapshots in the store, from the object names alone (upstream's v2 names), in no order. */
export function storedSnapshots(storeRoot: string): StoredSnapshot[] {
  const out: StoredSnapshot[] = [];
  for (const name of filesUnder(storeRoot).map((p) => basename(p))) {
    const m = /^(Full|Incr)-(\d{8})-(\d{8})-\d+/.exec(name);
    if (m && !/\.part$/.test(name)) out.push({ kind: m[1] as 'Full' | 'Incr', start: Number(m[2]), last: Number(m[3]) });
  }
  return out;
}

/**
 * The revisions a restore can reach, as merged [from, to] ranges: each full's revision up to the end of the
 * deltas that continue it without a gap. A gap is legitimate (a leader killed before it uploaded its deltas;
 * the next leader's full covers the gap's end state), but no point in time inside it can be restored.
 */
export function restorableRanges(snaps: readonly StoredSnapshot[]): Array<[number, number]> {
  // As the restore plan joins them: a delta continues the chain when it starts at or before the revision after
  // its end (deltas of two leaders overlap), and the one that reaches furthest is taken.
  const deltas = snaps.filter((s) => s.kind === 'Incr');
  const ranges: Array<[number, number]> = [];
  for (const f of snaps) {
    if (f.kind !== 'Full') continue;
    let end = f.last;
    for (;;) {
      const reach = Math.max(end, ...deltas.filter((d) => d.start <= end + 1 && d.last > end).map((d) => d.last));
      if (reach === end) break;
      end = reach;
    }
    ranges.push([f.last, end]);
  }
  ranges.sort((a, b) => a[0] - b[0]);
  const merged: Array<[number, number]> = [];
  for (const r of ranges) {
    const top = merged.at(-1);
    if (top && r[0] <= top[1] + 1) top[1] = Math.max(top[1], r[1]);
    else merged.push([r[0], r[1]]);
  }
  return merged;
}

/** A revision in [min, max] that `ranges` reach, uniformly among them; undefined when none is. */
export function pickRestorable(
  ranges: ReadonlyArray<readonly [number, number]>,
  min: number,
  max: number,
  int: (lo: number, hi: number) => number,
): number | undefined {
  const clipped = ranges.map(([a, b]) => [Math.max(a, min), Math.min(b, max)] as const).filter(([a, b]) => a <= b);
  const total = clipped.reduce((n, [a, b]) => n + b - a + 1, 0);
  if (total === 0) return undefined;
  let i = int(0, total - 1);
  for (const [a, b] of clipped) {
    if (i <= b - a) return a + i;
    i -= b - a + 1;
  }
  return undefined;
}

/**
 * The revisions check 4 restores around each seam: one before and one after the acknowledged revision at
 * each fault that may move leadership, and both sides of each place where a delta overlaps the objects
 * before it (two writers met there); only those the store reaches, at most `limit`, in ascending order.
 */
export function seamRevisions(
  faultRevisions: readonly number[],
  snaps: readonly StoredSnapshot[],
  ranges: ReadonlyArray<readonly [number, number]>,
  last: number,
  limit = 24,
): number[] {
  const wanted = new Set<number>();
  for (const r of faultRevisions) for (const x of [r - 1, r + 1]) wanted.add(x);
  let covered = 0;
  for (const d of [...snaps].sort((a, b) => a.last - b.last || a.start - b.start)) {
    if (d.kind === 'Incr' && d.start <= covered) for (const x of [d.start - 1, d.start, covered, covered + 1]) wanted.add(x);
    covered = Math.max(covered, d.last);
  }
  const reached = (x: number) => x <= last && ranges.some(([a, b]) => x >= a && x <= b);
  const all = [...wanted].filter(reached).sort((a, b) => a - b);
  if (all.length <= limit) return all;
  // Spread over the run rather than the first `limit`.
  return Array.from({ length: limit }, (_, i) => all[Math.floor((i * all.length) / limit)]!);
}

/** The revisions between the first full and `last` that no restore reaches, as "from–to" strings. */
export function unreachableRanges(ranges: ReadonlyArray<readonly [number, number]>, last: number): string[] {
  const gaps: string[] = [];
  for (let i = 1; i < ranges.length; i++) {
    const from = ranges[i - 1]![1] + 1;
    const to = Math.min(ranges[i]![0] - 1, last);
    if (from <= to) gaps.push(from === to ? String(from) : `${from}–${to}`);
  }
  return gaps;
}

/** Check 5 (store side): objects a finished upload or an interrupted one must not leave behind. */
export function leftoverObjects(storeRoot: string): string[] {
  return filesUnder(storeRoot).filter((p) => /\.part$|\.tmp|\.temp|^\./.test(basename(p)));
}
