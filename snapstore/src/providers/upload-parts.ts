/**
 * Where the parts of a multipart upload wait for their request, and the cutting of the input into them.
 * Two kinds of storage: part buffers in memory (memory-parts.ts: ABS, Swift, OSS) and part files in the
 * snapstore temp directory (spooled-parts.ts: S3). The upload engine (multipart-upload.ts) sees only this
 * interface; a provider picks the storage whose part (`P`) its requests take as their body.
 */
import { InternalError } from '../internal-errors.js';
import { UploadFailedError } from './upload-failed.js';

/** The part being filled. */
export interface PartFilling<P> {
  /** Bytes appended so far. */
  readonly size: number;
  /** Appends `bytes`, which the caller may reuse once this resolved (a producer's chunk may be a view it reuses). */
  append(bytes: Buffer): void | Promise<void>;
  /** The part, ready to send; the filling is done with. */
  seal(): Promise<SealedPart<P>>;
  /** The bytes as one buffer in memory, for an object sent whole; the filling is done with. */
  whole(): WholeObject;
  /** Drops the part (its bytes go nowhere); never throws. */
  discard(): Promise<void>;
}

/** A part ready to send: `body` is what its request sends, `release` frees it once the request has settled. */
export interface SealedPart<P> {
  body: P;
  size: number;
  release(): Promise<void>;
}

/** An input that ended within the first part, in memory, for one request that stores it whole. */
export interface WholeObject {
  bytes: Buffer;
  release(): void;
}

export interface PartStorage<P> {
  /**
   * Whether the next part may be filled while every request slot is busy. Files on disk: yes, so the next
   * part is ready the moment a slot frees (at most `concurrency + 1` parts then). Buffers in memory: no, an
   * upload then holds at most one buffer per slot.
   */
  readonly fillsAhead: boolean;
  /** A new part; `first` tells the upload's first part from the others (its object may still fit one request). */
  open(first: boolean): PartFilling<P> | Promise<PartFilling<P>>;
  /** The upload ended and every request has settled: what the storage still holds can go. */
  close(): void;
}

/** What the cutter hands on: a full part (or the last one), or the whole object when it fits the first part. */
export type CutItem<P> = { part: SealedPart<P>; whole?: undefined } | { whole: WholeObject; part?: undefined };

const EMPTY: WholeObject = { bytes: Buffer.alloc(0), release: () => undefined };

/**
 * Cuts `input` into parts of exactly `partSize` bytes (the last one shorter) kept by `storage`. A part is
 * opened when the first byte for it arrives, so an input that ends on a part boundary takes no spare.
 * With `whole`, an input that ends within the first part (an empty one too) is handed on as a
 * {@link WholeObject} instead. The input's own errors pass as they are; the storage's are wrapped as
 * `UploadFailedError('spool', …)`. A part being filled when the consumer stops is discarded.
 */
export async function* cutParts<P>(
  input: AsyncIterable<unknown>,
  partSize: number,
  storage: PartStorage<P>,
  whole: boolean,
): AsyncGenerator<CutItem<P>> {
  let filling: PartFilling<P> | undefined;
  let first = true;
  try {
    for await (const piece of input) {
      const chunk = toBytes(piece);
      for (let off = 0; off < chunk.length;) {
        try {
          filling ??= await storage.open(first);
        } catch (err) {
          throw new UploadFailedError('spool', err);
        }
        const n = Math.min(partSize - filling.size, chunk.length - off);
        try {
          await filling.append(off === 0 && n === chunk.length ? chunk : chunk.subarray(off, off + n));
        } catch (err) {
          throw new UploadFailedError('spool', err);
        }
        off += n;
        if (filling.size < partSize) continue;
        const part = await sealed(filling);
        filling = undefined;
        first = false;
        yield { part };
      }
    }
    if (first && whole) {
      const bytes = filling?.whole() ?? EMPTY;
      filling = undefined;
      yield { whole: bytes };
    } else if (filling) {
      const part = await sealed(filling);
      filling = undefined;
      yield { part };
    }
  } finally {
    await filling?.discard();
  }
}

async function sealed<P>(filling: PartFilling<P>): Promise<SealedPart<P>> {
  try {
    return await filling.seal();
  } catch (err) {
    throw new UploadFailedError('spool', err);
  }
}

function toBytes(piece: unknown): Buffer {
  if (Buffer.isBuffer(piece)) return piece;
  if (piece instanceof Uint8Array) return Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength);
  if (typeof piece === 'string') return Buffer.from(piece);
  throw new InternalError('E_BAD_INPUT', `snapshot stream yielded ${typeof piece}, expected bytes`);
}
