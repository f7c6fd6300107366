/**
 * What the offline replay remembers per distinct key it wrote, to check the next event of that key: the
 * create revision and version of its newest put, or that its newest event deleted it.
 *
 * Kept as columns (a Map from the key to a row number, two Float64Arrays) rather than an object per key: a
 * chain touches every key of a cluster, and the object cost 48 of the ~133 heap bytes a 33-byte key took
 * (the key's string ~56 and its Map entry ~29 are the rest). A deleted key is a row with version 0 (etcd's
 * versions of a live key start at 1). Float64 holds etcd's int64 revisions and versions exactly up to 2^53,
 * as every number of the replay does.
 *
 * The rows are shared with the offline compaction (compaction.ts), which numbers the keys in its first pass
 * (`ensureRow`) and keeps a column of its own by the same row: one Map lookup per event decides both the
 * check and whether the compaction keeps the event. A row added that way is not yet seen by the replay
 * (version NOT_SEEN) until its first event is written.
 */

/** The row of a key not seen yet. */
export const UNSEEN = -1;

const FIRST_ROWS = 1024;

/** The version of a row numbered before the replay wrote an event of its key. */
const NOT_SEEN = -1;

export class KeyStates {
  private readonly rows = new Map<string, number>();
  private createRevisions = new Float64Array(FIRST_ROWS);
  private versions = new Float64Array(FIRST_ROWS);

  /** Distinct keys remembered. */
  get size(): number {
    return this.rows.size;
  }

  /** The key's row, or UNSEEN. `id` is the key's bytes as a latin1 string (one char per byte). */
  row(id: string): number {
    return this.rows.get(id) ?? UNSEEN;
  }

  /** The key's row, numbered now (not seen by the replay yet) when it has none. */
  ensureRow(id: string): number {
    const row = this.rows.get(id);
    if (row !== undefined) return row;
    const at = this.add(id);
    this.versions[at] = NOT_SEEN;
    return at;
  }

  /** Whether the replay wrote an event of the key (false for UNSEEN). */
  seen(row: number): boolean {
    return row !== UNSEEN && this.versions[row]! !== NOT_SEEN;
  }

  /** Whether the key's newest event was a put (false for UNSEEN). */
  live(row: number): boolean {
    return row !== UNSEEN && this.versions[row]! > 0;
  }

  createRevision(row: number): number {
    return this.createRevisions[row]!;
  }

  version(row: number): number {
    return this.versions[row]!;
  }

  /** Records a put of the key (version >= 1) at `row` (UNSEEN: a new row); returns its row. */
  put(id: string, row: number, createRevision: number, version: number): number {
    const at = row === UNSEEN ? this.add(id) : row;
    this.createRevisions[at] = createRevision;
    this.versions[at] = version;
    return at;
  }

  /** Records a delete of the key at `row` (UNSEEN: a new row); returns its row. */
  delete(id: string, row: number): number {
    const at = row === UNSEEN ? this.add(id) : row;
    this.createRevisions[at] = 0;
    this.versions[at] = 0;
    return at;
  }

  private add(id: string): number {
    const at = this.rows.size;
    if (at === this.versions.length) {
      this.createRevisions = grown(this.createRevisions);
      this.versions = grown(this.versions);
    }
    this.rows.set(id, at);
    return at;
  }
}

/**
 * Twice the rows, for an amortized constant cost per key (the old array is garbage at once). Also grows the
 * columns other modules keep by these rows (compaction.ts).
 */
export function grown(a: Float64Array<ArrayBuffer>): Float64Array<ArrayBuffer> {
  const next = new Float64Array(a.length * 2);
  next.set(a);
  return next;
}
