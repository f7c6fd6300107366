/**
 * What the hash drill remembers per distinct user key, without keeping the keys: an open-addressing table
 * (linear probing) keyed by a 64-bit fingerprint of the key, its columns typed arrays. A chain may touch a
 * million distinct keys; as JavaScript strings in a Map they cost ~130 bytes each (src/restorer/key-states.ts),
 * here 25 bytes a slot, 36-71 bytes a key at the table's load of 35-70 %.
 *
 * The fingerprint is two different CRCs of the key: CRC-32C and CRC-32 (IEEE, zlib's). Each detects every
 * difference within 32 consecutive bits, so keys of the same length that differ in one short stretch (the
 * usual `/registry/<kind>/<ns>/<name>`) never share a fingerprint; for others the chance is about 2^-64 per
 * pair (below 10^-7 for a million keys). Two keys that did share one would be taken for one key, which can only
 * make the drill's hash wrong, i.e. report a difference that is not there, never hide one that is.
 */
import { crc32 } from 'node:zlib';
import { crc32c } from '../encoding/crc32c.js';

const FIRST_SLOTS = 1024;
/** Grow when more than this share of the slots is used (linear probing slows down past it). */
const MAX_LOAD = 0.7;

export class KeyTable {
  private fpA = new Uint32Array(FIRST_SLOTS);
  private fpB = new Uint32Array(FIRST_SLOTS);
  private used = new Uint8Array(FIRST_SLOTS);
  /** Per slot: the ordinal of the key's newest entry at or below the compaction revision (-1: none). */
  newestOrdinal = new Float64Array(FIRST_SLOTS);
  /** Per slot: the first main revision above the compaction revision that touches the key (0: none). */
  firstAfter = new Float64Array(FIRST_SLOTS);
  /** Per slot: 1 when the key's newest entry so far is a put. */
  live = new Uint8Array(FIRST_SLOTS);
  private count = 0;
  private mask = FIRST_SLOTS - 1;

  /** Distinct keys in the table. */
  get size(): number {
    return this.count;
  }

  /** The key's slot, added (no entry seen, not live) when it has none. Slots move when the table grows. */
  slot(key: Buffer): number {
    const a = crc32c(key);
    const b = crc32(key) >>> 0;
    const found = this.probe(a, b);
    if (found >= 0) return found;
    if (this.count + 1 > (this.mask + 1) * MAX_LOAD) {
      this.grow();
      return this.insert(a, b, this.probe(a, b));
    }
    return this.insert(a, b, found);
  }

  /** The key's slot, or -1 when the table has none. */
  find(key: Buffer): number {
    const found = this.probe(crc32c(key), crc32(key) >>> 0);
    return found >= 0 ? found : -1;
  }

  /** The slot of (a, b), or `-(free slot) - 1` where it would go. */
  private probe(a: number, b: number): number {
    let i = b & this.mask;
    for (;;) {
      if (this.used[i] === 0) return -i - 1;
      if (this.fpA[i] === a && this.fpB[i] === b) return i;
      i = (i + 1) & this.mask;
    }
  }

  private insert(a: number, b: number, encodedFree: number): number {
    const i = -encodedFree - 1;
    this.used[i] = 1;
    this.fpA[i] = a;
    this.fpB[i] = b;
    this.newestOrdinal[i] = -1;
    this.firstAfter[i] = 0;
    this.live[i] = 0;
    this.count++;
    return i;
  }

  private grow(): void {
    const { fpA, fpB, used, newestOrdinal, firstAfter, live } = this;
    const slots = (this.mask + 1) * 2;
    this.fpA = new Uint32Array(slots);
    this.fpB = new Uint32Array(slots);
    this.used = new Uint8Array(slots);
    this.newestOrdinal = new Float64Array(slots);
    this.firstAfter = new Float64Array(slots);
    this.live = new Uint8Array(slots);
    this.mask = slots - 1;
    for (let old = 0; old < used.length; old++) {
      if (used[old] === 0) continue;
      const i = -this.probe(fpA[old]!, fpB[old]!) - 1;
      this.used[i] = 1;
      this.fpA[i] = fpA[old]!;
      this.fpB[i] = fpB[old]!;
      this.newestOrdinal[i] = newestOrdinal[old]!;
      this.firstAfter[i] = firstAfter[old]!;
      this.live[i] = live[old]!;
    }
  }
}
