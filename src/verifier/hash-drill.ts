/**
 * The hash drill: proves that the store would give back what etcd holds. The newest chain is fetched once
 * (local-chain.ts); R is the newest revision both the store and every member have; each member's HashKV(R)
 * (its own backend, with its compaction revision C) is compared with the HashKV computed from the chain for
 * the same C (kv-hash.ts). Equal: the chain restores to exactly what the member has at R (up to CRC-32C).
 * Different: a bisection compares at revisions between C and R, both sides, a few per pass over the chain,
 * until the first revision whose events differ (or the narrowest range etcd's history still allows) is named.
 *
 * Nothing is compared when it cannot be: no full snapshot, a member that compacted past the store's newest
 * revision, or a full snapshot compacted above the member's compaction revision (it lacks history the member
 * still hashes). Those are "inconclusive", with the reason.
 */
import { statfs } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { isEtcdError, type EtcdKvHash } from '../etcd/index.js';
import { planVerification } from './chains.js';
import { readChainRecords } from './chain-records.js';
import { bisectionProbes, drillRevision, narrow, objectsHolding, rangeWords, scratchSpaceProblem, type DiffRange } from './drill-plan.js';
import { KeepIndex, KvHasher } from './kv-hash.js';
import { fetchChain, type LocalChain } from './local-chain.js';
import type { EtcdHashSource } from './member-source.js';

export type { EtcdHashSource } from './member-source.js';

export type DrillOutcome = 'match' | 'mismatch' | 'inconclusive';

export interface MemberComparison {
  endpoint: string;
  /** The member's compaction revision the hashes start from (-1: never compacted). */
  compactRevision: number;
  etcdHash: number;
  storeHash: number;
  equal: boolean;
}

export interface DrillDifference {
  endpoint: string;
  /** The first revisions whose events differ: [fromRevision, toRevision]. */
  fromRevision: number;
  toRevision: number;
  /** The chain's objects that hold them. */
  objects: string[];
  message: string;
}

export interface HashDrillReport {
  outcome: DrillOutcome;
  /** The revision compared at (0 when nothing was). */
  revision: number;
  /** The newest revision of the store's newest chain (0: none). */
  storeRevision: number;
  base?: string;
  deltas: number;
  members: MemberComparison[];
  difference?: DrillDifference;
  /** Why nothing was compared (inconclusive). */
  reason?: string;
  /** Bytes the chain took in the scratch directory. */
  bytes: number;
  durationMs: number;
}

export interface HashDrillOptions {
  /** Where the chain is fetched to (a directory of its own is made there and removed). */
  tempDir: string;
  maxFetchers: number;
  signal?: AbortSignal;
  /** Told of each bisection step (progress logs). */
  onStep?: (range: DiffRange) => void;
}

export async function runHashDrill(store: SnapStore, members: readonly EtcdHashSource[], opts: HashDrillOptions): Promise<HashDrillReport> {
  const started = Date.now();
  const report: HashDrillReport = {
    outcome: 'inconclusive',
    revision: 0,
    storeRevision: 0,
    deltas: 0,
    members: [],
    bytes: 0,
    durationMs: 0,
  };
  const done = (): HashDrillReport => {
    report.durationMs = Date.now() - started;
    return report;
  };
  const chain = planVerification(await store.list(), { all: false }).chains.at(-1);
  if (!chain) {
    report.reason = 'the store holds no full snapshot';
    return done();
  }
  report.base = chain.base.snapName;
  const statuses = await Promise.all(members.map((m) => m.status(opts.signal)));
  const space = await scratchSpace(opts.tempDir);
  const problem = scratchSpaceProblem({
    ...space,
    memberDbBytes: Math.max(0, ...statuses.map((s) => s.dbSize)),
    baseStoredBytes: chain.base.sizeBytes ?? 0,
    deltaStoredBytes: chain.deltas.reduce((n, d) => n + (d.sizeBytes ?? 0), 0),
  });
  if (problem !== undefined) {
    report.reason = `${problem} (${opts.tempDir}; --snapstore-temp-directory)`;
    return done();
  }
  const local = await fetchChain(store, chain, { tempDir: opts.tempDir, maxFetchers: opts.maxFetchers, ...signalOf(opts) });
  try {
    report.deltas = local.deltas.length;
    report.bytes = local.bytes;
    report.storeRevision = local.headRevision;
    const heads = statuses.map((s) => s.revision);
    await compare(local, members, heads, report, opts);
    return done();
  } finally {
    await local.dispose();
  }
}

/** Free bytes and size of the file system that holds `dir` (or its nearest existing parent). */
async function scratchSpace(dir: string): Promise<{ freeBytes: number; fsBytes: number }> {
  for (let d = dir; ; d = dirname(d)) {
    try {
      const s = await statfs(d);
      return { freeBytes: s.bavail * s.bsize, fsBytes: s.blocks * s.bsize };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(d) === d) throw err;
    }
  }
}

function signalOf(opts: HashDrillOptions): { signal?: AbortSignal } {
  return opts.signal ? { signal: opts.signal } : {};
}

