/**
 * Offline delta replay: the delta revisions go straight into the restored member's bbolt backend, with no
 * etcd running. The base backend (fresh from etcd's own snapshot restore) is streamed bucket by bucket into
 * a new, compact file; the `key` bucket gets the deltas' revisions appended after the base's (they are all
 * newer, so they arrive in key order). etcd rebuilds its index from that bucket when it starts, and takes
 * its current revision from the last key. Every other bucket (meta with its consistent index, leases, auth,
 * members) is copied as it is, the `lease` bucket with the leases a restore creates added (restored-leases.ts):
 * the result is the database the online replay produces, not a similar one.
 *
 * The new file is written beside the backend and only renamed over it once complete (and fsynced, unless the
 * caller fsyncs the data dir itself: `syncResult`); the caller checks it before the data dir is put in place.
 * Any failure leaves the base backend untouched.
 */
import { CodedError } from '../errors.js';
import { createReadStream } from 'node:fs';
import { rename, rm, stat } from 'node:fs/promises';
import type { Logger, Snapshot } from '@etcdbrctl/snapstore';
import type { DeltaEvent } from '../backup/delta-format.js';
import { DELTA_READ_BYTES, DeltaPayloadDecoder } from '../backup/delta-parse.js';
import { BoltDB } from '../bbolt/db.js';
import { storeRevisionOf } from '../backend/store-revision.js';
import { BoltWriter, type WriterEntry } from '../bbolt/writer.js';
import { KEY_BUCKET, LEASE_BUCKET, META_BUCKET } from '../backend/schema.js';
import { RevisionMismatchError } from './apply.js';
import { copyEntries, noEntries, OfflineReplayNotApplicable, topLevelBuckets, type NamedBucket } from './backend-copy.js';
import { noLeases, withCreatedLeases, type LeaseCounts } from './lease-bucket.js';
import { LeaseRefs, leasesToCreate } from './restored-leases.js';
import type { CompactionIndex } from './compaction.js';
import type { FetchedDelta } from './fetch.js';
import { KeyStates } from './key-states.js';
import { encodePutValue, encodeTombstoneValue, revisionKey } from './mvcc.js';
import { fetchAll, prepareCompaction, withCompaction, type PreparedCompaction } from './offline-compaction.js';
import { compactsForQuota, passesQuota, type QuotaRule } from './quota-rule.js';

/** The deltas are not a history etcd could have produced (auto then replays online, which decides). */
export class InconsistentDeltaError extends CodedError {
  override readonly name = 'InconsistentDeltaError';
  readonly code = 'E_DELTA_INCONSISTENT';
}

export { OfflineReplayNotApplicable } from './backend-copy.js';

export interface OfflineReplayInput {
  /** The backend of the restored data dir (`<dataDir>.part/member/snap/db`). */
  dbPath: string;
  deltas: AsyncIterable<FetchedDelta> | Iterable<FetchedDelta>;
  /** Revisions above this are not applied (point-in-time restore). */
  targetRevision: number;
  logger: Logger;
  /** Called after each delta with its snapshot and the revision reached (progress logs). */
  onDelta?: (snap: Snapshot, revision: number) => void;
  /** Called when a delta's first events continue the previous delta's last revision (see OpenRevision). */
  onContinued?: (snap: Snapshot, revision: number) => void;
  /**
   * Compact while writing, as etcd's compaction at this revision would (see compaction.ts); a revision above
   * the result's compacts at the result's revision. Reads the base's `key` bucket and the deltas once more
   * first (the deltas are all fetched to disk before writing starts). Nothing is compacted when the base was
   * already compacted at or above it.
   */
  compactRevision?: number;
  /**
   * The quota rule (quota-rule.ts): when the chain passes it, the result is compacted at its revision
   * (whatever `compactRevision` says). Every delta stays on disk until the replay ends: without
   * `compactRevision` the backend is written as the deltas arrive and written again, compacted, should the
   * chain pass; with it, every delta is fetched before writing starts.
   */
  quotaRule?: QuotaRule;
  /**
   * The restore's signal: checked before each delta and after each read of a delta or batch of the base's
   * entries, so an abort (SIGINT, SIGTERM) ends even a long replay at once, with the signal's reason.
   */
  signal?: AbortSignal;
  /**
   * Keep each key's lease (a restore; restored-leases.ts): the keys are written with it, and the leases the
   * restored revision's keys name are created in the `lease` bucket with the TTL a delta recorded, else
   * `defaultTtlSeconds`. Without it the keys are written without their lease (as upstream's restore and compact).
   */
  leases?: { defaultTtlSeconds: number };
  /**
   * fsync the new backend before it is renamed over the base (default true). A restore passes false: it
   * fsyncs the whole data dir while it checks the result (check.ts), before anything is put in place, so the
   * disk's wait overlaps the check's CPU instead of coming before it.
   */
  syncResult?: boolean;
}

