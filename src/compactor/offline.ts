/**
 * The compacted backend written without etcd: the newest full snapshot's database (fetched, its sha256
 * trailer checked and cut off) is rewritten by the offline writer with the deltas after it appended and
 * everything a compaction at the head revision removes left out, `meta` recording that compaction as etcd
 * does (src/restorer/compaction.ts). The result is compact by construction: no defragmentation needed.
 * It is checked with our bbolt consistency check before anyone uploads it.
 *
 * The keys keep their lease, and the `lease` bucket gets the leases the head revision's keys name, as a
 * restore writes them (src/restorer/restored-leases.ts: the full's record, else the TTL a delta recorded,
 * else `--restored-lease-ttl`); upstream's compaction writes the deltas' keys without their lease.
 * Every other bucket (members, auth, the consistent index in `meta`) is copied from the full as it is, so
 * the file is what etcd's `snapshot save` of that member would have held after a restore of ours, compaction
 * and defragmentation: a restore of it (etcd's own or ours) rewrites membership as for any full snapshot.
 */
import { CodedError, EtcdbrError, errorCode } from '../errors.js';
import { createWriteStream } from 'node:fs';
import { stat, truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createDecompressStream, type Logger, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { FullSnapshotIntegrityError, FullSnapshotVerifier, SHA256_SIZE } from '../backup/full-verify.js';
import { BoltError } from '../bbolt/db.js';
import { fetchDeltasInOrder } from '../restorer/fetch.js';
import { replayDeltasOffline } from '../restorer/offline-replay.js';
import { noLeases, type LeaseCounts } from '../restorer/lease-bucket.js';
import type { RestorePlan } from '../restorer/plan.js';
import { logOverlap } from '../restorer/replay-progress.js';
import { verifyRestoredBackend } from '../restorer/verify-backend.js';
import { namingWorkDir, TEMP_DIR_FLAG } from '../restorer/work-dirs.js';

/** The full snapshot the compaction starts from is corrupt (its trailer, its codec or its bbolt structure). */
export class CorruptFullSnapshotError extends CodedError {
  override readonly name = 'CorruptFullSnapshotError';
  readonly code = 'E_CORRUPT';
  constructor(
    readonly snapshot: Snapshot,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

export interface OfflineCompactionOptions {
  /** A directory of this run's own: the database and the fetched deltas go there. */
  scratch: string;
  maxFetchers: number;
  /** `--skip-hash-check`: take the full without checking its sha256 trailer (as etcd's restore does then). */
  skipHashCheck: boolean;
  /** `--restored-lease-ttl` in seconds: the TTL of a lease the keys name whose TTL neither the full nor a delta holds. */
  restoredLeaseTtlSeconds: number;
  logger: Logger;
  signal?: AbortSignal;
}

export interface OfflineCompaction {
  /** The compacted backend (database bytes only, no trailer), checked. */
  dbPath: string;
  /** The head revision: the store revision of the result. */
  revision: number;
  /** The revision the result records as compacted (the head, or the full's own compaction when newer). */
  compactRevision: number | undefined;
  deltasApplied: number;
  revisionsApplied: number;
  /** Size of the compacted backend file. */
  bytes: number;
  /** What the `lease` bucket got: the full's leases kept, the leases created with a recorded or the default TTL. */
  leases: LeaseCounts;
}

/**
 * Writes the plan's chain compacted at its head revision into `<scratch>/db`. Throws CorruptFullSnapshotError for a
 * full that is corrupt or not a bbolt database, the replay's typed errors for a bad delta
 * (OfflineReplayNotApplicable / InconsistentDeltaError mean the writer cannot write this chain), and
 * RestoredBackendError when the result fails the bbolt check. Nothing outside `scratch` is written.
 */
export async function writeCompactedBackend(
  store: SnapStore,
  plan: RestorePlan,
  opts: OfflineCompactionOptions,
): Promise<OfflineCompaction> {
  const base = plan.base;
  if (!base) throw new EtcdbrError('E_INTERNAL', 'offline compaction without a base snapshot');
  const { signal, logger } = opts;
  const dbPath = join(opts.scratch, 'db');
  await fetchFullDatabase(store, base, dbPath, opts.skipHashCheck, signal);
  let replayed;
  try {
    replayed = await replayDeltasOffline({
      dbPath,
      deltas: untilAborted(
        fetchDeltasInOrder(store, plan.deltas, {
          maxFetchers: opts.maxFetchers,
          tempDir: opts.scratch,
          onOverlap: (d, prev, n) => logOverlap(logger, d, prev, n),
          ...(signal ? { signal } : {}),
        }),
        signal,
      ),
      targetRevision: plan.targetRevision,
      // Upstream compacts at the revision it restored to: the head of the chain.
      compactRevision: plan.targetRevision,
      leases: { defaultTtlSeconds: opts.restoredLeaseTtlSeconds },
      logger,
      ...(signal ? { signal } : {}),
    });
  } catch (err) {
    if (err instanceof BoltError) {
      throw new CorruptFullSnapshotError(base, `full snapshot ${base.snapName} is not a usable bbolt database: ${err.message}`, {
        cause: err,
      });
    }
    // The fetched deltas' own write failures name their file already; one left here is the new backend's.
    throw namingWorkDir(err, 'the compacted backend', dbPath, TEMP_DIR_FLAG);
  }
  signal?.throwIfAborted();
  await verifyRestoredBackend(dbPath);
  return {
    dbPath,
    revision: replayed.revision,
    compactRevision: replayed.compactRevision,
    deltasApplied: replayed.deltasApplied,
    revisionsApplied: replayed.revisionsApplied,
    bytes: replayed.bytes,
    leases: replayed.leases ?? noLeases(),
  };
}

/**
 * The full snapshot's database as a local file: decompressed, its sha256 trailer checked on the way (the
 * check etcd's snapshot restore makes) and then cut off. With `skipHashCheck` the trailer is cut off when
 * the size says there is one (a bbolt file is a whole number of 512-byte units), as etcd's restore does.
 */
async function fetchFullDatabase(
  store: SnapStore,
  snap: Snapshot,
  file: string,
  skipHashCheck: boolean,
  signal: AbortSignal | undefined,
): Promise<void> {
  const what = `full snapshot ${snap.snapName}`;
  try {
    const raw = await store.fetch(snap, undefined, signal ? { signal } : {});
    const decompress = createDecompressStream(snap.compressionSuffix, snap.snapName);
    const out = createWriteStream(file, { mode: 0o600, highWaterMark: 1 << 20 });
    let writeFailure: unknown;
    out.once('error', (err) => (writeFailure = err));
    const options = signal ? { signal } : {};
    try {
      if (skipHashCheck) await pipeline(raw, decompress, out, options);
      else await pipeline(raw, decompress, new FullSnapshotVerifier(what), out, options);
    } catch (err) {
      // Only the file's own failure is about the temp dir; the store's and the payload's keep their errors.
      throw err === writeFailure ? namingWorkDir(err, what, file, TEMP_DIR_FLAG) : err;
    }
  } catch (err) {
    // Only a corrupt object is the full's fault; an unreachable store or a stop keeps its own error.
    if (!(err instanceof FullSnapshotIntegrityError) && errorCode(err) !== 'E_CORRUPT') throw err;
    throw new CorruptFullSnapshotError(snap, `${what} is corrupt: ${(err as Error).message}`, { cause: err });
  }
  const size = (await stat(file)).size;
  if (size % 512 === SHA256_SIZE) await truncate(file, size - SHA256_SIZE);
}

/** `items` until `signal` aborts: then the next step rejects with its reason (and `items` is closed). */
async function* untilAborted<T>(items: AsyncIterable<T>, signal: AbortSignal | undefined): AsyncGenerator<T> {
  for await (const item of items) {
    signal?.throwIfAborted();
    yield item;
  }
}
