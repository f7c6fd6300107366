/**
 * `etcdbrctl copy` (upstream `pkg/snapshot/copier/copier.go`, `cmd/copy.go`): copies backups (a full snapshot and the deltas after it)
 * from a source store to a destination store, object by object, bytes verbatim.
 *
 * - With `--wait-for-final-snapshot`, first polls the source until one of its newest 4 full snapshots is
 *   final (or the optional timeout passes, after which it copies anyway, as upstream).
 * - The source backups are upstream's GetFilteredBackups: newest backups first, at most
 *   `--max-backups-to-copy`, only those whose full snapshot is younger than `--max-backup-age` days.
 * - A snapshot is skipped when the destination already has its name without `.final`, so a second run
 *   copies nothing; copies are saved without `.final` (a copied final snapshot must not stop the
 *   destination's own snapshotter from taking fulls). v1 snapshots keep their v1 key layout.
 * - Objects are streamed from source to destination, never held whole in memory, up to
 *   `--max-parallel-copy-operations` at a time. The destination commits an object only when its stream
 *   ended cleanly, so an interrupted copy leaves nothing half-written and a re-run completes it.
 * - Unlike upstream, each object's integrity (the sha256 trailer of its decompressed payload) is checked on
 *   the way; a corrupt object is not committed at the destination and is reported with its name.
 * - Encryption (ours): with encryption recipients for the destination, every object is stored encrypted
 *   to them (`.age` added to its name); an encrypted source object is decrypted with the identities on
 *   the way, all streamed. Without recipients, objects are copied as stored: encrypted ones stay encrypted
 *   under their name. A snapshot counts as present at the destination encrypted or not.
 * - A failing object does not stop the others; every failure is reported at the end (upstream aggregates
 *   the errors the same way).
 */
import { asError, CodedError, EtcdbrError } from '../errors.js';
import { Writable, pipeline as pipelineCb, type Readable, type TransformCallback } from 'node:stream';
import { ByteCounter } from '../backup/byte-counter.js';
import { pipeline } from 'node:stream/promises';
import {
  createDecompressStream,
  createDecryptStream,
  EncryptingStore,
  encryptsNewSnapshots,
  ENCRYPTED_SUFFIX,
  filteredBackups,
  latestFulls,
  setEncrypted,
  setFinal,
  SnapStoreError,
  storedBytesStore,
  FINAL_SUFFIX,
  type AgeIdentity,
  type Logger,
  type SnapStore,
  type Snapshot,
} from '@etcdbrctl/snapstore';
import { PayloadVerifier } from '../backup/full-verify.js';
import type { Clock } from '../clock.js';
import type { CopierConfig } from '../config/types.js';

/** Upstream `finalSnapshotCheckInterval`. */
export const FINAL_SNAPSHOT_POLL_MS = 15_000;
/** Upstream looks for a final snapshot among this many newest fulls (since v0.42, to tolerate races). */
export const FINAL_SNAPSHOT_SEARCH_DEPTH = 4;
/** Default bound on the upload buffers of concurrent copies (see `saveBufferBytes`). */
export const DEFAULT_MEMORY_BUDGET_BYTES = 32 * 1024 * 1024;

const DAY_MS = 24 * 60 * 60 * 1000;

export interface CopierDeps {
  source: SnapStore;
  destination: SnapStore;
  logger: Logger;
  clock: Clock;
  /** SIGTERM: stops waiting, aborts the copies in flight (nothing partial is committed) and fails. */
  signal?: AbortSignal;
  /** Poll interval while waiting for a final snapshot (default 15 s, upstream's). */
  finalSnapshotPollMs?: number;
  /** Check each object's sha256 trailer while copying (default true). */
  verify?: boolean;
  /**
   * What the destination's save holds in memory for one large object (its part/block buffers), e.g.
   * `(maxParallelChunkUploads + 1) × minChunkSize` for S3 and ABS; 0 for Local. Copies run in parallel
   * only as far as their buffers fit into `memoryBudgetBytes`, so many big objects do not add up.
   */
  saveBufferBytes?: number;
  memoryBudgetBytes?: number;
  /**
   * Where the source store looks (config/store.ts `storeLocation`), for the message when it holds nothing to
   * copy; "the source store" when not given.
   */
  sourceLocation?: string;
}

export interface CopyFailure {
  snapshot: Snapshot;
  error: Error;
}