export interface OfflineReplayResult {
  /** The store revision of the result. */
  revision: number;
  /** The revision of the base backend. */
  baseRevision: number;
  deltasApplied: number;
  revisionsApplied: number;
  eventsApplied: number;
  /** Size of the new backend file. */
  bytes: number;
  /** The revision the result is compacted at by this replay (undefined: not compacted by it). */
  compactRevision?: number;
  /** With `leases`: what the `lease` bucket got. */
  leases?: LeaseCounts;
}

export async function replayDeltasOffline(input: OfflineReplayInput): Promise<OfflineReplayResult> {
  const { dbPath, logger } = input;
  const db = await BoltDB.open(dbPath);
  /** Delta files this replay holds and has not removed (they are removed at the end whatever happens). */
  const held: FetchedDelta[] = [];
  /** The deltas' source while the streamed write below reads from it; closed (its downloads too) on failure. */
  let source: AsyncIterator<FetchedDelta> | undefined;
  try {
    const buckets = await topLevelBuckets(db);
    const keyBucket = buckets.find((b) => b.name.equals(KEY_BUCKET));
    const metaBucket = buckets.find((b) => b.name.equals(META_BUCKET));
    if (!keyBucket || !metaBucket) {
      throw new OfflineReplayNotApplicable(`${dbPath}: no "key" or "meta" bucket: not an etcd v3 backend this replay knows`);
    }
    const baseRevision = await storeRevisionOf(db);
    const base: Base = { db, buckets, baseRevision };
    let compactRevision = input.compactRevision;
    let fetched: FetchedDelta[] | undefined;
    if (input.quotaRule && compactRevision === undefined) {
      // The quota rule decides from the size of every delta, but a chain that passes it is rare: the backend
      // is written while the deltas are still being fetched (fetch and write overlap, on two cores), their
      // files kept, until a delta makes the chain pass. Then that write is dropped, the rest fetched, and the
      // chain written compacted from the same files, as if every delta had been fetched before deciding: the
      // rule depends on the sizes alone, and once a part of the chain passes, the whole chain does.
      const deltas = iteratorOf(input.deltas);
      source = deltas;
      try {
        const result = await writeBackend(
          base,
          { ...input, deltas: untilQuota(deltas, input.quotaRule, held) },
          new KeyStates(),
          undefined,
          true,
        );
        source = undefined;
        return result;
      } catch (err) {
        if (!(err instanceof QuotaPassed)) throw err;
      }
      for (let next = await deltas.next(); !next.done; next = await deltas.next()) held.push(next.value);
      source = undefined;
      fetched = held;
      compactRevision = input.targetRevision;
      logQuotaPassed(input);
    } else if (input.quotaRule) {
      // A compaction asked for: the quota rule may move it to the newest revision, so every delta is fetched first.
      fetched = await fetchAll(input.deltas);
      held.push(...fetched);
      if (await compactsForQuota(input.quotaRule, fetched)) {
        compactRevision = input.targetRevision;
        logQuotaPassed(input);
      }
    }
    // One numbering of the keys for the compaction's first pass and the replay's checks (key-states.ts).
    const keys = new KeyStates();
    let compaction: PreparedCompaction | undefined;
    if (compactRevision !== undefined) {
      // A compaction notes each delta while the next ones are fetched.
      compaction = await prepareCompaction(
        db,
        keyBucket.bucket,
        metaBucket.bucket,
        baseRevision,
        { targetRevision: input.targetRevision, deltas: fetched ?? input.deltas },
        compactRevision,
        keys,
      );
      if (!fetched) held.push(...compaction.deltas);
      logger.info({ deltas: compaction.deltas.length }, 'delta snapshots fetched to disk: writing the backend');
    }
    return await writeBackend(base, { ...input, deltas: compaction?.deltas ?? fetched ?? input.deltas }, keys, compaction?.index, false);
  } finally {
    await source?.return?.();
    // Deltas fetched and not replayed (a failure before the end), or kept by the streamed write.
    for (const d of held) await rm(d.file, { force: true });
    await db.close();
  }
}

