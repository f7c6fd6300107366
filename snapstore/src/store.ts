import type { Readable } from 'node:stream';
import type { Snapshot } from './snapshot.js';

/** The storage providers we implement. Names are upstream's `--storage-provider` values. */
export type ProviderName = 'Local' | 'S3' | 'ABS' | 'GCS' | 'Swift' | 'OSS' | 'ECS' | 'OCS';

export interface ListOptions {
  /**
   * Also return snapshots that are marked excluded (S3/ABS tag or GCS metadata
   * `x-etcd-snapshot-exclude=true`). Only garbage collection asks for them.
   */
  includeExcluded?: boolean;
}

export interface ByteRange {
  /** First byte, inclusive. */
  start: number;
  /** Last byte, inclusive; open-ended when undefined. */
  end?: number;
}

export interface FetchOptions {
  /**
   * Aborting the signal ends the request and the body at once: `fetch` rejects, or the stream errors, with
   * the signal's reason.
   */
  signal?: AbortSignal;
}

export interface SaveOptions {
  /** Aborting the signal aborts the upload; nothing is committed. */
  signal?: AbortSignal;
  /**
   * Told the object's size as stored once the save succeeded, when that is not the size of `data`: an
   * encrypted object's (EncryptingStore; age adds its header, a nonce and 16 bytes per 64 KiB). Not called
   * for an object stored as given.
   */
  onEncryptedSize?: (bytes: number) => void;
}

/**
 * Where snapshots live. One implementation per provider; all of them pass the same conformance suite.
 *
 * Keys: a snapshot lives at `path.posix.join(prefix, snap.snapDir, snap.snapName)` where `prefix` is
 * the listed `snap.prefix` for fetch/delete, and the store's own prefix for save (see `objectKey`).
 */
export interface OpenOptions {
  /**
   * The caller only reads (ls, restore, a copy's source): the store must already exist. A Local store then
   * creates no directory and sweeps no temp files, and a missing directory is E_NOT_FOUND naming the path.
   * Cloud providers never create their bucket or container, so this changes nothing for them.
   */
  readOnly?: boolean;
  /**
   * Who writes through this store, when at most one process with this name runs at a time (the sidecar of
   * one etcd member: its pod name). A Local store names its temp files with it, and opening removes this
   * writer's temp files of any age: they belong to its previous process, killed mid-save. Without it only
   * temp files older than an hour are removed, as another process may still be writing them.
   */
  tempOwner?: string;
}

export interface SnapStore {
  readonly provider: ProviderName;
  /** The effective prefix of this store, always ending in `v2` (upstream `<store-prefix>/v2`). */
  readonly prefix: string;

  /**
   * Lists every snapshot under the parent of the `v2` prefix (so v1 objects are found too), sorted
   * with `compareSnapshots`. Keys that do not parse are skipped with a warning, never an error.
   * Excluded snapshots are left out unless `includeExcluded`.
   */
  list(options?: ListOptions): Promise<Snapshot[]>;

  /**
   * Streams the stored bytes of a snapshot exactly as saved (still compressed).
   * Throws E_NOT_FOUND when the object does not exist. A network store that does not answer, or stops
   * sending while the stream is read, for the configured stall deadline (`fetchStallTimeoutMs`) ends the
   * fetch (or errors the stream) with E_UNREACHABLE naming the object and the store.
   */
  fetch(snap: Snapshot, range?: ByteRange, options?: FetchOptions): Promise<Readable>;

  /**
   * Stores `data` as the snapshot's object. The object becomes visible only after `data` ended
   * without error and the provider committed it; if `data` errors, the signal aborts, or the upload
   * fails, nothing is visible and no temporary objects, blocks or files are left, and the error is
   * rethrown (wrapped as E_SAVE_FAILED unless it is already a SnapStoreError). Saving an existing
   * key replaces it.
   */
  save(snap: Snapshot, data: Readable, options?: SaveOptions): Promise<void>;

  /** Deletes the snapshot's object. E_NOT_FOUND if missing, E_IMMUTABLE if protected by retention. */
  delete(snap: Snapshot): Promise<void>;

  /** Releases clients and sockets. The store is unusable afterwards. */
  close(): Promise<void>;
}