export interface CopyResult {
  /** The source snapshots selected for copying (after the backup count and age filters). */
  selected: Snapshot[];
  copied: Snapshot[];
  skipped: Snapshot[];
  failures: CopyFailure[];
  /** Bytes written to the destination. */
  bytes: number;
  /**
   * Set when nothing was selected: where the source looked and why nothing was taken, e.g. `no snapshots in
   * S3 container b, prefix etcd-main/v2 (check --source-storage-provider, ...)`.
   */
  nothingFound?: string;
  /** Set when the run waited for a final snapshot: whether the wait ended by its timeout. */
  waitTimedOut?: boolean;
  durationMs: number;
}

/** The copy ended with failed objects; `result` says what was copied nevertheless. */
export class CopyError extends CodedError {
  readonly code = 'E_COPY_FAILED';
  override readonly name = 'CopyError';
  constructor(readonly result: CopyResult) {
    const n = result.failures.length;
    super(
      `could not copy backups: ${n} of ${result.selected.length - result.skipped.length} snapshot(s) failed: ` +
        result.failures.map((f) => f.error.message).join('; '),
    );
  }
}

/** The name a snapshot is compared under: copies never carry `.final`, and may be encrypted or not. */
function baseName(name: string): string {
  const unfinal = name.endsWith(FINAL_SUFFIX) ? name.slice(0, -FINAL_SUFFIX.length) : name;
  return unfinal.endsWith(ENCRYPTED_SUFFIX) ? unfinal.slice(0, -ENCRYPTED_SUFFIX.length) : unfinal;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Copies the selected backups; throws CopyError when some objects failed (after trying all of them). */
export async function copyBackups(deps: CopierDeps, config: CopierConfig): Promise<CopyResult> {
  const { source, destination, logger, clock, signal } = deps;
  const started = Date.now();
  const result: CopyResult = { selected: [], copied: [], skipped: [], failures: [], bytes: 0, durationMs: 0 };
  if (config.waitForFinalSnapshot) {
    result.waitTimedOut = await waitForFinalSnapshot(deps, config.waitForFinalSnapshotTimeout);
  }

  logger.info({}, 'Getting source backups...');
  const now = clock.now().getTime();
  const filter = config.maxBackupAge >= 0 ? (full: Snapshot) => full.createdOn.getTime() > now - config.maxBackupAge * DAY_MS : undefined;
  const listing = await source.list();
  result.selected = filteredBackups(listing, config.maxBackupsToCopy, filter);
  if (result.selected.length === 0) {
    // Upstream logs only "No source backups found"; an operator then cannot tell a wrong container or prefix
    // from an empty store or from backups the filters left out.
    result.nothingFound = whyNothingSelected(listing, config, deps.sourceLocation ?? 'the source store');
    logger.info({ reason: result.nothingFound }, `No source backups found: ${result.nothingFound}`);
    result.durationMs = Date.now() - started;
    return result;
  }

  logger.info({}, 'Getting destination snapshots...');
  const present = new Set((await destination.list()).map((s) => baseName(s.snapName)));
  const todo: Snapshot[] = [];
  for (const snap of result.selected) {
    if (present.has(baseName(snap.snapName))) {
      logger.info({ snapshot: snap.snapName }, `Skipping ${snap.kind} snapshot ${snap.snapName} as it already exists`);
      result.skipped.push(snap);
    } else {
      todo.push(snap);
    }
  }
  logger.info({ toCopy: todo.length, skipped: result.skipped.length, parallel: config.maxParallelCopyOperations }, 'Copying backups ...');

  const budget = new ByteBudget(deps.memoryBudgetBytes ?? DEFAULT_MEMORY_BUDGET_BYTES);
  const perSave = deps.saveBufferBytes ?? 0;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < todo.length && !signal?.aborted) {
      const snap = todo[next++] as Snapshot;
      const weight = Math.min(snap.sizeBytes ?? perSave, perSave);
      const release = await budget.acquire(weight);
      try {
        logger.info({ snapshot: snap.snapName }, `Copying ${snap.kind} snapshot ${snap.snapName}...`);
        const t0 = Date.now();
        const bytes = await copySnapshot(deps, snap);
        result.bytes += bytes;
        result.copied.push(snap);
        logger.info({ snapshot: snap.snapName, bytes, ms: Date.now() - t0 }, `Successfully copied ${snap.kind} snapshot ${snap.snapName}`);
      } catch (err) {
        const error = asError(err);
        logger.error({ err: error, snapshot: snap.snapName }, error.message);
        result.failures.push({ snapshot: snap, error });
      } finally {
        release();
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(config.maxParallelCopyOperations, todo.length)) }, worker));
  signal?.throwIfAborted();
  result.durationMs = Date.now() - started;
  if (result.failures.length > 0) throw new CopyError(result);
  logger.info(
    { copied: result.copied.length, skipped: result.skipped.length, bytes: result.bytes, ms: result.durationMs },
    'Backups copied',
  );
  return result;
}