function logQuotaPassed(input: OfflineReplayInput): void {
  input.logger.info(
    { quotaBytes: input.quotaRule!.quotaBytes, targetRevision: input.targetRevision },
    'base and deltas pass 80 % of the quota: compacting the restored history at its newest revision',
  );
}

/** Thrown into the streamed write by `untilQuota` when a delta makes the chain pass the quota rule. */
class QuotaPassed extends CodedError {
  override readonly name = 'QuotaPassed';
  readonly code = 'E_QUOTA_PASSED';
}

function iteratorOf<T>(items: AsyncIterable<T> | Iterable<T>): AsyncIterator<T> {
  if (Symbol.asyncIterator in items) return items[Symbol.asyncIterator]();
  const it = items[Symbol.iterator]();
  return {
    next: () => Promise.resolve(it.next()),
    return: (value?: unknown) => Promise.resolve(it.return?.(value) ?? { done: true, value: undefined }),
  };
}

/**
 * The deltas of `source`, each added to `held` (its file stays until the replay ends), until the chain passes
 * the quota rule: then QuotaPassed is thrown, and `source` is left open for the rest (a `for await` over
 * `source` itself would close it on the throw, and with it the downloads in flight).
 */
async function* untilQuota(source: AsyncIterator<FetchedDelta>, rule: QuotaRule, held: FetchedDelta[]): AsyncGenerator<FetchedDelta> {
  let bytes = 0;
  for (let next = await source.next(); !next.done; next = await source.next()) {
    held.push(next.value);
    bytes += (await stat(next.value.file)).size;
    if (passesQuota(rule, bytes)) throw new QuotaPassed('the chain passes 80 % of the quota');
    yield next.value;
  }
}

interface Base {
  db: BoltDB;
  buckets: NamedBucket[];
  baseRevision: number;
}

/**
 * Writes the new backend beside the base one (every bucket copied, the `key` bucket with the deltas'
 * revisions appended, all through `compaction` when given) and renames it over the base once complete.
 * `keepFiles`: the delta files are left for the caller to remove (else each is removed once read).
 */
async function writeBackend(
  base: Base,
  input: OfflineReplayInput,
  keys: KeyStates,
  compaction: CompactionIndex | undefined,
  keepFiles: boolean,
): Promise<OfflineReplayResult> {
  const { db, buckets, baseRevision } = base;
  const { dbPath, logger } = input;
  const tmp = `${dbPath}.offline-replay`;
  const leaseRefs = input.leases ? new LeaseRefs<number>() : undefined;
  const leaseCounts = noLeases();
  const replay = new DeltaRevisions(baseRevision, input, keys, compaction, keepFiles, leaseRefs);
  let writer: BoltWriter | undefined = await BoltWriter.create(tmp, {
    pageSize: db.pageSize,
    txid: Math.max(2, db.meta.txid + 1),
    sync: input.syncResult !== false,
  });
  try {
    for (const b of leaseRefs ? withLeaseBucket(buckets) : buckets) {
      let entries: AsyncIterable<WriterEntry[]> = b.bucket ? copyEntries(db, b as NamedBucket, input.signal) : noEntries();
      if (compaction) entries = withCompaction(b.name, entries, compaction);
      // The replay itself leaves out the delta revisions the compaction removes.
      if (b.name.equals(KEY_BUCKET)) entries = concat(entries, replay.entries());
      // After the `key` bucket (bbolt's name order): the replay knows by now which leases the keys name.
      if (leaseRefs && b.name.equals(LEASE_BUCKET)) {
        const defaultTtl = input.leases!.defaultTtlSeconds;
        entries = withCreatedLeases(entries, () => leasesToCreate(leaseRefs, () => false, defaultTtl), leaseCounts);
      }
      await writer.writeBucket(b.name, entries, b.sequence);
    }
    await writer.finish();
    writer = undefined;
    const bytes = (await stat(tmp)).size;
    await rename(tmp, dbPath);
    logger.info(
      {
        baseRevision,
        revision: replay.revision,
        deltas: replay.deltasApplied,
        revisions: replay.revisionsApplied,
        bytes,
        ...(compaction ? { compactRevision: compaction.revision, compactedKeys: compaction.distinctKeys } : {}),
        ...(leaseRefs ? { leases: leaseCounts } : {}),
      },
      'delta snapshots replayed offline into the backend',
    );
    return {
      revision: replay.revision,
      baseRevision,
      deltasApplied: replay.deltasApplied,
      revisionsApplied: replay.revisionsApplied,
      eventsApplied: replay.eventsApplied,
      bytes,
      ...(compaction ? { compactRevision: compaction.revision } : {}),
      ...(leaseRefs ? { leases: leaseCounts } : {}),
    };
  } finally {
    await writer?.abort();
    await rm(tmp, { force: true });
  }
}

