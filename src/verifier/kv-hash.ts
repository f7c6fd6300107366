/**
 * etcd's HashKV computed from the `key` bucket entries of a backup, without etcd (etcd 3.5 server/mvcc
 * hash.go `unsafeHashByRev`, 3.4 mvcc/kvstore.go `HashByRev`; the same value from both by design):
 *
 *   CRC-32C over the bucket name `key`, then over each entry's revision key and KeyValue bytes, in revision
 *   order, for the entries at or below the hash revision M, except, at or below the member's compaction
 *   revision C, those a compaction at M would remove: an entry at or below C is hashed only when it is its
 *   key's newest at or below M and not a tombstone (etcd's `kvindex.Keep(M)`). When no key is live at M that
 *   set is empty and etcd filters nothing at or below C: it hashes what its compacted backend holds there,
 *   each key's newest entry at or below C unless a tombstone (3.5.16 keeps the tombstone at exactly C, and
 *   skips it in the hash so that older members agree). C is -1 on a member that never compacted: nothing is
 *   filtered then.
 *
 * A backup holds more history at or below C than the member (whatever compactions removed since the full
 * snapshot), so the filter is decided here from the whole chain. That takes two passes when C > 0:
 * `KeepIndex` learns, per key, which entry at or below C is its newest and the first revision above C that
 * touches it, and at which revisions no key is live; `KvHasher` then hashes, at any number of revisions M at
 * once (the bisection asks for several). Both are fed the same entries in the same order.
 */
import { KEY_BUCKET } from '../backend/schema.js';
import { crc32c } from '../encoding/crc32c.js';
import { KeyTable } from './key-table.js';
import type { KvRecord } from './kv-record.js';

/** The CRC after the bucket name, where every hash starts. */
const BUCKET_NAME_CRC = crc32c(KEY_BUCKET);

/** Pass one, for compaction revision C > 0 and hash revisions up to `upTo` (>= C). */
export class KeepIndex {
  readonly table = new KeyTable();
  private ordinal = 0;
  private liveKeys = 0;
  /** Bit m - C: no key is live at revision m, for m in [C, upTo]. */
  private readonly noLive: Uint8Array;
  /** The next revision whose liveness is still to be noted. */
  private nextNoted: number;

  constructor(
    readonly compactRevision: number,
    readonly upTo: number,
  ) {
    this.noLive = new Uint8Array(Math.floor((upTo - compactRevision) / 8) + 1);
    this.nextNoted = compactRevision;
  }

  /** The next entry (in revision order); entries above `upTo` are ignored. */
  feed(r: KvRecord): void {
    if (r.main > this.upTo) return;
    this.noteLivenessBelow(r.main);
    const t = this.table;
    const slot = t.slot(r.key);
    if (r.main <= this.compactRevision) t.newestOrdinal[slot] = this.ordinal++;
    else if (t.firstAfter[slot] === 0) t.firstAfter[slot] = r.main;
    const live = r.tombstone ? 0 : 1;
    this.liveKeys += live - t.live[slot]!;
    t.live[slot] = live;
  }

  /** After the last entry. */
  finish(): void {
    this.noteLivenessBelow(this.upTo + 1);
  }

  /** Whether no key is live at revision `m` (C <= m <= upTo): etcd's keep set is empty there. */
  noLiveKeyAt(m: number): boolean {
    const bit = m - this.compactRevision;
    return (this.noLive[bit >>> 3]! & (1 << (bit & 7))) !== 0;
  }

  /** Revisions below `main` are complete: their liveness is the count now. */
  private noteLivenessBelow(main: number): void {
    const last = Math.min(main - 1, this.upTo);
    for (; this.nextNoted <= last; this.nextNoted++) {
      if (this.liveKeys !== 0) continue;
      const bit = this.nextNoted - this.compactRevision;
      this.noLive[bit >>> 3]! |= 1 << (bit & 7);
    }
  }
}

/**
 * Pass two: the hash at each of `revisions` (ascending, each at or above C and above 0) for compaction revision
 * C; `keep` is pass one's index for C when C > 0 (with `upTo` at or above the largest revision).
 */
export class KvHasher {
  private readonly crcs: number[];
  private readonly top: number;
  private ordinal = 0;

  constructor(
    private readonly compactRevision: number,
    private readonly revisions: readonly number[],
    private readonly keep: KeepIndex | undefined,
  ) {
    this.crcs = revisions.map(() => BUCKET_NAME_CRC);
    this.top = revisions.at(-1) ?? 0;
  }

  /** Whether an entry at `main` is still needed (entries come in revision order). */
  wants(main: number): boolean {
    return main <= this.top;
  }

  feed(r: KvRecord): void {
    const { revisions, crcs } = this;
    if (r.main > this.top) return;
    const c = this.compactRevision;
    if (c > 0 && r.main <= c) {
      const ordinal = this.ordinal++;
      if (r.tombstone) return;
      const keep = this.keep!;
      const slot = keep.table.find(r.key);
      if (slot < 0 || keep.table.newestOrdinal[slot] !== ordinal) return;
      const touched = keep.table.firstAfter[slot]!;
      for (let j = 0; j < revisions.length; j++) {
        const m = revisions[j]!;
        if (touched === 0 || touched > m || keep.noLiveKeyAt(m)) crcs[j] = crc32c(r.value, crc32c(r.revKey, crcs[j]));
      }
      return;
    }
    for (let j = revisions.length - 1; j >= 0 && revisions[j]! >= r.main; j--) crcs[j] = crc32c(r.value, crc32c(r.revKey, crcs[j]));
  }

  /** The hashes, in the order of the revisions. */
  hashes(): number[] {
    return [...this.crcs];
  }
}