/** Why `filteredBackups` took nothing from `listing`, naming `where` it looked and the flags that decide. */
function whyNothingSelected(listing: readonly Snapshot[], config: CopierConfig, where: string): string {
  const snaps = listing.filter((s) => !s.isChunk);
  const fulls = snaps.filter((s) => s.kind === 'Full');
  if (snaps.length === 0)
    return `no snapshots in ${where} (check --source-storage-provider, --source-store-container and --source-store-prefix)`;
  if (fulls.length === 0) {
    const n = snaps.length;
    return `no full snapshot in ${where}, only ${n} delta snapshot${n === 1 ? '' : 's'} (a backup starts with a full snapshot)`;
  }
  if (config.maxBackupsToCopy === 0) return `--max-backups-to-copy=0 selects none of the ${fulls.length} backup(s) in ${where}`;
  const newest = fulls.reduce((a, b) => (b.createdOn.getTime() > a.createdOn.getTime() ? b : a));
  return (
    `none of the ${fulls.length} backup(s) in ${where} is younger than --max-backup-age=${config.maxBackupAge} day(s); ` +
    `the newest full snapshot was taken ${newest.createdOn.toISOString()}`
  );
}

/**
 * Polls the source until a final full snapshot is among its newest 4 fulls. Returns true when the timeout
 * (> 0) ended the wait instead. A failed listing is retried at the next poll (upstream gives up at once).
 */
async function waitForFinalSnapshot(deps: CopierDeps, timeoutMs: number): Promise<boolean> {
  const { source, logger, clock, signal } = deps;
  const poll = deps.finalSnapshotPollMs ?? FINAL_SNAPSHOT_POLL_MS;
  const deadline = timeoutMs > 0 ? clock.now().getTime() + timeoutMs : Number.POSITIVE_INFINITY;
  logger.info({ timeoutMs }, 'Waiting for final full snapshot...');
  for (;;) {
    try {
      const final = latestFulls(await source.list(), FINAL_SNAPSHOT_SEARCH_DEPTH).find((s) => s.isFinal);
      if (final) {
        logger.info({ snapshot: final.snapName }, 'Final full snapshot detected');
        return false;
      }
    } catch (err) {
      logger.warn({ err }, 'Listing the source store failed while waiting for the final full snapshot; retrying');
    }
    const remaining = deadline - clock.now().getTime();
    if (remaining <= 0) {
      logger.info({ timeoutMs }, 'Timed out waiting for final full snapshot');
      return true;
    }
    await clock.sleep(Math.min(poll, remaining), signal);
  }
}

/** Streams one object from the source to the destination; returns the bytes copied. */
async function copySnapshot(deps: CopierDeps, snap: Snapshot): Promise<number> {
  const { destination, logger, signal } = deps;
  // Re-encrypting reads plaintext (the source store decrypts); otherwise the stored bytes are copied as they are.
  const reencrypt = encryptsNewSnapshots(destination);
  const source = !reencrypt && snap.isEncrypted === true ? storedBytesStore(deps.source) : deps.source;
  let raw: Readable;
  try {
    raw = await source.fetch(snap, undefined, signal ? { signal } : {});
  } catch (err) {
    throw new EtcdbrError('E_FAILED', `could not fetch snapshot ${snap.snapName} from source store: ${message(err)}`, { cause: err });
  }
  let sourceError: unknown;
  raw.once('error', (err) => {
    sourceError ??= err;
  });
  let check: IntegrityCheck | undefined;
  if (deps.verify !== false) {
    try {
      // What passes is plaintext when re-encrypting, the stored bytes otherwise.
      check = reencrypt ? new IntegrityCheck(setEncrypted(snap, false)) : new IntegrityCheck(snap, identitiesOf(deps.source));
    } catch (err) {
      // An unknown codec (written by something newer): copied as is, as upstream copies everything.
      logger.warn({ err, snapshot: snap.snapName }, 'cannot check the integrity of this snapshot; copying it unchecked');
    }
  }
  const counter = check ?? new ByteCounter();
  // Saved under the source's prefix kind (v1 stays v1 through objectKey) and never as final.
  const target = reencrypt ? setEncrypted(setFinal(snap, false), true) : setFinal(snap, false);
  const data = pipelineCb(raw, counter, () => {});
  // Re-encrypted, the object written is the age file, not the plaintext counted here.
  let encryptedBytes: number | undefined;
  try {
    await destination.save(target, data, { ...(signal ? { signal } : {}), onEncryptedSize: (n) => (encryptedBytes = n) });
  } catch (err) {
    if (check?.failure) {
      throw new EtcdbrError('E_CORRUPT', `snapshot ${snap.snapName} in the source store is corrupt: ${check.failure.message}`, {
        cause: check.failure,
      });
    }
    if (sourceError !== undefined) {
      throw new EtcdbrError('E_FAILED', `could not read snapshot ${snap.snapName} from source store: ${message(sourceError)}`, {
        cause: sourceError,
      });
    }
    throw new EtcdbrError('E_FAILED', `could not save snapshot ${snap.snapName} to destination store: ${message(err)}`, { cause: err });
  } finally {
    if (!data.destroyed && !data.readableEnded) data.destroy();
  }
  return encryptedBytes ?? counter.bytes;
}

