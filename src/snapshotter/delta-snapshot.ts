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
import { deltaPayloadBatches, type DeltaPayload } from './delta-buffer.js';

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
  const snap = newSnapshot({
    kind: 'Incr',
    startRevision,
    lastRevision: delta.lastRevision,
    createdOn,
    compressionSuffix: suffixForPolicy(compression),
    encrypted: encryptsNewSnapshots(store),
  });
  const data = pipelineCb(Readable.from(deltaPayloadBatches(delta)), createCompressStream(compression), () => {});
  await store.save(snap, data, signal ? { signal } : {});
  return snap;
}
