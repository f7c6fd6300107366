/**
 * The nemesis's plan, decided from the seed alone before anything runs (pure): which fault, when, against
 * whom, for how long. The same seed, duration, topology and store give the same schedule, so a failing run
 * replays; faults overlap (each runs for its own duration while the next ones start).
 */
import { createPrng } from './prng.js';

export type Topology = 'single' | 'three';
export type StoreKind = 'local' | 's3';

export type FaultKind =
  | 'sidecar-sigkill'
  | 'sidecar-sigterm'
  | 'etcd-sigkill'
  | 'leader-move'
  | 'store-refuse'
  | 'store-reset'
  | 'store-stall'
  | 'store-latency'
  | 'store-5xx'
  | 'data-dir-lost'
  | 'data-dir-corrupt'
  | 'temp-full';

/** Who a member fault hits: a fixed member, or whoever is leader / a follower when it fires (three members). */
export type Target = { member: number } | { role: 'leader' | 'follower' };

export interface Fault {
  /** Milliseconds after the start of the faulty phase. */
  at: number;
  kind: FaultKind;
  target: Target;
  /** How long the fault lasts: a killed process stays down, a store fault stays on, this long. */
  durationMs: number;
  /** store-5xx: how many requests are answered 500/503; store-latency: the added delay in ms; data-dir-corrupt: 0 the db, 1 the WAL. */
  amount: number;
}

export interface ScheduleOptions {
  seed: number;
  durationMs: number;
  topology: Topology;
  store: StoreKind;
}

/** The kinds a run can draw from, with their weights. */
export function faultMenu(topology: Topology, store: StoreKind): Array<readonly [FaultKind, number]> {
  const menu: Array<readonly [FaultKind, number]> = [
    ['sidecar-sigkill', 4],
    ['sidecar-sigterm', 2],
    ['etcd-sigkill', 3],
  ];
  if (store === 's3') menu.push(['store-refuse', 1], ['store-reset', 2], ['store-stall', 1], ['store-latency', 1], ['store-5xx', 2]);
  if (topology === 'three') menu.push(['leader-move', 2], ['data-dir-lost', 1], ['data-dir-corrupt', 1]);
  return menu;
}

export function buildSchedule(opts: ScheduleOptions): Fault[] {
  const rng = createPrng(opts.seed);
  const menu = faultMenu(opts.topology, opts.store);
  const faults: Fault[] = [];
  // The first fault comes after a few seconds of undisturbed writes, so the initial full exists in most runs.
  let at = rng.int(3_000, 6_000);
  while (at < opts.durationMs) {
    const kind = rng.weighted(menu);
    const target: Target =
      opts.topology === 'single'
        ? { member: 0 }
        : rng.next() < 0.5
          ? { role: rng.pick(['leader', 'follower'] as const) }
          : { member: rng.int(0, 2) };
    const durationMs = kind === 'store-stall' ? rng.int(2_000, 12_000) : rng.int(300, 5_000);
    const amount =
      kind === 'store-5xx' ? rng.int(1, 8) : kind === 'store-latency' ? rng.int(50, 800) : kind === 'data-dir-corrupt' ? rng.int(0, 1) : 0;
    faults.push({ at, kind, target, durationMs, amount });
    at += rng.int(1_500, 7_000);
  }
  // The sidecar's temp dir filled up, drawn from a stream of its own so the faults above stay what they were
  // for every seed before this kind existed.
  const tmp = createPrng(opts.seed ^ 0x7e3f_1a2b);
  for (let t = tmp.int(10_000, 40_000); t < opts.durationMs; t += tmp.int(20_000, 60_000)) {
    faults.push({
      at: t,
      kind: 'temp-full',
      target: { member: opts.topology === 'single' ? 0 : tmp.int(0, 2) },
      durationMs: tmp.int(2_000, 10_000),
      amount: 0,
    });
  }
  return faults.sort((a, b) => a.at - b.at);
}

export function describeFault(f: Fault): string {
  const who = 'member' in f.target ? `m${f.target.member}` : f.target.role;
  const extra = f.amount ? ` amount=${f.amount}` : '';
  return `+${(f.at / 1000).toFixed(1)}s ${f.kind} ${who} for ${f.durationMs}ms${extra}`;
}
