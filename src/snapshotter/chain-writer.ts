import { creationTimeAfter, type Snapshot } from '@etcdbrctl/snapstore';
import { releaseDeltaPayload, type DeltaPayload } from './delta-buffer.js';
import { saveSizedDeltaSnapshot } from './delta-snapshot.js';
import { fullSnapshotToReuse } from './full-skip.js';
import { takeSizedFullSnapshot, type SavedSizes } from './full-snapshot.js';
import { updateLatestMetrics } from './chain-metrics.js';
import type { ChainState, SnapshotterConfig, SnapshotterDeps } from './snapshotter-types.js';

/**
 * Writes full and delta snapshots to the store, and keeps the chain (what the store holds, newest first),
 * the snapshot metrics and the `onSnapshot` hook up to date. Which snapshot to write when is the
 * snapshotter's; this only writes one.
 */
export class ChainWriter {
  constructor(
    private readonly config: SnapshotterConfig,
    private readonly deps: SnapshotterDeps,
    readonly chain: ChainState,
  ) {}

  /** A final full already at etcd's current revision (fullSnapshotToReuse: the one skip rule), else undefined. */
  async finalFullToReuse(): Promise<Snapshot | undefined> {
    // Only a final full can be a duplicate: read the revision only then.
    const rev = await this.deps.client.currentRevision(this.config.connectionTimeoutMs);
    const reuse = fullSnapshotToReuse(this.chain.prevSnapshot, true, rev);
    if (reuse) {
      this.deps.logger.info(
        { snapshot: reuse.snapName, revision: rev },
        'There are no new updates since previous final full snapshot, skipping new final full snapshot.',
      );
    }
    return reuse;
  }

  /** Takes a full snapshot and stores it; `onStored` runs once the chain holds it, before `onSnapshot`. */
  async writeFull(isFinal: boolean, onStored: (snap: Snapshot) => void): Promise<Snapshot> {
    const store = await this.deps.store();
    const prev = this.chain.prevSnapshot;
    const started = this.deps.clock.now().getTime();
    let snap: Snapshot;
    let sizes: SavedSizes;
    try {
      ({ snapshot: snap, ...sizes } = await takeSizedFullSnapshot(
        {
          client: this.deps.client,
          store,
          compression: this.config.compression,
          // After the previous snapshot when it ends at the same revision (a full right after a delta, as a final
          // full after the last delta), also in upstream's order, which compares only the creation second.
          now: (revision) => creationTimeAfter(this.deps.clock.now(), prev ? [prev] : [], revision),
          logger: this.deps.logger,
        },
        { isFinal, snapshotTimeoutMs: this.config.snapshotTimeoutMs, connectionTimeoutMs: this.config.connectionTimeoutMs },
      ));
    } catch (err) {
      this.chain.prevFullSucceeded = false;
      this.deps.metrics.snapshotDurationSeconds.labels('Full', 'false').observe((this.deps.clock.now().getTime() - started) / 1000);
      throw err;
    }
    this.deps.metrics.snapshotDurationSeconds.labels('Full', 'true').observe((this.deps.clock.now().getTime() - started) / 1000);
    this.chain.prevSnapshot = snap;
    this.chain.prevFull = snap;
    this.chain.prevDeltas = [];
    this.chain.prevFullSucceeded = true;
    onStored(snap);
    this.deps.metrics.snapshotRequired.labels('Full').set(0);
    this.deps.metrics.snapshotSizeBytes.labels('Full').set(sizes.storedBytes);
    updateLatestMetrics(this.deps.metrics, this.chain);
    await this.notify(snap, sizes.payloadBytes);
    return snap;
  }

  /**
   * Stores `payload` as the delta that starts at `startRevision`, and frees its slabs once stored. `onStored`
   * runs once the chain holds it, before `onSnapshot`.
   */
  async writeDelta(payload: DeltaPayload, startRevision: number, onStored: (snap: Snapshot) => void): Promise<Snapshot> {
    const store = await this.deps.store();
    const started = this.deps.clock.now().getTime();
    let snap: Snapshot;
    let storedBytes: number;
    try {
      ({ snapshot: snap, storedBytes } = await saveSizedDeltaSnapshot(
        store,
        payload,
        startRevision,
        this.config.compression,
        // After a full snapshot at the same revision (a delta that ends where the full does): sorted after it in
        // every reader, it is the full's first delta, whose events the full already holds.
        creationTimeAfter(this.deps.clock.now(), this.chain.prevSnapshot ? [this.chain.prevSnapshot] : [], payload.lastRevision),
      ));
    } catch (err) {
      this.deps.metrics.snapshotDurationSeconds.labels('Incr', 'false').observe((this.deps.clock.now().getTime() - started) / 1000);
      // A failed save may leave a write in flight that still reads the slabs: they are the collector's to free.
      throw err;
    }
    // Stored: nothing reads the slabs any more.
    releaseDeltaPayload(payload);
    this.deps.metrics.snapshotDurationSeconds.labels('Incr', 'true').observe((this.deps.clock.now().getTime() - started) / 1000);
    this.deps.logger.info({ snapshot: snap.snapName, events: payload.events }, 'Delta snapshot saved');
    this.chain.prevSnapshot = snap;
    this.chain.prevDeltas.push(snap);
    onStored(snap);
    this.deps.metrics.snapshotSizeBytes.labels('Incr').set(storedBytes);
    updateLatestMetrics(this.deps.metrics, this.chain);
    await this.notify(snap, payload.byteLength);
    return snap;
  }

  private async notify(snap: Snapshot, uncompressedBytes: number): Promise<void> {
    if (!this.deps.onSnapshot) return;
    try {
      await this.deps.onSnapshot(snap, { uncompressedBytes, baseFull: this.chain.prevFull });
    } catch (err) {
      this.deps.logger.warn({ err, snapshot: snap.snapName }, 'post-snapshot hook failed');
    }
  }
}
