/**
 * Storing a compacted backend as the new full snapshot: the database bytes followed by their sha256, the
 * payload etcd's `snapshot save` writes (etcd server `mvcc/backend` snapshot + the hash its maintenance
 * Snapshot call appends), named `Full-00000000-<head revision>-<now>` like any full snapshot (upstream's
 * compactor names its result the same way: no marker tells a compacted full from another one).
 */
import { createHash } from 'node:crypto';
import {
  encryptsNewSnapshots,
  newSnapshot,
  suffixForPolicy,
  type CompressionPolicy,
  type Logger,
  type SnapStore,
  type Snapshot,
} from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import { saveVerifiedFullSnapshot } from '../snapshotter/full-snapshot.js';

/** Database bytes followed by their sha256: the payload of a full snapshot. */
export async function* withSha256Trailer(db: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  const hash = createHash('sha256');
  for await (const chunk of db) {
    hash.update(chunk);
    yield chunk;
  }
  yield hash.digest();
}

export interface UploadDeps {
  store: SnapStore;
  clock: Clock;
  logger: Logger;
  signal?: AbortSignal;
}

export interface UploadOptions {
  /** The head revision the backend holds: the snapshot's last revision. */
  revision: number;
  compression: CompressionPolicy | undefined;
  isFinal: boolean;
  /** `--etcd-snapshot-timeout`: the whole upload must finish within it. */
  timeoutMs: number;
}

/**
 * Uploads `payload` (db ‖ sha256) as a new full snapshot, through the same trailer check and codec as a
 * snapshot of etcd's stream: the store commits it only when the whole payload verified.
 */
export async function saveCompactedBackend(deps: UploadDeps, payload: AsyncIterable<Buffer>, opts: UploadOptions): Promise<Snapshot> {
  const snapshot = newSnapshot({
    kind: 'Full',
    startRevision: 0,
    lastRevision: opts.revision,
    createdOn: deps.clock.now(),
    compressionSuffix: suffixForPolicy(opts.compression),
    isFinal: opts.isFinal,
    encrypted: encryptsNewSnapshots(deps.store),
  });
  const timeout = AbortSignal.timeout(opts.timeoutMs);
  const signal = deps.signal ? AbortSignal.any([deps.signal, timeout]) : timeout;
  const sizes = await saveVerifiedFullSnapshot(deps.store, snapshot, payload, opts.compression, signal);
  deps.logger.info(
    { snapshot: snapshot.snapName, revision: opts.revision, dbBytes: sizes.payloadBytes, storedBytes: sizes.storedBytes },
    'Full snapshot saved',
  );
  return snapshot;
}
