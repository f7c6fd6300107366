/**
 * What the offline replay remembers of each key it wrote (create revision, version, live), looked up by the
 * key's bytes once per event: a million times for a million revisions.
 *
 * A Map keyed by the key as a string made a new string per event and hashed it; here the bytes are hashed
 * in place (FNV-1a, 30 bits: a small integer, V8's fastest Map key) and a hit is confirmed against the key
 * kept as a one-byte string (one per distinct key, as compact as V8 stores text; a Buffer per key would pin
 * the 8 KiB pool slab it was cut from). Keys whose hashes collide are chained.
 */

export interface KeyState {
  createRevision: number;
  version: number;
  live: boolean;
}

interface Entry extends KeyState {
  /** The key's bytes as a latin1 string (one char per byte). */
  readonly id: string;
  next: Entry | undefined;
}

/** FNV-1a over the bytes, cut to 30 bits so the result stays a small integer. */
export function fnv1a30(key: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key[i]!, 0x01000193);
  return h & 0x3fffffff;
}

function sameKey(id: string, key: Uint8Array): boolean {
  if (id.length !== key.length) return false;
  for (let i = 0; i < key.length; i++) if (id.charCodeAt(i) !== key[i]) return false;
  return true;
}

export class KeyStates {
  private readonly byHash = new Map<number, Entry>();
  private count = 0;

  /** `hash` is for tests (a constant one makes every key collide). */
  constructor(private readonly hash: (key: Uint8Array) => number = fnv1a30) {}

  get size(): number {
    return this.count;
  }

  /** The state of `key`, updated in place by the caller (no new object per event). */
  get(key: Uint8Array): KeyState | undefined {
    for (let e = this.byHash.get(this.hash(key)); e !== undefined; e = e.next) if (sameKey(e.id, key)) return e;
    return undefined;
  }

  /** Remembers a key not seen before (the caller has checked with `get`). */
  add(key: Buffer, state: KeyState): void {
    const h = this.hash(key);
    const entry: Entry = {
      createRevision: state.createRevision,
      version: state.version,
      live: state.live,
      id: key.toString('latin1'),
      next: this.byHash.get(h),
    };
    this.byHash.set(h, entry);
    this.count++;
  }
}
