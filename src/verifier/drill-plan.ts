/**
 * The hash drill's decisions, apart from its effects: the revision to compare at, the revisions a bisection
 * step asks for, how a step's answers narrow the range, and which objects of the chain hold a range.
 */
import type { Snapshot } from '@etcdbrctl/snapstore';

/** Revisions a bisection step compares at once: a range shrinks fourfold per pass over the chain. */
export const PROBES_PER_STEP = 3;

/** The newest revision both the store and every member have. */
export function drillRevision(storeHead: number, memberHeads: readonly number[]): number {
  return Math.min(storeHead, ...memberHeads);
}

/**
 * Up to `count` revisions strictly between `lo` and `hi`, evenly spaced and ascending (none when they are
 * adjacent).
 */
export function bisectionProbes(lo: number, hi: number, count = PROBES_PER_STEP): number[] {
  const gap = hi - lo;
  if (gap <= 1) return [];
  const n = Math.min(count, gap - 1);
  const out: number[] = [];
  for (let i = 1; i <= n; i++) {
    const m = lo + Math.floor((gap * i) / (n + 1));
    if (m > lo && m < hi && m !== out.at(-1)) out.push(m);
  }
  return out;
}

/** A range (lo, hi]: the hashes differ at `hi`; at `lo` they were seen equal (`loEqual`) or never compared. */
export interface DiffRange {
  lo: number;
  hi: number;
  loEqual: boolean;
}

/** The range after a step: the first probe that differs is the new end, the probe before it the new start. */
export function narrow(range: DiffRange, probes: readonly number[], equal: readonly boolean[]): DiffRange {
  const first = equal.findIndex((e) => !e);
  if (first < 0) return probes.length === 0 ? range : { lo: probes.at(-1)!, hi: range.hi, loEqual: true };
  if (first === 0) return { ...range, hi: probes[0]! };
  return { lo: probes[first - 1]!, hi: probes[first]!, loEqual: true };
}

/** The chain's objects that hold revisions in [from, to]: the full when it reaches `from`, and the deltas that overlap. */
export function objectsHolding(base: Snapshot, baseRevision: number, deltas: readonly Snapshot[], from: number, to: number): string[] {
  const out: string[] = [];
  if (from <= baseRevision) out.push(base.snapName);
  for (const d of deltas) if (d.lastRevision >= from && d.startRevision <= to && d.lastRevision > baseRevision) out.push(d.snapName);
  return out;
}

/** The revisions named by a final range, as words. */
export function rangeWords(from: number, to: number): string {
  return from === to ? `revision ${to}` : `revisions ${from} to ${to}`;
}

/** What the scratch space check looks at (bytes). */
export interface ScratchSpace {
  /** Free for this process on the temp directory's file system, and that file system's size. */
  freeBytes: number;
  fsBytes: number;
  /** The largest backend file among the members: the full's database is at most about that. */
  memberDbBytes: number;
  /** The chain's objects as stored (the full, the deltas' sum). */
  baseStoredBytes: number;
  deltaStoredBytes: number;
}

/** A delta's JSON is this many times its stored (compressed) size at most, as the drill reckons. */
export const DELTA_EXPANSION = 8;

/**
 * Why the chain must not be fetched into the temp directory, or undefined when it may: the directory is
 * usually on the etcd data volume (etcd-druid's `/var/etcd/data/temp`), which must not fill up. The fetch
 * takes about the database and the deltas' JSON; a twentieth of the file system (at least 64 MiB) stays free.
 */
export function scratchSpaceProblem(s: ScratchSpace): string | undefined {
  const needed = Math.max(s.memberDbBytes, s.baseStoredBytes) + DELTA_EXPANSION * s.deltaStoredBytes;
  const reserve = Math.max(s.fsBytes / 20, 64 * 1024 * 1024);
  if (s.freeBytes - needed >= reserve) return undefined;
  const mib = (n: number): string => `${Math.ceil(n / 1024 / 1024)} MiB`;
  return `the chain needs about ${mib(needed)} in the temp directory and ${mib(reserve)} must stay free there, but only ${mib(s.freeBytes)} are free`;
}
