/** Shared pieces of the copier and secondary-sync tests: stores closed after each test, snapshots with valid payloads. */
import { createHash, randomBytes } from 'node:crypto';
import { Readable, Transform } from 'node:stream';
import {
  createCompressStream,
  newSnapshot,
  openSnapStore,
  policyForSuffix,
  type CompressionSuffix,
  type SnapStore,
  type Snapshot,
  type StoreConfig,
} from '@etcdbrctl/snapstore';
import { S3RVER_CREDENTIALS, type S3rverInstance } from '../../snapstore/test/support/s3rver.js';
import { DeltaBuffer, deltaPayloadBytes } from '../../src/snapshotter/delta-buffer.js';
import type { Cleanups } from '../support/cleanups.js';

const MiB = 1024 * 1024;

/**
 * Openers of the stores a test copies between, all in container (bucket) `bucket`; every store is closed
 * after the test. `base` and `open` serve providers and tunings the openers do not cover.
 */
export function testStores(cleanups: Cleanups, bucket: string, s3rver: () => Promise<S3rverInstance>) {
  const base = (prefix: string, dir: string) => ({
    container: bucket,
    prefix,
    maxParallelChunkUploads: 3,
    minChunkSize: 5 * MiB,
    tempDir: dir,
  });
  const open = async (config: StoreConfig): Promise<SnapStore> => {
    const store = await openSnapStore(config);
    cleanups.push(() => store.close());
    return store;
  };
  return {
    base,
    open,
    local: (root: string, dir: string, prefix = 'v2') => open({ ...base(prefix, dir), provider: 'Local', rootDir: root }),
    s3: async (prefix: string, dir: string) =>
      open({ ...base(prefix, dir), provider: 'S3', endpointOverride: (await s3rver()).endpoint, credentials: S3RVER_CREDENTIALS }),
  };
}

/** A valid payload: a bbolt-sized random body (full) or a one-event delta JSON array, then sha256 of it. */
export function snapshotPayload(kind: 'Full' | 'Incr', size: number, rev = 1): Buffer {
  if (kind === 'Incr') {
    const b = new DeltaBuffer();
    b.append({
      type: 'PUT',
      key: Buffer.from(`/k/${rev}`),
      value: randomBytes(size),
      createRevision: rev,
      modRevision: rev,
      version: 1,
      lease: '0',
      time: '2027-01-01T00:00:00Z',
    });
    return deltaPayloadBytes(b.take()!);
  }
  const body = randomBytes(Math.ceil(size / 512) * 512);
  return Buffer.concat([body, createHash('sha256').update(body).digest()]);
}

/** Stores a snapshot named by the arguments with a valid payload, compressed as its suffix says. */
export async function putSnapshot(
  store: SnapStore,
  kind: 'Full' | 'Incr',
  start: number,
  last: number,
  createdOn: Date,
  opts: { suffix?: CompressionSuffix; isFinal?: boolean; size?: number } = {},
): Promise<Snapshot> {
  const snap = newSnapshot({
    kind,
    startRevision: start,
    lastRevision: last,
    createdOn,
    compressionSuffix: opts.suffix ?? '',
    isFinal: opts.isFinal ?? false,
  });
  const codec = createCompressStream(policyForSuffix(snap.compressionSuffix));
  await store.save(snap, Readable.from([snapshotPayload(kind, opts.size ?? 2048, last)]).pipe(codec));
  return snap;
}

/**
 * `inner`, except that reading `snapName` reports the bytes read so far after every chunk, so a test can
 * fault the copy of that object half-way through.
 */
export function withFetchProgress(inner: SnapStore, snapName: string, onBytes: (bytesSoFar: number) => void): SnapStore {
  return Object.assign(Object.create(inner) as SnapStore, {
    fetch: async (snap: Snapshot) => {
      const raw = await inner.fetch(snap);
      if (snap.snapName !== snapName) return raw;
      let seen = 0;
      return raw.pipe(
        new Transform({
          transform(chunk: Buffer, _enc, cb) {
            seen += chunk.length;
            onBytes(seen);
            cb(null, chunk);
          },
        }),
      );
    },
  });
}

/** The stored bytes of a snapshot, as they are in the store (compressed). */
export async function bytesOf(store: SnapStore, snap: Snapshot): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of await store.fetch(snap)) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}
