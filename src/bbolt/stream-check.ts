/**
 * The consistency check of check.ts on a bbolt file as it streams by (a full snapshot being downloaded),
 * without a copy on disk: each page is summarised when its bytes have arrived and then dropped, so memory
 * holds the summaries plus at most one page span. What the tree walk later looks at again is kept on the
 * way: every page's header (its id as two u32 halves, exact however corrupt, and its flags: 10 bytes a page,
 * for the messages about pages the tree reaches wrongly) and
 * the freelist page(s). What a caller wants of the file beyond the check it reads from the summaries (the
 * values and sub-buckets its SummaryWatch named, summary-view.ts): the etcd backend layer its store revision.
 *
 * The stream may carry more than the database (the sha256 trailer of a snapshot): bytes past the pages in
 * use are not looked at.
 */
import { Writable } from 'node:stream';
import { BoltError, selectMeta, type SelectedMeta } from './db.js';
import { walkSummaries, type CheckResult } from './check.js';
import { NO_WATCH, overflowTooLong, summarise, Summaries, type SummaryWatch } from './page-summaries.js';
import { SummaryView } from './summary-view.js';
import { FLAG_BRANCH, FLAG_FREELIST, FLAG_LEAF, PAGE_HEADER_SIZE, u16, u32, u64FromHalves } from './format.js';

/** Enough of the stream for both meta pages at any page size bbolt allows (64 KiB pages). */
const META_BYTES = 2 * 64 * 1024;

export type StreamCheckOutcome =
  /** The file could not be read as bbolt at all (no valid meta, or it ends inside the pages in use). */
  | { kind: 'unreadable'; error: BoltError }
  /** Checked; `summaries` when the check is ok, to read what the watch noted. */
  | { kind: 'checked'; check: CheckResult; summaries?: SummaryView };

/** A check that takes a file's bytes in order and then tells what it found (BoltStreamChecker, and the layers above). */
export interface StreamChecker<O> {
  /** Takes the next bytes; a promise means: wait for it before the next call. */
  write(chunk: Buffer): void | Promise<void>;
  /** After the last byte. */
  finish(): Promise<O>;
}

/** The check without a stream around it: bytes go in with `write`, the outcome comes from `finish`. */
export class BoltStreamChecker implements StreamChecker<StreamCheckOutcome> {
  private chunks: Buffer[] = [];
  /** Stream offset of chunks[0][0]. */
  private chunkStart = 0;
  /** Stream offset just past the last byte received. */
  private received = 0;
  private selected: SelectedMeta | undefined;
  private sums: Summaries | undefined;
  private headerIdLow: Uint32Array = new Uint32Array(0);
  private headerIdHigh: Uint32Array = new Uint32Array(0);
  private headerFlags: Uint16Array = new Uint16Array(0);
  private freelist: { start: number; bytes: Buffer } | undefined;
  /** The next page id to look at. */
  private next = 2;
  private failure: BoltError | undefined;

  constructor(
    /** Names the file in messages. */
    private readonly what: string,
    private readonly maxProblems = 1000,
    /** What to note while the pages go by, for the caller to read from `summaries`. */
    private readonly watch: SummaryWatch = NO_WATCH,
  ) {}

  /**
   * Takes the next bytes of the file (the chunk is kept until its pages are summarised: do not reuse it). A
   * promise only while the meta pages are being read (once, at the start): wait for it before the next call.
   */
  write(chunk: Buffer): void | Promise<void> {
    this.take(chunk);
    if (this.selected !== undefined || this.failure !== undefined || this.received < META_BYTES) return;
    return this.open();
  }

  /** After the last byte: what the check found. */
  finish(): Promise<StreamCheckOutcome> {
    return this.conclude();
  }

  private take(chunk: Buffer): void {
    if (this.failure !== undefined) return;
    this.chunks.push(chunk);
    this.received += chunk.length;
    if (this.selected !== undefined) this.advance();
  }

  /** Reads the meta pages from the first bytes and sets up the per-page state. */
  private async open(): Promise<void> {
    this.view(0, Math.min(this.received, META_BYTES));
    const head = this.viewBuf.subarray(this.viewAt, this.viewAt + Math.min(this.received, META_BYTES));
    try {
      this.selected = await selectMeta(
        async (buf, position) => {
          if (position + buf.length > head.length) throw new BoltError('E_BOLT_CORRUPT', `unexpected end of file at offset ${head.length}`);
          head.copy(buf, 0, position, position + buf.length);
        },
        head.length,
        this.what,
      );
    } catch (err) {
      this.failure = err instanceof BoltError ? err : new BoltError('E_BOLT_INVALID', `${this.what}: ${(err as Error).message}`);
      this.chunks = [];
      return;
    }
    const hwm = this.selected.meta.pgid;
    this.sums = new Summaries(hwm, this.selected.pageSize, this.watch);
    this.headerIdLow = new Uint32Array(hwm);
    this.headerIdHigh = new Uint32Array(hwm);
    this.headerFlags = new Uint16Array(hwm);
    this.advance();
  }

