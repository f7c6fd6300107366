import type { Metrics } from '../metrics.js';
import type { ChainState } from './snapshotter-types.js';

/** Sets the gauges of the newest full, the newest delta and the deltas on top of the full from `chain`. */
export function updateLatestMetrics(m: Metrics, chain: ChainState): void {
  const { prevFull, prevDeltas } = chain;
  if (prevFull) {
    m.snapshotLatestRevision.labels('Full').set(prevFull.lastRevision);
    m.snapshotLatestTimestamp.labels('Full').set(Math.floor(prevFull.createdOn.getTime() / 1000));
  }
  const lastDelta = prevDeltas.at(-1);
  if (lastDelta) {
    m.snapshotLatestRevision.labels('Incr').set(lastDelta.lastRevision);
    m.snapshotLatestTimestamp.labels('Incr').set(Math.floor(lastDelta.createdOn.getTime() / 1000));
  }
  m.snapstoreLatestDeltasTotal.set(prevDeltas.length);
  const first = prevDeltas[0];
  m.snapstoreLatestDeltasRevisionsTotal.set(first && lastDelta ? lastDelta.lastRevision - first.startRevision : 0);
}
