/**
 * Parts kept as files in the snapstore temp directory (`--snapstore-temp-directory`), each written as its
 * bytes arrive (part-file.ts) with the digests its request must carry computed on the way, and removed once
 * its request has settled: the storage of the S3 upload, whose request reads the file afresh for every
 * attempt. Part buffers in memory (lib-storage, and the S3 upload until 2026-11) held `concurrency + 1`
 * parts, 30 MiB at the default 5 in flight of 5 MiB: more than the pod's memory could spare.
 *
 * The first part waits in memory while it may still be the whole object: a delta snapshot, or most objects a
 * copy sends, goes up as one request and touches no disk. Its chunks are copied, as the producer may reuse
 * them. Only when it is full is it written to a file, and the temp directory created (as upstream creates
 * it) on that first need.
 */
import { mkdir, rm } from 'node:fs/promises';
import type { Logger } from '../logger.js';
import { InternalError } from '../internal-errors.js';
import { spoolFilesFor } from '../spool-files.js';
import { describeError } from './common.js';
import { PartFileWriter, STAGING_BYTES, type PartFile, type PartFileOptions } from './part-file.js';
import type { PartFilling, PartStorage, SealedPart, WholeObject } from './upload-parts.js';

export class SpooledParts implements PartStorage<PartFile> {
  readonly fillsAhead = true;
  /** Part files on disk now, and at most over the upload (never more than `concurrency + 1`). */
  private files = 0;
  maxFiles = 0;
  // One staging buffer for the whole upload (only one part is written at a time), made when the first file is.
  private staging: Buffer | undefined;
  // Named so that an initialization can tell this process's parts from a killed one's (spool-files.ts).
  private spoolReady: Promise<(part: number) => string> | undefined;
  private fileSeq = 0;

  constructor(
    readonly dir: string,
    /** The digests every part's request carries (S3: CRC32 checksum, SHA-256 for a signed body). */
    private readonly digests: PartFileOptions,
    private readonly logger: Logger,
  ) {}

  open(first: boolean): PartFilling<PartFile> | Promise<PartFilling<PartFile>> {
    return first ? new HeadFilling(this) : this.openFile().then((w) => new FileFilling(this, w));
  }

  close(): void {}

  /** A new part file; E_SPOOL naming the directory when it cannot be made. */
  async openFile(): Promise<PartFileWriter> {
    try {
      this.spoolReady ??= mkdir(this.dir, { recursive: true }).then(() => spoolFilesFor(this.dir));
      const spoolFile = await this.spoolReady;
      this.staging ??= Buffer.allocUnsafe(STAGING_BYTES);
      const w = await PartFileWriter.create(spoolFile(++this.fileSeq), this.staging, this.digests);
      this.maxFiles = Math.max(this.maxFiles, ++this.files);
      return w;
    } catch (err) {
      throw this.spoolError(err);
    }
  }

  /** Closes a written part's file and says what its request needs; a file that cannot be finished goes. */
  async finish(w: PartFileWriter): Promise<SealedPart<PartFile>> {
    let part: PartFile;
    try {
      part = await w.finish();
    } catch (err) {
      await this.discard(w);
      throw this.spoolError(err);
    }
    return { body: part, size: part.size, release: () => this.remove(part.path) };
  }

  async discard(w: PartFileWriter): Promise<void> {
    this.files--;
    await w.discard();
  }

  spoolError(err: unknown): InternalError {
    if (err instanceof InternalError && err.code === 'E_SPOOL') return err;
    return new InternalError('E_SPOOL', `cannot write an upload part to the snapstore temp directory ${this.dir}: ${describeError(err)}`, {
      cause: err,
    });
  }

  private async remove(path: string): Promise<void> {
    this.files--;
    await rm(path, { force: true }).catch((err: unknown) =>
      this.logger.warn({ err: describeError(err), file: path }, 'could not remove a part file after its upload'),
    );
  }
}

/** The first part, in memory until it is full (then written to a file) or the input ends (then sent whole). */
class HeadFilling implements PartFilling<PartFile> {
  private readonly chunks: Buffer[] = [];
  private filled = 0;

  constructor(private readonly parts: SpooledParts) {}

  get size(): number {
    return this.filled;
  }

  append(bytes: Buffer): void {
    this.chunks.push(Buffer.from(bytes));
    this.filled += bytes.length;
  }

  async seal(): Promise<SealedPart<PartFile>> {
    // Larger than one part: from here on the object goes through part files, its first part included.
    const w = await this.parts.openFile();
    try {
      for (const c of this.chunks.splice(0)) await w.append(c);
    } catch (err) {
      await this.parts.discard(w);
      throw this.parts.spoolError(err);
    }
    return this.parts.finish(w);
  }

  whole(): WholeObject {
    return { bytes: Buffer.concat(this.chunks.splice(0), this.filled), release: () => undefined };
  }

  discard(): Promise<void> {
    this.chunks.length = 0;
    return Promise.resolve();
  }
}

/** A part after the first, written to its file as its bytes arrive. */
class FileFilling implements PartFilling<PartFile> {
  private done = false;

  constructor(
    private readonly parts: SpooledParts,
    private readonly writer: PartFileWriter,
  ) {}

  get size(): number {
    return this.writer.bytes;
  }

  async append(bytes: Buffer): Promise<void> {
    try {
      await this.writer.append(bytes);
    } catch (err) {
      throw this.parts.spoolError(err);
    }
  }

  seal(): Promise<SealedPart<PartFile>> {
    this.done = true; // finish removes the file itself when it fails
    return this.parts.finish(this.writer);
  }

  whole(): WholeObject {
    throw new InternalError('E_INVARIANT', 'only the first part of an upload can be its whole object');
  }

  async discard(): Promise<void> {
    if (this.done) return;
    this.done = true;
    await this.parts.discard(this.writer);
  }
}
