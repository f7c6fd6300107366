import { EtcdbrError } from '../errors.js';
import { Readable, pipeline as pipelineCb } from 'node:stream';
import {
  createCompressStream,
  encryptsNewSnapshots,
  newSnapshot,
  suffixForPolicy,
  type CompressionPolicy,
  type Logger,
  type SnapStore,
  type Snapshot,
} from '@etcdbrctl/snapstore';
import { ByteCounter } from '../backup/byte-counter.js';
import { FullSnapshotVerifier } from '../backup/full-verify.js';
import type { EtcdClient } from '../etcd/index.js';

export interface FullSnapshotDeps {
  client: EtcdClient;
  store: SnapStore;
  /** undefined = uncompressed. */
  compression: CompressionPolicy | undefined;
  /** The snapshot's creation time, asked once its revision is known (a name must sort after others at that revision). */
  now: (revision: number) => Date;
  logger: Logger;
}

export interface FullSnapshotOptions {
  isFinal: boolean;
  /** `--etcd-snapshot-timeout`: the whole stream-and-upload must finish within it. */
  snapshotTimeoutMs: number;
  /** `--etcd-connection-timeout`: bounds the revision read. */
  connectionTimeoutMs: number;
  signal?: AbortSignal;
}

/**
 * Streams etcd's Maintenance.Snapshot through the sha256 trailer check and the codec into the store.
 * Nothing is buffered beyond stream chunks and nothing is written to local disk. The object becomes
 * visible only when the whole stream verified (the store commits on a clean end only).
 *
 * The revision in the name is the snapshot header's revision where etcd sends one (3.5+), otherwise
 * the revision read just before opening the stream, so the name never claims more than the file holds.
 */
export async function takeFullSnapshot(deps: FullSnapshotDeps, opts: FullSnapshotOptions): Promise<Snapshot> {
  return (await takeSizedFullSnapshot(deps, opts)).snapshot;
}

/** The sizes of a stored snapshot. */
export interface SavedSizes {
  /** The uncompressed snapshot file (full: database ‖ sha256; delta: JSON ‖ sha256). */
  payloadBytes: number;
  /** The object in the store: the compressed file, encrypted when the snapshot is (age adds its header and 16 bytes per 64 KiB). */
  storedBytes: number;
}

/** takeFullSnapshot, also telling the snapshot's sizes. */
export async function takeSizedFullSnapshot(
  deps: FullSnapshotDeps,
  opts: FullSnapshotOptions,
): Promise<{ snapshot: Snapshot } & SavedSizes> {
  const started = Date.now();
  const revisionBefore = await deps.client.currentRevision(opts.connectionTimeoutMs);
  const signals = [AbortSignal.timeout(opts.snapshotTimeoutMs)];
  if (opts.signal) signals.push(opts.signal);
  const signal = AbortSignal.any(signals);

  const stream = await deps.client.snapshot({ timeoutMs: opts.snapshotTimeoutMs });
  const cancel = () => stream.cancel();
  signal.addEventListener('abort', cancel, { once: true });
  try {
    const iterator = stream[Symbol.asyncIterator]();
    const first = await iterator.next();
    const headerRevision = first.done ? 0 : first.value.revision;
    const revision = headerRevision > 0 ? headerRevision : revisionBefore;

    const snap = newSnapshot({
      kind: 'Full',
      startRevision: 0,
      lastRevision: revision,
      createdOn: deps.now(revision),
      compressionSuffix: suffixForPolicy(deps.compression),
      isFinal: opts.isFinal,
      // With recipients configured every new full is encrypted: the first one after encryption was turned
      // on starts an encrypted chain, whatever the store held before.
      encrypted: encryptsNewSnapshots(deps.store),
    });

    async function* blobs(): AsyncGenerator<Buffer> {
      if (!first.done && first.value.blob.length) yield first.value.blob;
      for (;;) {
        const next = await iterator.next();
        if (next.done) return;
        if (next.value.blob.length) yield next.value.blob;
      }
    }

    const sizes = await saveVerifiedFullSnapshot(deps.store, snap, blobs(), deps.compression, signal);
    deps.logger.info(
      { snapshot: snap.snapName, revision, dbBytes: sizes.payloadBytes, storedBytes: sizes.storedBytes, durationMs: Date.now() - started },
      'Full snapshot saved',
    );
    return { snapshot: snap, ...sizes };
  } finally {
    signal.removeEventListener('abort', cancel);
    cancel();
  }
}

/**
 * Saves a full snapshot stream (db ‖ sha256) as `snap`, committed only if the trailer verifies.
 * Returns its sizes. Used for etcd's stream and by compact/copy paths alike.
 */
export async function saveVerifiedFullSnapshot(
  store: SnapStore,
  snap: Snapshot,
  source: AsyncIterable<Buffer>,
  compression: CompressionPolicy | undefined,
  signal?: AbortSignal,
): Promise<SavedSizes> {
  const verifier = new FullSnapshotVerifier(`full snapshot ${snap.snapName}`);
  const stored = new ByteCounter();
  let encryptedBytes: number | undefined;
  // pipeline() destroys every stage on the first error, so the store sees the failure and commits nothing.
  const data = pipelineCb(Readable.from(source), verifier, createCompressStream(compression), stored, () => {});
  await store.save(snap, data, { ...(signal ? { signal } : {}), onEncryptedSize: (n) => (encryptedBytes = n) });
  const result = verifier.result;
  if (!result) throw new EtcdbrError('E_INTERNAL', `full snapshot ${snap.snapName}: stored without a completed verification`);
  return { payloadBytes: result.totalBytes, storedBytes: encryptedBytes ?? stored.bytes };
}
