/**
 * The scrub of one delta snapshot: downloaded, decompressed, its sha256 trailer checked, every event parsed
 * and its revisions gapless, ending at the revision its name claims and continuing what came before it.
 *
 * A delta is usually a few KiB. Those listed at up to SMALL_DELTA_BYTES are read whole and checked in one
 * synchronous pass (inflate, parse, hash): for objects that small, a chain of streams costs several times the
 * work itself (a zlib stream's buffers and its thread-pool round trips, an object stream per event), and a
 * scrub reads a thousand of them. Larger ones stream, so memory stays bounded whatever their size.
 */
import { Readable, Writable, addAbortSignal } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createDecompressStream, decompressBuffer, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import type { DeltaEvent } from '../backup/delta-format.js';
import { DeltaPayloadDecoder } from '../backup/delta-parse.js';
import { ByteCounter } from '../backup/byte-counter.js';
import { readProblem, sizeProblem, type ObjectVerdict } from './object-check.js';

/**
 * Deltas listed at up to this many (stored) bytes are read whole; the rest stream. With their decompressed
 * payloads capped at SMALL_PAYLOAD_BYTES (beyond, the held bytes stream through the decompressor instead),
 * a scrub's `maxFetchers` deltas in flight hold at most a few MiB each: the sidecar's memory stays bounded.
 */
export const SMALL_DELTA_BYTES = 256 * 1024;
const SMALL_PAYLOAD_BYTES = 4 * 1024 * 1024;

/** The revisions of a delta's events, followed as they are parsed. */
class RevisionTrack {
  events = 0;
  /** The last event's revision. */
  last = 0;
  /** The first revision above what the names before cover. */
  private firstAbove = 0;
  private order: string | undefined;

  constructor(private readonly covered: number) {}

  readonly see = (ev: DeltaEvent): void => {
    this.events++;
    const rev = ev.modRevision;
    if (this.last !== 0 && rev !== this.last && rev !== this.last + 1) {
      this.order ??= `event ${this.events} is at revision ${rev} after revision ${this.last} (revisions must follow each other)`;
    }
    if (this.firstAbove === 0 && rev > this.covered) this.firstAbove = rev;
    this.last = rev;
  };

  problem(snap: Snapshot): string | undefined {
    const covered = this.covered;
    if (this.order !== undefined) return this.order;
    if (this.events === 0) return 'it holds no events';
    if (this.last !== snap.lastRevision) return `its events end at revision ${this.last}, but its name claims ${snap.lastRevision}`;
    if (this.firstAbove !== covered + 1) {
      return `its first event after revision ${covered} is at revision ${this.firstAbove}: revisions ${covered + 1} to ${this.firstAbove - 1} are missing`;
    }
    return undefined;
  }
}

/** A stream's end for the decoder: each chunk parsed as it arrives, the trailer checked at the end. */
function decoderSink(decoder: DeltaPayloadDecoder, see: (ev: DeltaEvent) => void): Writable {
  return new Writable({
    write(chunk: Buffer, _enc, cb) {
      try {
        decoder.write(chunk, see);
        cb();
      } catch (err) {
        cb(err as Error);
      }
    },
    final(cb) {
      try {
        decoder.end();
        cb();
      } catch (err) {
        cb(err as Error);
      }
    },
  });
}

/**
 * The whole body of a stream, unless it grows past `limit` bytes: then only its length (it is read to the
 * end either way, so the count is the object's real size).
 */
async function readWhole(body: Readable, limit: number, signal?: AbortSignal): Promise<{ data?: Buffer; bytes: number }> {
  if (signal) addAbortSignal(signal, body);
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    bytes += chunk.length;
    if (bytes <= limit) chunks.push(chunk);
  }
  return bytes <= limit ? { data: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks), bytes } : { bytes };
}

/**
 * Scrubs one delta snapshot. `covered` is the revision the names before it reach: a restore skips events at
 * or below it (an overlap with the full, or the rest of a transaction the previous delta cut), and needs the
 * next revision after it.
 */
export async function verifyDelta(
  store: SnapStore,
  snap: Snapshot,
  covered: number,
  opts: { signal?: AbortSignal | undefined; smallDeltaBytes?: number | undefined } = {},
): Promise<ObjectVerdict> {
  const { signal } = opts;
  const small = opts.smallDeltaBytes ?? SMALL_DELTA_BYTES;
  const verdict: ObjectVerdict = { snapName: snap.snapName, kind: 'Incr', ok: false, bytes: 0, events: 0 };
  const track = new RevisionTrack(covered);
  // Keys, values and times are not kept: only the revisions are looked at.
  const decoder = new DeltaPayloadDecoder(`delta snapshot ${snap.snapName}`, { payloads: false, times: false });
  const counter = new ByteCounter();
  const streamed = async (source: Readable): Promise<void> => {
    const sink = decoderSink(decoder, track.see);
    await pipeline(source, counter, createDecompressStream(snap.compressionSuffix, snap.snapName), sink, signal ? { signal } : {});
  };
  try {
    if (snap.sizeBytes !== undefined && snap.sizeBytes <= small) {
      const whole = await readWhole(await store.fetch(snap, undefined, signal ? { signal } : {}), small, signal);
      verdict.bytes = whole.bytes;
      if (whole.data === undefined) {
        verdict.problem = sizeProblem(snap, whole.bytes) ?? `it is larger than the ${snap.sizeBytes} bytes the store lists`;
        return verdict;
      }
      const payload = decompressBuffer(snap.compressionSuffix, snap.snapName, whole.data, SMALL_PAYLOAD_BYTES);
      if (payload === undefined) await streamed(Readable.from([whole.data]));
      else {
        decoder.write(payload, track.see);
        decoder.end();
      }
    } else {
      await streamed(await store.fetch(snap, undefined, signal ? { signal } : {}));
      verdict.bytes = counter.bytes;
    }
  } catch (err) {
    verdict.bytes ||= counter.bytes;
    verdict.events = track.events;
    Object.assign(verdict, readProblem(err));
    return verdict;
  }
  verdict.events = track.events;
  verdict.revision = track.last;
  verdict.problem = sizeProblem(snap, verdict.bytes) ?? track.problem(snap);
  if (verdict.problem === undefined) {
    delete verdict.problem;
    verdict.ok = true;
  }
  return verdict;
}
