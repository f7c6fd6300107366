/**
 * Snapshot records and their names, exactly as etcd-backup-restore writes and parses them
 * (upstream-reference.md §3.2–3.4).
 */

export type SnapshotKind = 'Full' | 'Incr';

/** Compression suffixes that appear in names. '' = uncompressed. `.zst` is ours (a difference). */
export type CompressionSuffix = '' | '.gz' | '.Z' | '.zlib' | '.zst';

export interface Snapshot {
  kind: SnapshotKind;
  /** 0 for full snapshots. Revisions are int64 upstream; we require them to be safe integers. */
  startRevision: number;
  lastRevision: number;
  /** Second precision when parsed from a name. */
  createdOn: Date;
  /** '' for v2 (flat) keys, `Backup-<unix>` for v1 keys. */
  snapDir: string;
  /** e.g. `Incr-00001235-00001300-1700000100.gz` (with `.final` when final; chunk number excluded). */
  snapName: string;
  /** For listed snapshots: everything up to and including `v1/` or `v2/`; '' for new snapshots. */
  prefix: string;
  compressionSuffix: string;
  isChunk: boolean;
  isFinal: boolean;
  /** Set by providers with retention policies; undefined = deletable any time. */
  immutabilityExpiryTime?: Date;
  /** S3 object-lock version of the object, when listed from a versioned bucket. */
  versionId?: string;
  /** Size in bytes of the stored object, when the provider's listing tells it (not in upstream JSON). */
  sizeBytes?: number;
  /** For chunk objects: the chunk number parsed from the key. */
  chunkNumber?: number;
}