/** The identities a store decrypts with; undefined when it has none (stored bytes cannot be opened). */
function identitiesOf(store: SnapStore): readonly AgeIdentity[] | undefined {
  return store instanceof EncryptingStore && store.encryption.identities.length > 0 ? store.encryption.identities : undefined;
}

/**
 * Passes the stored bytes through unchanged while a side branch decompresses them and checks the sha256
 * trailer. The pass-through ends only after the check succeeded, and fails with the check's error
 * otherwise, so the destination (which commits on a clean end only) never gets a corrupt object.
 */
class IntegrityCheck extends ByteCounter {
  /** The integrity problem found, if any. */
  failure: Error | undefined;
  private readonly head: Writable;
  private readonly checked: Promise<void>;

  /** `identities`: to open the stored bytes of an encrypted snapshot (copied verbatim); else it cannot be checked. */
  constructor(snap: Snapshot, identities?: readonly AgeIdentity[]) {
    super();
    const decompress = createDecompressStream(snap.compressionSuffix, snap.snapName);
    const kind = snap.kind === 'Full' ? 'full' : 'delta';
    const verifier = new PayloadVerifier(`${kind} snapshot ${snap.snapName}`, kind);
    const sink = new Writable({ write: (_chunk, _enc, cb) => cb() });
    const stored = snap.isEncrypted === true;
    if (stored && identities === undefined)
      throw new SnapStoreError('E_NO_IDENTITY', `${snap.snapName} is encrypted and no identity was given to check it`);
    const decrypt = stored ? createDecryptStream(identities ?? [], snap.snapName) : undefined;
    this.head = decrypt ?? decompress;
    this.checked = decrypt ? pipeline(decrypt, decompress, verifier, sink) : pipeline(decompress, verifier, sink);
    this.checked.catch((err: unknown) => {
      if (this.destroyed) return; // torn down from outside (destination failed, abort): not our finding
      this.failure = asError(err);
      this.destroy(this.failure);
    });
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    if (this.failure) {
      cb(this.failure);
      return;
    }
    this.bytes += chunk.length;
    this.push(chunk);
    // Wait for the check to keep up, so its buffers stay small.
    if (this.head.write(chunk)) cb();
    else this.head.once('drain', () => cb());
  }

  override _flush(cb: TransformCallback): void {
    this.head.end();
    this.checked.then(
      () => cb(),
      (err: unknown) => cb(asError(err)),
    );
  }

  override _destroy(err: Error | null, cb: (error: Error | null) => void): void {
    if (!this.head.destroyed) this.head.destroy();
    cb(err);
  }
}

/** A counting semaphore over bytes: a request larger than the budget runs alone. */
class ByteBudget {
  private used = 0;
  private readonly waiting: Array<{ bytes: number; grant: () => void }> = [];

  constructor(private readonly capacity: number) {}

  async acquire(bytes: number): Promise<() => void> {
    const want = Math.min(Math.max(0, bytes), this.capacity);
    if (this.waiting.length > 0 || this.used + want > this.capacity) {
      await new Promise<void>((grant) => this.waiting.push({ bytes: want, grant }));
    } else {
      this.used += want;
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.used -= want;
      this.wake();
    };
  }

  private wake(): void {
    // First come, first served: a big request is not starved by a stream of small ones.
    while (this.waiting.length > 0) {
      const head = this.waiting[0] as { bytes: number; grant: () => void };
      if (this.used + head.bytes > this.capacity) return;
      this.waiting.shift();
      this.used += head.bytes;
      head.grant();
    }
  }
}