/** A bucket to write: one of the base's, or (without `bucket`) a new, empty one. */
type BucketToWrite = Omit<NamedBucket, 'bucket'> & { bucket?: NamedBucket['bucket'] };

/** The base's buckets, plus an empty `lease` bucket in its place by name when the base has none. */
function withLeaseBucket(buckets: readonly NamedBucket[]): BucketToWrite[] {
  if (buckets.some((b) => b.name.equals(LEASE_BUCKET))) return [...buckets];
  const out: BucketToWrite[] = [...buckets, { name: LEASE_BUCKET, sequence: 0 }];
  return out.sort((a, b) => Buffer.compare(a.name, b.name));
}

async function* concat<T>(...parts: AsyncIterable<T>[]): AsyncGenerator<T> {
  for (const p of parts) yield* p;
}

/**
 * The deltas as `key` bucket entries: events above the base revision, up to the target, one revision at a
 * time and gapless (the same checks, and messages, as the online replay), each event's create revision and
 * version checked against what this replay wrote before for the same key.
 */
class DeltaRevisions {
  revision: number;
  deltasApplied = 0;
  revisionsApplied = 0;
  eventsApplied = 0;
  /** The revision whose events are being written (0 before the first delta event) and its next sub revision. */
  private openRevision = 0;
  private sub = 0;

  constructor(
    private readonly baseRevision: number,
    private readonly input: OfflineReplayInput,
    private readonly keys: KeyStates,
    /** Events it removes are checked and counted, but not written. */
    private readonly compaction: CompactionIndex | undefined,
    /** Leave each delta's file for the caller to remove (else it is removed once read). */
    private readonly keepFiles = false,
    /** Keeps track of the keys' leases, by the key's row (restored-leases.ts); none: leases are left out. */
    private readonly leases?: LeaseRefs<number>,
  ) {
    this.revision = baseRevision;
  }

  async *entries(): AsyncGenerator<WriterEntry[]> {
    for await (const { snap, file, skipEvents } of this.input.deltas) {
      const what = `delta snapshot ${snap.snapName}`;
      try {
        this.input.signal?.throwIfAborted();
        // Past the target; a delta named from the revision after it may still hold the rest of its transaction.
        if (this.revision > this.input.targetRevision || snap.startRevision > this.input.targetRevision + 1) continue;
        yield* this.deltaEntries(snap, file, what, skipEvents ?? 0);
      } finally {
        if (!this.keepFiles) await rm(file, { force: true });
      }
      const expected = Math.min(snap.lastRevision, this.input.targetRevision);
      if (this.revision < expected) {
        throw new RevisionMismatchError(
          `mismatched event revision while applying delta snapshot ${snap.snapName}, expected ${expected} but applied ${this.revision}`,
        );
      }
      this.deltasApplied++;
      this.input.onDelta?.(snap, this.revision);
    }
  }

