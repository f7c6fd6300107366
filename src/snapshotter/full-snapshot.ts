import { Readable, pipeline as pipelineCb } from 'node:stream';
import type { Etcd3 } from 'etcd3';
import {
  createCompressStream,
  newSnapshot,
  suffixForPolicy,
  type CompressionPolicy,
  type Logger,
  type SnapStore,
  type Snapshot,
} from '@etcdbrctl/snapstore';
import { FullSnapshotVerifier } from '../backup/full-verify.js';
import { currentRevision } from '../etcd/ops.js';

export interface FullSnapshotDeps {
  client: Etcd3;
  store: SnapStore;
  /** undefined = uncompressed. */
  compression: CompressionPolicy | undefined;
  now: () => Date;
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

interface SnapshotMessage {
  blob?: Buffer;
  header?: { revision?: string | number } | null;
}

/** grpc-js's ClientReadableStream: async-iterable and cancellable. */
type SnapshotStream = AsyncIterable<SnapshotMessage> & { cancel(): void; on(event: 'error', listener: () => void): unknown };

interface PoolInternals {
  withConnection<T>(service: 'Maintenance', fn: (args: { client: unknown; metadata: unknown }) => T): Promise<T>;
}

/**
 * Opens Maintenance.Snapshot. etcd3 1.1.2's maintenance.snapshot() passes the auth metadata where grpc-js
 * expects the request message (server-streaming calls take request, metadata, options), so the token never
 * reaches etcd and an etcd with authentication enabled refuses the snapshot. We make the same call through
 * etcd3's connection pool (which supplies the token) with the arguments in grpc-js order.
 */
async function openSnapshotStream(client: Etcd3, deadline: Date): Promise<SnapshotStream> {
  const pool = (client as unknown as { pool: PoolInternals }).pool;
  const stream = await pool.withConnection('Maintenance', ({ client: grpcClient, metadata }) =>
    (grpcClient as { snapshot(request: object, md: unknown, options: object): SnapshotStream }).snapshot({}, metadata, { deadline }),
  );
  // Errors reach the reader through the async iterator; this only keeps an early one from being unhandled.
  stream.on('error', () => undefined);
  return stream;
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

/** takeFullSnapshot, also telling the size of the uncompressed snapshot file (database ‖ sha256). */
export async function takeSizedFullSnapshot(deps: FullSnapshotDeps, opts: FullSnapshotOptions): Promise<{ snapshot: Snapshot; bytes: number }> {
  const started = Date.now();
  const revisionBefore = await currentRevision(deps.client, opts.connectionTimeoutMs);
  const signals = [AbortSignal.timeout(opts.snapshotTimeoutMs)];
  if (opts.signal) signals.push(opts.signal);
  const signal = AbortSignal.any(signals);

  const stream = await openSnapshotStream(deps.client, new Date(Date.now() + opts.snapshotTimeoutMs));
  const cancel = () => stream.cancel();
  signal.addEventListener('abort', cancel, { once: true });
  try {
    const iterator = stream[Symbol.asyncIterator]();
    const first = await iterator.next();
    const headerRevision = Number(first.value?.header?.revision ?? 0);
    const revision = headerRevision > 0 ? headerRevision : revisionBefore;

    const snap = newSnapshot({
      kind: 'Full',
      startRevision: 0,
      lastRevision: revision,
      createdOn: deps.now(),
      compressionSuffix: suffixForPolicy(deps.compression),
      isFinal: opts.isFinal,
    });

    async function* blobs(): AsyncGenerator<Buffer> {
      if (!first.done && first.value.blob?.length) yield first.value.blob;
      for (;;) {
        const next = await iterator.next();
        if (next.done) return;
        if (next.value.blob?.length) yield next.value.blob;
      }
    }

    const dbBytes = await saveVerifiedFullSnapshot(deps.store, snap, blobs(), deps.compression, signal);
    deps.logger.info({ snapshot: snap.snapName, revision, dbBytes, durationMs: Date.now() - started }, 'Full snapshot saved');
    return { snapshot: snap, bytes: dbBytes };
  } finally {
    signal.removeEventListener('abort', cancel);
    cancel();
  }
}

/**
 * Saves a full snapshot stream (db ‖ sha256) as `snap`, committed only if the trailer verifies.
 * Returns the number of payload bytes. Used for etcd's stream and by compact/copy paths alike.
 */
export async function saveVerifiedFullSnapshot(
  store: SnapStore,
  snap: Snapshot,
  source: AsyncIterable<Buffer>,
  compression: CompressionPolicy | undefined,
  signal?: AbortSignal,
): Promise<number> {
  const verifier = new FullSnapshotVerifier(`full snapshot ${snap.snapName}`);
  // pipeline() destroys every stage on the first error, so the store sees the failure and commits nothing.
  const data = pipelineCb(Readable.from(source), verifier, createCompressStream(compression), () => {});
  await store.save(snap, data, signal ? { signal } : {});
  const result = verifier.result;
  if (!result) throw new Error(`full snapshot ${snap.snapName}: stored without a completed verification`);
  return result.totalBytes;
}
