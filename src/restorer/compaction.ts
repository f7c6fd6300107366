/**
 * A compaction done while the offline writer writes the `key` bucket: the revisions a compaction at revision
 * C removes are never written, and `meta` records the compaction, so the result is the backend etcd leaves
 * after compacting at C (and after its background deletion finished), compact by construction.
 *
 * What etcd keeps (etcd server/mvcc: key_index.go `compact`/`doCompact`, kvstore_compaction.go
 * `scheduleCompaction`): for each key, the newest revision at or below C, unless that one is a tombstone
 * (then nothing of the key at or below C); every revision above C. Every other revision at or below C is
 * deleted from the `key` bucket. It records `scheduledCompactRev` when the compaction is accepted and
 * `finishedCompactRev` when the deletion is done, both in `meta` as a 17-byte revision (main C, sub 0); on
 * start etcd reads `finishedCompactRev` as the compacted revision (reads below it fail as compacted) and
 * resumes a compaction whose `scheduledCompactRev` is newer.
 *
 * Deciding an entry at or below C needs the key's newest revision at or below C, which comes later in the
 * bucket than the entry: a first pass over the base's `key` bucket and the deltas fills `CompactionIndex`.
 */
import { grown, UNSEEN, type KeyStates } from './key-states.js';
import { mainRevisionOf, revisionKey } from './mvcc.js';

/** Where a `key` bucket key marks a tombstone: 17 revision bytes, then `t`. */
const TOMBSTONE_KEY_BYTES = 18;
const MARK_TOMBSTONE = 0x74;

export function isTombstoneKey(revKey: Buffer): boolean {
  return revKey.length === TOMBSTONE_KEY_BYTES && revKey[TOMBSTONE_KEY_BYTES - 1] === MARK_TOMBSTONE;
}

/**
 * The user key of a stored `mvccpb.KeyValue` (field 1, which etcd always writes first), as a map id; undefined
 * for a value that does not start with it.
 */
export function storedKeyId(value: Buffer): string | undefined {
  if (value.length < 2 || value[0] !== 0x0a) return undefined;
  let len = 0;
  let shift = 0;
  let off = 1;
  for (;;) {
    if (off >= value.length || shift > 28) return undefined;
    const b = value[off++]!;
    len |= (b & 0x7f) << shift;
    if (b < 0x80) break;
    shift += 7;
  }
  if (off + len > value.length) return undefined;
  return value.toString('latin1', off, off + len);
}

/**
 * Per key, the newest main revision at or below the compaction revision (first pass). A key is written at
 * most once per main revision (etcd refuses a transaction that touches a key twice), so the main revision
 * names the entry. The keys are numbered by the replay's KeyStates (the rows are shared, so the replay decides
 * an event with the lookup it makes anyway); this is one number per row. Memory: see docs/performance.md "Restore" for the
 * measured figure per distinct key.
 */
export class CompactionIndex {
  /** By row: the newest main revision noted, 0 for none (etcd's revisions start at 1). */
  private newest = new Float64Array(1024);
  private noted = 0;

  /** `revision` bounds the writes noted; `settle` may lower it once the passes know the result's revision. */
  constructor(
    private at: number,
    private readonly keys: KeyStates,
  ) {}

  get revision(): number {
    return this.at;
  }

  /** Notes a write of `keyId` at `main` (in revision order); writes above the compaction revision are ignored. */
  note(keyId: string, main: number): void {
    if (main > this.at) return;
    const row = this.keys.ensureRow(keyId);
    while (row >= this.newest.length) this.newest = grown(this.newest);
    if (this.newest[row] === 0) this.noted++;
    this.newest[row] = main;
  }

  /** Compacts at `revision` instead: at or above every write noted (the result's newest revision). */
  settle(revision: number): void {
    this.at = revision;
  }

  get distinctKeys(): number {
    return this.noted;
  }

  /** Whether etcd's compaction keeps the `key` bucket entry `revKey` → `value` (an entry of the base). */
  keeps(revKey: Buffer, value: Buffer): boolean {
    const main = mainRevisionOf(revKey);
    if (main === undefined || main > this.at) return true;
    const keyId = storedKeyId(value);
    if (keyId === undefined) return true; // not an mvcc record: left as it is, as etcd's index never knew it
    const row = this.keys.row(keyId);
    return row !== UNSEEN && this.newestAt(row) === main && !isTombstoneKey(revKey);
  }

  /** Whether etcd's compaction keeps the event at `main` of the key at `row` (a delta's event, written by the replay). */
  keepsEvent(row: number, main: number, deletion: boolean): boolean {
    return main > this.at || (!deletion && this.newestAt(row) === main);
  }

  private newestAt(row: number): number {
    // Rows numbered after the first pass (keys first written above the compaction revision) have no note.
    return row < this.newest.length ? this.newest[row]! : 0;
  }
}

/** The `meta` value etcd stores for a compaction revision: the revision bytes of (main, 0). */
export function compactRevisionValue(revision: number): Buffer {
  return revisionKey(revision, 0, false);
}

/** The compaction revision recorded in a `meta` value (undefined when it is too short to hold one). */
export function compactRevisionOf(value: Buffer): number | undefined {
  return mainRevisionOf(value);
}
