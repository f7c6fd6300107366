/**
 * Scrubs backups without restoring them: every object of a chain is downloaded and checked as a restore
 * would use it, so a broken backup is found on an ordinary day instead of during an outage.
 *
 * - a full snapshot: the stored size, decompression, the sha256 trailer, the bbolt structure of the database
 *   (our consistency checker, on the pages as they stream by: no copy on disk), and that it holds at least the revision its name claims;
 * - a delta (delta-check.ts): the stored size, decompression, the sha256 trailer, every event parsed, its
 *   revisions gapless and ending at the revision its name claims, continuing the chain without a gap.
 * Nothing is written to disk and memory stays bounded: the full streams, a delta streams unless it is small
 * enough to hold whole; deltas with up to `maxFetchers` downloads at once.
 */
import { pipeline as pipelineCallback, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createDecompressStream, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { TrailerHash } from '../backup/full-verify.js';
import { BackendStreamChecker, type BackendCheckOutcome } from '../backend/stream-check.js';
import type { Chain, VerificationPlan } from './chains.js';
import { olderChain, planRestore } from '../restorer/plan.js';
import { verifyDelta } from './delta-check.js';
import { DeltaOverlapMismatchError, overlapOf, type PayloadSource } from '../restorer/overlap.js';
import { ByteCounter } from '../backup/byte-counter.js';
import { readProblem, sizeProblem, type ObjectVerdict } from './object-check.js';

export type { ObjectVerdict } from './object-check.js';

export interface ChainVerdict {
  base: string;
  /** Every object of the chain checked out and the names have no gap. */
  ok: boolean;
  /** The newest revision a restore from this chain reaches through objects that checked out (0: none). */
  restorableRevision: number;
  /** When the newest object that checked out was taken (RFC 3339), the recovery point of this chain. */
  restorableTime?: string;
  objects: ObjectVerdict[];
  /** A gap in the chain's names, or the first object not ok: what a restore would stop at. */
  problem?: string;
  /** Not ok only because objects could not be checked (no identity for encrypted objects): nothing found broken. */
  unverifiable?: true;
}

export interface VerifyReport {
  /** The newest chain restores (to its last object). */
  restorable: boolean;
  chains: ChainVerdict[];
  /** The first object (or gap) that breaks a checked chain, newest chain first. */
  firstBroken?: { snapName: string; problem: string };
  /**
   * The first object that could not be checked (encrypted, and no identity opens it), newest chain first. With
   * no `firstBroken`, the verdict is "cannot check", not "broken".
   */
  firstUnverifiable?: { snapName: string; problem: string };
  /** Deltas older than every full snapshot (no restore can use them); not read. */
  orphanDeltas: string[];
  /**
   * When the newest chain's full snapshot is broken: the older chain that goes around it (`restore
   * --base-snapshot=<base>`: its full, its deltas and the deltas after the broken full), as checked.
   */
  wayAround?: ChainVerdict;
  bytes: number;
  durationMs: number;
}

export interface VerifyOptions {
  maxFetchers: number;
  /** Deltas listed at up to this many bytes are read whole (default SMALL_DELTA_BYTES; tests use both paths). */
  smallDeltaBytes?: number;
  signal?: AbortSignal;
  /** Told after each object, for progress logs. */
  onObject?: (verdict: ObjectVerdict) => void;
}

export async function verifyBackups(store: SnapStore, plan: VerificationPlan, opts: VerifyOptions): Promise<VerifyReport> {
  const started = Date.now();
  const chains: ChainVerdict[] = [];
  for (const chain of plan.chains) chains.push(await verifyChain(store, chain, opts));
  const newestFirst = [...chains].reverse();
  const broken = newestFirst.find((c) => !c.ok && c.unverifiable !== true);
  const report: VerifyReport = {
    restorable: chains.length > 0 && chains.at(-1)!.ok,
    chains,
    orphanDeltas: plan.orphanDeltas.map((s) => s.snapName),
    bytes: chains.reduce((n, c) => n + c.objects.reduce((m, o) => m + o.bytes, 0), 0),
    durationMs: 0,
  };
  const unverifiable = newestFirst.flatMap((c) => c.objects).find((o) => o.unverifiable === true);
  if (unverifiable) report.firstUnverifiable = { snapName: unverifiable.snapName, problem: unverifiable.problem ?? 'cannot check' };
  if (broken) {
    const object = broken.objects.find((o) => !o.ok && o.unverifiable !== true);
    report.firstBroken = object
      ? { snapName: object.snapName, problem: object.problem ?? 'failed' }
      : { snapName: broken.base, problem: broken.problem ?? 'failed' };
  }
  report.durationMs = Date.now() - started;
  return report;
}

/**
 * When the newest chain of `report` is broken at its full snapshot: checks the chain a restore with
 * `--base-snapshot` would use instead (the older full, its deltas, and the deltas after the broken full while
 * they go on without a gap) and records it as `report.wayAround`. Nothing to do otherwise.
 */
export async function verifyWayAround(
  store: SnapStore,
  listing: readonly Snapshot[],
  report: VerifyReport,
  opts: VerifyOptions,
): Promise<void> {
  const newest = report.chains.at(-1);
  const newestFull = newest?.objects[0];
  if (!newest || !newestFull || newestFull.ok || newestFull.unverifiable) return;
  const broken = listing.find((s) => s.snapName === newest.base);
  const older = broken && olderChain(listing, broken);
  if (!older) return;
  const plan = planRestore(listing, { baseName: older.base.snapName });
  report.wayAround = await verifyChain(store, { base: plan.base!, deltas: plan.deltas }, opts);
  report.bytes += report.wayAround.objects.reduce((n, o) => n + o.bytes, 0);
}

async function verifyChain(store: SnapStore, chain: Chain, opts: VerifyOptions): Promise<ChainVerdict> {
  // The deltas are checked while the full downloads, so the scrub takes about as long as the downloads,
  // not their sum.
  const fullCheck = verifyFull(store, chain.base, opts.signal);
  const deltaChecks = (async () => {
    const out: ObjectVerdict[] = [];
    const verdicts = mapInOrder(chain.deltas, opts.maxFetchers, (snap, i) => {
      // What the names say comes before (see verifyDelta).
      const covered = i === 0 ? chain.base.lastRevision : chain.deltas[i - 1]!.lastRevision;
      return verifyDelta(store, snap, covered, { signal: opts.signal, smallDeltaBytes: opts.smallDeltaBytes });
    });
    for await (const v of verdicts) out.push(v);
    return out;
  })();
  const [full, deltas] = await Promise.all([fullCheck, deltaChecks]);
  await checkOverlaps(store, chain, deltas, opts.signal);

  const objects: ObjectVerdict[] = [full, ...deltas];
  for (const o of objects) opts.onObject?.(o);
  // A restore reaches the full's name revision (the database may hold a little more; deltas cover that).
  let restorableRevision = full.ok ? chain.base.lastRevision : 0;
  let restorableTime = full.ok ? chain.base.createdOn : undefined;
  let problem = full.ok ? undefined : `full snapshot ${chain.base.snapName}: ${full.problem}`;
  deltas.forEach((v, i) => {
    if (!v.ok) problem ??= `delta snapshot ${v.snapName}: ${v.problem}`;
    if (problem === undefined) {
      restorableRevision = chain.deltas[i]!.lastRevision;
      restorableTime = chain.deltas[i]!.createdOn;
    }
  });
  if (chain.gap) {
    problem ??= `gap in the delta chain: ${chain.gap.snapshot.snapName} starts at revision ${chain.gap.snapshot.startRevision}, but the snapshots before it end at ${chain.gap.expectedStart - 1}`;
  }
  const verdict: ChainVerdict = { base: chain.base.snapName, ok: problem === undefined, restorableRevision, objects };
  if (restorableTime) verdict.restorableTime = restorableTime.toISOString();
  if (problem !== undefined) verdict.problem = problem;
  // Not checked through, and nothing found broken: the chain may well restore with the right identity.
  if (problem !== undefined && !chain.gap && objects.every((o) => o.ok || o.unverifiable === true)) verdict.unverifiable = true;
  return verdict;
}

/**
 * Deltas whose names overlap the one before them (two leaders wrote the same revisions) must hold the same
 * events where they overlap, as a restore applies the shared ones once (restorer/overlap.ts). Each such pair
 * that checked out on its own is read again and compared; a difference makes the later one's verdict name both.
 */
async function checkOverlaps(store: SnapStore, chain: Chain, verdicts: ObjectVerdict[], signal?: AbortSignal): Promise<void> {
  const source = (snap: Snapshot): PayloadSource => ({
    name: snap.snapName,
    lastRevision: snap.lastRevision,
    open: async () => {
      const raw = await store.fetch(snap, undefined, signal ? { signal } : {});
      // Errors of either stream end the one read from (the callback form returns the last stream).
      return pipelineCallback(raw, createDecompressStream(snap.compressionSuffix, snap.snapName), () => undefined);
    },
  });
  for (let i = 1; i < chain.deltas.length; i++) {
    const prev = chain.deltas[i - 1]!;
    const next = chain.deltas[i]!;
    if (next.startRevision > prev.lastRevision || !verdicts[i - 1]!.ok || !verdicts[i]!.ok) continue;
    try {
      await overlapOf(source(prev), source(next));
    } catch (err) {
      const verdict = verdicts[i]!;
      verdict.ok = false;
      Object.assign(verdict, err instanceof DeltaOverlapMismatchError ? { problem: err.message } : readProblem(err));
    }
  }
}

/**
 * The end of a full snapshot's stream: counts the bytes, checks the sha256 trailer and the bbolt structure
 * (the pages as they go by; the trailer lies past the pages in use), all in one stage: at a GiB in 64 KiB
 * chunks, each stream hop less is some twenty thousand callbacks less.
 */
class FullScrubSink extends Writable {
  bytes = 0;
  outcome: BackendCheckOutcome | undefined;
  // Hashed on this thread: a worker thread would add its hand-over (a copy and a message per batch) to the CPU
  // a scrub takes from the node it shares with etcd, for a wall-time gain only on idle cores.
  private readonly trailer: TrailerHash;
  private readonly structure: BackendStreamChecker;

  constructor(what: string) {
    super({ highWaterMark: 1 << 20 });
    this.trailer = new TrailerHash(what, 'full');
    this.structure = new BackendStreamChecker(what);
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.bytes += chunk.length;
    void this.trailer.update(chunk);
    const opening = this.structure.write(chunk);
    if (opening) opening.then(() => cb(), cb);
    else cb();
  }

  override _final(cb: (err?: Error | null) => void): void {
    // The trailer first: a payload whose hash is wrong is reported as such, whatever its pages look like.
    this.trailer
      .finish()
      .then(() => this.structure.finish())
      .then(
        (o) => {
          this.outcome = o;
          cb();
        },
        (err: unknown) => cb(err as Error),
      );
  }
}

async function verifyFull(store: SnapStore, snap: Snapshot, signal?: AbortSignal): Promise<ObjectVerdict> {
  const verdict: ObjectVerdict = { snapName: snap.snapName, kind: 'Full', ok: false, bytes: 0 };
  const sink = new FullScrubSink(`full snapshot ${snap.snapName}`);
  // A compressed object is counted as stored, before its decompression; an uncompressed one by the sink.
  const counter = snap.compressionSuffix === '' ? undefined : new ByteCounter();
  const stored = (): number => counter?.bytes ?? sink.bytes;
  try {
    const source = await store.fetch(snap, undefined, signal ? { signal } : {});
    const options = signal ? { signal } : {};
    if (counter) await pipeline(source, counter, createDecompressStream(snap.compressionSuffix, snap.snapName), sink, options);
    else await pipeline(source, sink, options);
  } catch (err) {
    verdict.bytes = stored();
    Object.assign(verdict, readProblem(err));
    return verdict;
  }
  verdict.bytes = stored();
  const checked = structureVerdict(sink.outcome!);
  verdict.problem = sizeProblem(snap, verdict.bytes) ?? checked.problem;
  if (verdict.problem !== undefined) return verdict;
  verdict.revision = checked.revision!;
  if (verdict.revision < snap.lastRevision) {
    verdict.problem = `its database is at revision ${verdict.revision}, below the revision ${snap.lastRevision} its name claims`;
    return verdict;
  }
  delete verdict.problem;
  verdict.ok = true;
  return verdict;
}

/** What the streamed bbolt check says of a full snapshot's database: a problem, or its store revision. */
function structureVerdict(outcome: BackendCheckOutcome): { problem?: string; revision?: number } {
  if (outcome.kind === 'unreadable') return { problem: `its database is not a consistent bbolt file: ${outcome.error.message}` };
  const { check } = outcome;
  if (!check.ok) {
    const what = check.problems
      .slice(0, 3)
      .map((p) => p.message) // each names its page already
      .join('; ');
    return { problem: `its database is not a consistent bbolt file: ${what}` };
  }
  if (outcome.notEtcd) return { problem: `its database is not an etcd backend: ${outcome.notEtcd.message}` };
  return { revision: outcome.revision! };
}

/** Runs `fn` over `items` with at most `limit` at once and yields the results in the items' order. */
async function* mapInOrder<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): AsyncGenerator<R> {
  const running = new Map<number, Promise<R>>();
  let next = 0;
  const start = (): void => {
    const i = next++;
    const p = fn(items[i]!, i);
    p.catch(() => undefined);
    running.set(i, p);
  };
  try {
    for (let i = 0; i < items.length; i++) {
      while (next < items.length && next < i + Math.max(1, limit)) start();
      const r = await running.get(i)!;
      running.delete(i);
      yield r;
    }
  } finally {
    await Promise.allSettled(running.values());
  }
}