  /** The delta's entries, one batch per read of its file (one await per batch, not per event). */
  private async *deltaEntries(snap: Snapshot, file: string, what: string, skipEvents: number): AsyncGenerator<WriterEntry[]> {
    // The fetch checked the file's sha256 on its way to disk; the replay has no use for the events' times.
    // Compacting, most events are checked but not written: their values are decoded only when written.
    // Events shared with the delta before (overlap.ts) were written from that one.
    const decoder = new DeltaPayloadDecoder(what, { hashChecked: true, times: false, values: this.compaction === undefined, skipEvents });
    // The revision being written stays open across deltas: a snapshotter that cut inside a transaction
    // (the Go one does at its memory limit) left the rest of that revision at the start of the next delta.
    let first = true;
    /** An event above the target was met: the rest of the delta is not needed. */
    let past = false;
    let batch: WriterEntry[] = [];
    const take = (ev: DeltaEvent): void => {
      if (past || (ev.modRevision <= this.revision && ev.modRevision !== this.openRevision)) return;
      if (ev.modRevision > this.input.targetRevision) {
        past = true;
        return;
      }
      if (ev.modRevision !== this.openRevision) {
        if (ev.modRevision !== this.revision + 1) {
          throw new RevisionMismatchError(
            `${what}: mismatched event revision while applying delta snapshot, expected ${this.revision + 1} but the next event is at ${ev.modRevision}`,
          );
        }
        this.openRevision = ev.modRevision;
        this.revision = ev.modRevision;
        this.revisionsApplied++;
        this.sub = 0;
      } else if (first) {
        this.input.onContinued?.(snap, ev.modRevision);
      }
      first = false;
      const entry = this.entry(ev, this.sub++, what, decoder);
      if (entry) batch.push(entry);
      this.eventsApplied++;
    };
    // 64 KiB reads: a chunk's events are turned into entries at once, and a 1 MiB chunk's thousands of
    // events outlived V8's young generation, so the old one filled with dead events (1M revisions: +90 MB RSS).
    const input = createReadStream(file, { highWaterMark: DELTA_READ_BYTES });
    try {
      for await (const chunk of input as AsyncIterable<Buffer>) {
        this.input.signal?.throwIfAborted();
        decoder.write(chunk, take);
        if (batch.length > 0) {
          yield batch;
          batch = [];
        }
        if (past) return;
      }
      decoder.end();
    } finally {
      input.destroy();
    }
  }

  /** Checks the event against the key's state and records it; its entry, or undefined when the compaction removes it. */
  private entry(ev: DeltaEvent, sub: number, what: string, decoder: DeltaPayloadDecoder): WriterEntry | undefined {
    // A key's state is updated in place (key-states.ts): a new object per event would leave a million dead
    // objects in the old generation on a million-revision chain, and V8 grows the heap rather than collect them.
    const id = ev.key.toString('latin1');
    const row = this.keys.row(id);
    const seen = this.keys.seen(row);
    const live = this.keys.live(row);
    if (ev.type === 'DELETE') {
      if (seen && !live) {
        throw new InconsistentDeltaError(
          `${what}: revision ${ev.modRevision} deletes key ${JSON.stringify(ev.key.toString())}, which is already deleted`,
        );
      }
      const at = this.keys.delete(id, row);
      this.leases?.delete(at);
      if (this.compaction && !this.compaction.keepsEvent(at, ev.modRevision, true)) return undefined;
      return { key: revisionKey(ev.modRevision, sub, true), value: encodeTombstoneValue(ev.key) };
    }
    const fresh = !live && (seen || ev.version === 1);
    const consistent = live
      ? ev.createRevision === this.keys.createRevision(row) && ev.version === this.keys.version(row) + 1
      : fresh
        ? ev.createRevision === ev.modRevision && ev.version === 1
        : ev.createRevision > 0 && ev.createRevision <= this.baseRevision && ev.version > 1;
    if (!consistent || ev.createRevision > ev.modRevision) {
      throw new InconsistentDeltaError(
        `${what}: revision ${ev.modRevision} puts key ${JSON.stringify(ev.key.toString())} with create revision ${ev.createRevision} ` +
          `and version ${ev.version}, which etcd would not have written after what came before`,
      );
    }
    const at = this.keys.put(id, row, ev.createRevision, ev.version);
    this.leases?.put(at, ev.lease, ev.leaseTTL);
    // Decided before the value is encoded: a compaction at the head removes most events of a long chain.
    if (this.compaction && !this.compaction.keepsEvent(at, ev.modRevision, false)) return undefined;
    return {
      key: revisionKey(ev.modRevision, sub, false),
      value: encodePutValue({
        key: ev.key,
        createRevision: ev.createRevision,
        modRevision: ev.modRevision,
        version: ev.version,
        value: decoder.valueOf(ev),
        lease: this.leases ? ev.lease : '0',
      }),
    };
  }
}
