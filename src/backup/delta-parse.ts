import { CodedError } from '../errors.js';
import { createHash, type Hash } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import { decodeBase64 } from './base64.js';
import { decodeCanonicalElement, readCanonicalElement, type ElementEnd, type ElementReading } from './delta-element.js';
import { isLeaseTtl, MAX_LEASE_TTL_SECONDS, type DeltaEvent } from './delta-format.js';
import { SHA256_SIZE } from './full-verify.js';

export class DeltaPayloadError extends CodedError {
  readonly code = 'E_DELTA_PAYLOAD';
  override readonly name = 'DeltaPayloadError';
}

const enum State {
  BeforeArray,
  BetweenElements,
  AfterComma,
  InElement,
  AfterArray,
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;

/** Index of the first `byte` in `buf` at or after `from`, or `buf.length` when there is none. */
function indexOrEnd(buf: Buffer, byte: number, from: number): number {
  const at = buf.indexOf(byte, from);
  return at === -1 ? buf.length : at;
}

function isSpace(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}

// Lease IDs are int64 and exceed 2^53: quote them before JSON.parse sees them. Only the `lease`
// field of a kv is a bare number that can be that large; base64 and times cannot contain `"lease":`.
const LEASE_RE = /"lease":(-?\d+)/g;

interface RawKv {
  key?: string;
  create_revision?: number;
  mod_revision?: number;
  version?: number;
  value?: string;
  lease?: string;
}
interface RawElement {
  etcdEvent?: { type?: number; kv?: RawKv };
  time?: string;
  /** Ours (DeltaEvent.leaseTTL). */
  leaseTTL?: unknown;
}

/**
 * The general path: one element (its JSON text) through JSON.parse, for any element the fast path
 * (delta-element.ts) does not take. `where` names the event in errors.
 */
export function decodeElementJson(text: string, where: string): DeltaEvent {
  let raw: RawElement;
  try {
    raw = JSON.parse(text.replace(LEASE_RE, '"lease":"$1"')) as RawElement;
  } catch (err) {
    throw new DeltaPayloadError(`${where} is not valid JSON: ${(err as Error).message}`);
  }
  return toEvent(raw, where);
}

function toEvent(raw: RawElement, where: string): DeltaEvent {
  const ev = raw.etcdEvent;
  if (!ev || typeof ev !== 'object' || !ev.kv) throw new DeltaPayloadError(`${where}: element has no etcdEvent.kv`);
  const type = ev.type ?? 0;
  if (type !== 0 && type !== 1) throw new DeltaPayloadError(`${where}: unexpected event type ${type}`);
  const kv = ev.kv;
  const leaseTTL = raw.leaseTTL ?? 0;
  if (typeof leaseTTL !== 'number' || (leaseTTL !== 0 && !isLeaseTtl(leaseTTL))) {
    throw new DeltaPayloadError(
      `${where}: leaseTTL ${JSON.stringify(leaseTTL)} is not a lease TTL (whole seconds from 1 to ${MAX_LEASE_TTL_SECONDS})`,
    );
  }
  const out: DeltaEvent = {
    type: type === 1 ? 'DELETE' : 'PUT',
    key: Buffer.from(kv.key ?? '', 'base64'),
    value: Buffer.from(kv.value ?? '', 'base64'),
    createRevision: kv.create_revision ?? 0,
    modRevision: kv.mod_revision ?? 0,
    version: kv.version ?? 0,
    lease: kv.lease ?? '0',
    time: raw.time ?? '',
  };
  if (leaseTTL > 0) out.leaseTTL = leaseTTL;
  return out;
}

/**
 * How much of a decompressed delta to read at a time for parsing: small enough that one chunk's events die
 * young in V8's (2 MiB) young generation, large enough that a read costs nothing per event.
 */
export const DELTA_READ_BYTES = 64 * 1024;

export interface DeltaPayloadParserOptions {
  /**
   * Decode keys and values (default). Without, events carry empty keys and values: for a reader that only
   * checks a payload (verify), which is spared an allocation per key and value.
   */
  payloads?: boolean;
  /**
   * With payloads, decode values too (default). Without, values are checked and left empty, and `valueOf`
   * decodes one on request: for a reader of keys and revisions (the offline compaction's first pass) or of few
   * values (its replay, which writes one event in ten), spared the larger half of the decoding.
   */
  values?: boolean;
  /** Keep each event's time (default). Without, times are left empty: for readers that do not use them. */
  times?: boolean;
  /**
   * The payload's sha256 trailer was checked before (restore's fetch checks it on the way to disk): it is
   * still told apart from the JSON, but not hashed again.
   */
  hashChecked?: boolean;
  /**
   * Read and check the first this many events, but do not emit them: the events a delta shares with the one
   * before it in a chain, already applied from that one (restorer/overlap.ts).
   */
  skipEvents?: number;
}

/**
 * Reads a decompressed delta payload (JSON array ‖ sha256) chunk by chunk into DeltaEvent objects, one element
 * at a time, synchronously. Elements in the exact shape Go (and our snapshotter) writes are read straight from
 * the bytes (delta-element.ts); any other element goes through JSON.parse, which has the last word on what it
 * means.
 */
export class DeltaPayloadDecoder {
  private readonly hash: Hash | undefined;
  private tail: Buffer = Buffer.alloc(0);
  private state = State.BeforeArray;
  private depth = 0;
  private inString = false;
  private escaped = false;
  private element: Buffer[] = [];
  private elementStart = 0;
  private count = 0;
  private offset = 0;

  private readonly reading: ElementReading;
  private readonly skipEvents: number;
  /** Where the fast path's last element ended, and where its value lies when it was not decoded. */
  private readonly at: ElementEnd = { end: 0, valueStart: -1, valueEnd: -1 };
  /** The bytes `at` points into, for `valueOf`. */
  private elementBytes: Buffer = Buffer.alloc(0);

  /** Told each event, in order, as soon as its element is complete. */
  private emit: (ev: DeltaEvent) => void = () => undefined;

  constructor(
    private readonly what = 'delta snapshot',
    opts: DeltaPayloadParserOptions = {},
  ) {
    this.reading = { payloads: opts.payloads ?? true, values: opts.values ?? true, times: opts.times ?? true };
    this.hash = opts.hashChecked ? undefined : createHash('sha256');
    this.skipEvents = opts.skipEvents ?? 0;
  }

  /** Number of events emitted so far. */
  get events(): number {
    return this.count;
  }

  /**
   * The value of `ev`, the event being emitted (call it from `emit` only: the bytes it is decoded from are the
   * current chunk's). With `values: false` it is decoded only now, for a reader that needs few of the values.
   */
  valueOf(ev: DeltaEvent): Buffer {
    if (this.at.valueStart < 0) return ev.value;
    // The fast path checked it is base64.
    return decodeBase64(this.elementBytes, this.at.valueStart, this.at.valueEnd) ?? ev.value;
  }

  /** Reads the next bytes of the payload, telling `emit` each event completed; throws DeltaPayloadError. */
  write(chunk: Buffer, emit: (ev: DeltaEvent) => void): void {
    this.emit = emit;
    if (chunk.length >= SHA256_SIZE) {
      // The held-back bytes are JSON after all, then all of this chunk but its last 32: read in that order,
      // without joining them (a copy of every chunk).
      const held = this.tail;
      const cut = chunk.length - SHA256_SIZE;
      this.tail = Buffer.from(chunk.subarray(cut));
      if (held.length > 0) this.read(held);
      if (cut > 0) this.read(chunk.subarray(0, cut));
      return;
    }
    const joined = Buffer.concat([this.tail, chunk]);
    const usable = joined.length - SHA256_SIZE;
    if (usable <= 0) {
      this.tail = Buffer.from(joined);
      return;
    }
    this.tail = Buffer.from(joined.subarray(usable));
    this.read(joined.subarray(0, usable));
  }

  /** Bytes known to be JSON (not the trailer): hashed and scanned. */
  private read(body: Buffer): void {
    this.hash?.update(body);
    this.scan(body);
  }

  private scan(buf: Buffer): void {
    this.elementStart = this.state === State.InElement ? 0 : -1;
    // Where the next quote and backslash lie from the current position on (recomputed once passed).
    let nextQuote = -1;
    let nextBackslash = -1;
    for (let i = 0; i < buf.length; i++) {
      const b = buf[i]!;
      switch (this.state) {
        case State.InElement:
          if (this.inString) {
            if (this.escaped) this.escaped = false;
            else if (b === BACKSLASH) this.escaped = true;
            else if (b === QUOTE) this.inString = false;
            else {
              // Most of an event is inside strings (base64 keys and values): jump to the string's next
              // quote or backslash instead of looking at every byte.
              if (nextQuote < i) nextQuote = indexOrEnd(buf, QUOTE, i);
              if (nextBackslash < i) nextBackslash = indexOrEnd(buf, BACKSLASH, i);
              i = Math.min(nextQuote, nextBackslash) - 1;
            }
          } else if (b === QUOTE) {
            this.inString = true;
          } else if (b === OPEN_BRACE || b === OPEN_BRACKET) {
            this.depth++;
          } else if (b === CLOSE_BRACE || b === CLOSE_BRACKET) {
            this.depth--;
            if (this.depth === 0) {
              if (this.element.length === 0) this.emitElement(buf, this.elementStart, i + 1);
              else {
                this.element.push(buf.subarray(0, i + 1));
                const whole = Buffer.concat(this.element);
                this.element = [];
                this.emitElement(whole, 0, whole.length);
              }
              this.state = State.BetweenElements;
            }
          }
          break;
        case State.BeforeArray:
          if (b === OPEN_BRACKET) this.state = State.AfterComma;
          else if (!isSpace(b)) this.fail(`expected '[' at byte ${this.offset + i}`);
          break;
        case State.AfterComma:
        case State.BetweenElements:
          if (isSpace(b)) break;
          if (b === OPEN_BRACE && this.state === State.AfterComma) {
            // Most elements are canonical and lie inside the chunk: read them and find their end in one pass.
            const ev = readCanonicalElement(buf, i, buf.length, this.reading, this.at);
            if (ev) {
              this.elementBytes = buf;
              if (++this.count > this.skipEvents) this.emit(ev);
              i = this.at.end - 1;
              this.state = State.BetweenElements;
              break;
            }
            this.state = State.InElement;
            this.depth = 1;
            this.elementStart = i;
          } else if (b === COMMA && this.state === State.BetweenElements) {
            this.state = State.AfterComma;
          } else if (b === CLOSE_BRACKET && (this.state === State.BetweenElements || this.count === 0)) {
            this.state = State.AfterArray;
          } else {
            this.fail(`unexpected byte 0x${b.toString(16)} at byte ${this.offset + i}`);
          }
          break;
        case State.AfterArray:
          if (!isSpace(b)) this.fail(`data after the closing ']' at byte ${this.offset + i}`);
          break;
      }
    }
    if (this.state === State.InElement) this.element.push(Buffer.from(buf.subarray(this.elementStart)));
    this.offset += buf.length;
  }

  /** Emits the event of the element in buf[start, end). */
  private emitElement(buf: Buffer, start: number, end: number): void {
    const fast = decodeCanonicalElement(buf, start, end, this.reading, this.at);
    // JSON.parse's event carries its value decoded.
    if (!fast) this.at.valueStart = -1;
    const ev = fast ?? decodeElementJson(buf.toString('utf8', start, end), `${this.what}: event ${this.count}`);
    this.elementBytes = buf;
    if (++this.count > this.skipEvents) this.emit(ev);
  }

  private fail(msg: string): never {
    throw new DeltaPayloadError(`${this.what}: ${msg}`);
  }

  /** After the last byte: checks that the array ended and the trailer is its sha256; throws DeltaPayloadError. */
  end(): void {
    if (this.offset === 0 && this.tail.length <= SHA256_SIZE) {
      throw new DeltaPayloadError(`${this.what}: delta snapshot is missing hash`);
    }
    if (this.state !== State.AfterArray) {
      throw new DeltaPayloadError(`${this.what}: truncated JSON array (ended after ${this.count} events)`);
    }
    if (this.hash === undefined) return;
    const digest = this.hash.digest();
    if (!digest.equals(this.tail)) {
      throw new DeltaPayloadError(`${this.what}: expected sha256 ${this.tail.toString('hex')}, got ${digest.toString('hex')}`);
    }
  }
}

/**
 * Streams a decompressed delta payload (JSON array ‖ sha256) into DeltaEvent objects, one element at
 * a time, so a 200 MB delta is never one string (DeltaPayloadDecoder in a stream). The trailer is checked at
 * the end: consumers that must not act on unverified events should buffer or spool until the stream finished.
 */
export class DeltaPayloadParser extends Transform {
  private readonly decoder: DeltaPayloadDecoder;
  private readonly pushEvent = (ev: DeltaEvent): void => void this.push(ev);

  constructor(what = 'delta snapshot', opts: DeltaPayloadParserOptions = {}) {
    super({ readableObjectMode: true });
    this.decoder = new DeltaPayloadDecoder(what, opts);
  }

  /** Number of events emitted so far. */
  get events(): number {
    return this.decoder.events;
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    try {
      this.decoder.write(chunk, this.pushEvent);
      cb();
    } catch (err) {
      cb(err as Error);
    }
  }

  override _flush(cb: TransformCallback): void {
    try {
      this.decoder.end();
      cb();
    } catch (err) {
      cb(err as Error);
    }
  }
}