async function compare(
  local: LocalChain,
  members: readonly EtcdHashSource[],
  heads: readonly number[],
  report: HashDrillReport,
  opts: HashDrillOptions,
): Promise<void> {
  const revision = drillRevision(local.headRevision, heads);
  const answers: EtcdKvHash[] = [];
  for (const m of members) {
    try {
      answers.push(await m.hashKv(revision, opts.signal));
    } catch (err) {
      if (!isEtcdError(err, 'E_ETCD_COMPACTED')) throw err;
      report.reason = `${m.endpoint} compacted its history past revision ${revision}, the newest the store and etcd both have: take a full snapshot, then drill again`;
      return;
    }
  }
  const above = answers.find((a) => local.baseCompactRevision > Math.max(a.compactRevision, 0));
  if (above) {
    report.reason =
      `the full snapshot ${local.base.snapName} was compacted at revision ${local.baseCompactRevision}, above etcd's compaction revision ` +
      `${above.compactRevision}: it lacks history etcd still hashes (the drill compares once etcd compacted that far)`;
    return;
  }
  report.revision = revision;
  const hasher = new StoreHasher(local, revision, opts.signal);
  for (let i = 0; i < members.length; i++) {
    const a = answers[i]!;
    const [storeHash] = await hasher.hashes(a.compactRevision, [revision]);
    report.members.push({
      endpoint: members[i]!.endpoint,
      compactRevision: a.compactRevision,
      etcdHash: a.hash,
      storeHash: storeHash!,
      equal: a.hash === storeHash,
    });
  }
  const differing = report.members.findIndex((m) => !m.equal);
  if (differing < 0) {
    report.outcome = 'match';
    return;
  }
  report.outcome = 'mismatch';
  report.difference = await locate(local, members[differing]!, report.members[differing]!, revision, hasher, opts);
}

/**
 * Bisects (C, R] for the first revision whose hashes differ. Both sides are asked at a few revisions per step;
 * when the member compacts meanwhile (its answers come with another compaction revision, or refuse), the
 * range found so far is reported.
 */
async function locate(
  local: LocalChain,
  member: EtcdHashSource,
  compared: MemberComparison,
  revision: number,
  hasher: StoreHasher,
  opts: HashDrillOptions,
): Promise<DrillDifference> {
  const c = compared.compactRevision;
  let range: DiffRange = { lo: Math.max(c, 0), hi: revision, loEqual: false };
  let cutShort = false;
  for (;;) {
    const probes = bisectionProbes(range.lo, range.hi);
    if (probes.length === 0) break;
    const etcd = await memberHashes(member, probes, c, opts.signal);
    if (!etcd) {
      cutShort = true;
      break;
    }
    const ours = await hasher.hashes(c, probes);
    range = narrow(
      range,
      probes,
      probes.map((_, j) => etcd[j] === ours[j]),
    );
    opts.onStep?.(range);
  }
  const from = range.loEqual ? range.lo + 1 : 1;
  const objects = objectsHolding(
    local.base,
    local.baseRevision,
    local.deltas.map((d) => d.snap),
    from,
    range.hi,
  );
  const where = objects.length > 0 ? ` (held by ${objects.slice(0, 3).join(', ')}${objects.length > 3 ? ', …' : ''})` : '';
  const hex = (n: number): string => `0x${n.toString(16).padStart(8, '0')}`;
  let message =
    `the store's history differs from etcd's (${member.endpoint}) in ${rangeWords(from, range.hi)}${where}: ` +
    `at revision ${revision} etcd's HashKV is ${hex(compared.etcdHash)}, the store's ${hex(compared.storeHash)}`;
  if (!range.loEqual && c > 0) message += `; etcd compacted at revision ${c}, so at or below it only what its compaction keeps is compared`;
  if (cutShort) message += '; etcd compacted while the drill narrowed it down, so the range is not narrower';
  return { endpoint: member.endpoint, fromRevision: from, toRevision: range.hi, objects, message };
}

/** The member's hashes at `revisions`, or undefined once it answers with another compaction revision or refuses one. */
async function memberHashes(
  member: EtcdHashSource,
  revisions: readonly number[],
  compactRevision: number,
  signal: AbortSignal | undefined,
): Promise<number[] | undefined> {
  const out: number[] = [];
  for (const m of revisions) {
    let a: EtcdKvHash;
    try {
      a = await member.hashKv(m, signal);
    } catch (err) {
      if (isEtcdError(err, 'E_ETCD_COMPACTED')) return undefined;
      throw err;
    }
    if (a.compactRevision !== compactRevision) return undefined;
    out.push(a.hash);
  }
  return out;
}

/** The chain's hashes, with pass one's index kept per compaction revision (a bisection asks again and again). */
class StoreHasher {
  private readonly keeps = new Map<number, KeepIndex>();

  constructor(
    private readonly local: LocalChain,
    /** The largest revision ever asked for. */
    private readonly upTo: number,
    private readonly signal: AbortSignal | undefined,
  ) {}

  async hashes(compactRevision: number, revisions: readonly number[]): Promise<number[]> {
    const keep = compactRevision > 0 ? await this.keepIndex(compactRevision) : undefined;
    const hasher = new KvHasher(compactRevision, revisions, keep);
    await readChainRecords(this.local, revisions.at(-1)!, (r) => hasher.feed(r), this.signal);
    return hasher.hashes();
  }

  private async keepIndex(compactRevision: number): Promise<KeepIndex> {
    let keep = this.keeps.get(compactRevision);
    if (keep) return keep;
    keep = new KeepIndex(compactRevision, Math.max(this.upTo, compactRevision));
    const k = keep;
    await readChainRecords(this.local, k.upTo, (r) => k.feed(r), this.signal);
    k.finish();
    this.keeps.set(compactRevision, k);
    return k;
  }
}
