import { pipeline } from 'node:stream/promises';
import { createDecompressStream, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import type { DeltaEvent } from '../../src/backup/delta-format.js';
import { DeltaPayloadParser } from '../../src/backup/delta-parse.js';

/** Every event of a stored delta snapshot, fetched, decompressed and parsed (its hash checked). */
export async function readDeltaEvents(store: SnapStore, snap: Snapshot): Promise<DeltaEvent[]> {
  const events: DeltaEvent[] = [];
  const parser = new DeltaPayloadParser(snap.snapName);
  parser.on('data', (e: DeltaEvent) => events.push(e));
  await pipeline(await store.fetch(snap), createDecompressStream(snap.compressionSuffix, snap.snapName), parser);
  return events;
}
