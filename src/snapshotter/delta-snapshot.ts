import { Readable, pipeline as pipelineCb } from 'node:stream';
import {
  createCompressStream,
  encryptsNewSnapshots,
  newSnapshot,
  suffixForPolicy,
  type CompressionPolicy,
  type SnapStore,
  type Snapshot,
} from '@etcdbrctl/snapstore';
import { ByteCounter } from '../backup/byte-counter.js';
import { deltaPayloadBatches, type DeltaPayload } from './delta-buffer.js';
import type { SavedSizes } from './full-snapshot.js';

/**
 * Saves one delta payload as `Incr-<start>-<last event revision>-<unix>[suffix]`, where `start` is the
 * previous snapshot's last revision + 1 (upstream names deltas after the chain, not after their first
 * event, so a restore can check the chain is gapless).
 */
export async function saveDeltaSnapshot(
  store: SnapStore,
  delta: DeltaPayload,
  startRevision: number,
  compression: CompressionPolicy | undefined,
  createdOn: Date,
  signal?: AbortSignal,
): Promise<Snapshot> {
  return (await saveSizedDeltaSnapshot(store, delta, startRevision, compression, createdOn, signal)).snapshot;
}

/** saveDeltaSnapshot, also telling the snapshot's sizes. */
export async function saveSizedDeltaSnapshot(
  store: SnapStore,
  delta: DeltaPayload,
  startRevision: number,
  compression: CompressionPolicy | undefined,
  createdOn: Date,
  signal?: AbortSignal,
): Promise<{ snapshot: Snapshot } & SavedSizes> {
  const snap = newSnapshot({
    kind: 'Incr',
    startRevision,
    lastRevision: delta.lastRevision,
    createdOn,
    compressionSuffix: suffixForPolicy(compression),
    encrypted: encryptsNewSnapshots(store),
  });
  const stored = new ByteCounter();
  let encryptedBytes: number | undefined;
  const data = pipelineCb(Readable.from(deltaPayloadBatches(delta)), createCompressStream(compression), stored, () => {});
  await store.save(snap, data, { ...(signal ? { signal } : {}), onEncryptedSize: (n) => (encryptedBytes = n) });
  return { snapshot: snap, payloadBytes: delta.byteLength, storedBytes: encryptedBytes ?? stored.bytes };
}