  /** Summarises every page whose bytes have all arrived, then drops the bytes before the next page. */
  private advance(): void {
    const { pageSize: ps, meta } = this.selected!;
    const hwm = meta.pgid;
    const sums = this.sums!;
    while (this.next < hwm) {
      const id = this.next;
      const off = id * ps;
      if (off + PAGE_HEADER_SIZE > this.received) break;
      this.view(off, PAGE_HEADER_SIZE);
      const idLow = u32(this.viewBuf, this.viewAt);
      const idHigh = u32(this.viewBuf, this.viewAt + 4);
      const hid = u64FromHalves(idHigh, idLow);
      const flags = u16(this.viewBuf, this.viewAt + 8);
      const overflow = u32(this.viewBuf, this.viewAt + 12);
      if (id === meta.freelist && this.freelist === undefined) {
        // Only the header is needed of a freelist page that is not one (the walk reports it).
        const whole = hid === id && (flags & FLAG_FREELIST) !== 0 && id + overflow < hwm;
        const span = whole ? (overflow + 1) * ps : ps;
        if (off + span > this.received) break;
        this.view(off, span);
        this.freelist = { start: off, bytes: Buffer.from(this.viewBuf.subarray(this.viewAt, this.viewAt + span)) };
      }
      if (hid === id && flags & (FLAG_BRANCH | FLAG_LEAF) && !overflowTooLong(sums, id, overflow, hwm)) {
        const span = (overflow + 1) * ps;
        if (off + span > this.received) break;
        this.view(off, span);
        summarise(sums, id, flags, this.viewBuf, this.viewAt, this.viewAt + span);
      }
      this.headerIdLow[id] = idLow;
      this.headerIdHigh[id] = idHigh;
      this.headerFlags[id] = flags;
      this.next++;
    }
    this.dropBefore(this.next >= hwm ? Infinity : this.next * ps);
  }

  /** Where the last view() put its bytes: fields, not a returned object, as it runs twice per page. */
  private viewBuf: Buffer = Buffer.alloc(0);
  private viewAt = 0;

  /**
   * Makes `len` bytes at stream offset `pos` (received, not dropped) readable at viewBuf[viewAt...]: in place
   * when one chunk holds them, else copied.
   */
  private view(pos: number, len: number): void {
    let start = this.chunkStart;
    let i = 0;
    while (start + this.chunks[i]!.length <= pos) start += this.chunks[i++]!.length;
    const c = this.chunks[i]!;
    if (pos + len <= start + c.length) {
      this.viewBuf = c;
      this.viewAt = pos - start;
      return;
    }
    const out = Buffer.allocUnsafe(len);
    let done = 0;
    for (let at = pos - start; done < len; i++, at = 0) {
      const part = this.chunks[i]!;
      done += part.copy(out, done, at, Math.min(part.length, at + len - done));
    }
    this.viewBuf = out;
    this.viewAt = 0;
  }

  private dropBefore(pos: number): void {
    while (this.chunks.length > 0 && this.chunkStart + this.chunks[0]!.length <= pos) {
      this.chunkStart += this.chunks.shift()!.length;
    }
  }

  private async conclude(): Promise<StreamCheckOutcome> {
    if (this.selected === undefined && this.failure === undefined) await this.open();
    if (this.failure !== undefined) return { kind: 'unreadable', error: this.failure };
    const { pageSize: ps, meta, metaPage, otherMetaProblem } = this.selected!;
    if (this.next < meta.pgid) {
      const error = new BoltError('E_BOLT_CORRUPT', `${this.what}: file ends at ${this.received}, inside the pages in use`);
      return { kind: 'unreadable', error };
    }
    const sums = this.sums!;
    const check = await walkSummaries(
      sums,
      {
        pageSize: ps,
        meta,
        otherMeta: otherMetaProblem === undefined ? undefined : { page: 1 - metaPage, problem: otherMetaProblem },
        header: async (id) => ({
          header: { id: u64FromHalves(this.headerIdHigh[id]!, this.headerIdLow[id]!), flags: this.headerFlags[id]!, count: 0, overflow: 0 },
          bytes: 0,
        }),
        read: async (buf, position) => {
          const fl = this.freelist;
          if (!fl || position < fl.start || position >= fl.start + fl.bytes.length) return 0;
          return fl.bytes.copy(buf, 0, position - fl.start);
        },
      },
      this.maxProblems,
    );
    check.bytesRead = this.received;
    if (!check.ok) return { kind: 'checked', check };
    return { kind: 'checked', check, summaries: new SummaryView(sums, meta.root) };
  }
}

/** A check as the end of a stream (the file's bytes piped in); `outcome` is set once it has finished. */
export class StreamingCheck<O> extends Writable {
  private outcomeValue: O | undefined;

  constructor(private readonly checker: StreamChecker<O>) {
    super({ highWaterMark: 1 << 20 });
  }

  /** Defined once the stream has finished. */
  get outcome(): O | undefined {
    return this.outcomeValue;
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    const opening = this.checker.write(chunk);
    if (opening) opening.then(() => cb(), cb);
    else cb();
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.checker.finish().then(
      (o) => {
        this.outcomeValue = o;
        cb();
      },
      (err: unknown) => cb(err as Error),
    );
  }
}
