/**
 * One upload part written to a file as its bytes arrive, with the CRC32 and SHA-256 its request must carry
 * computed on the way, so nothing reads the file again until the part is sent.
 *
 * Why files: an upload with `n` parts in flight held `n + 1` part buffers (30 MiB at upstream's default of
 * 5 in flight of 5 MiB), which took an uncompressed full snapshot past the 128 MiB a pod gives the sidecar. Upstream
 * writes the whole snapshot to `--snapstore-temp-directory` before it uploads sections of that file; here only
 * the parts in flight and the one being filled are on disk, and each file goes once its part has settled.
 *
 * Bytes are copied into one small staging buffer and written when it is full: the input's chunks may be views
 * of buffers their producer reuses, so they are not kept, and a write per chunk would cost a system call per
 * gRPC message.
 */
import { createHash, type Hash } from 'node:crypto';
import { open, rm, type FileHandle } from 'node:fs/promises';
import { crc32 } from 'node:zlib';

/** Large enough that writes cost little, small enough that the idle sidecar does not notice it. */
export const STAGING_BYTES = 256 * 1024;

/** A part on disk and what its request says about its bytes. */
export interface PartFile {
  path: string;
  size: number;
  /** Base64 of the big-endian CRC32, as S3's `x-amz-checksum-crc32`; when asked for. */
  crc32?: string;
  /** Hex SHA-256, for a signature that covers the body; when asked for. */
  sha256?: string;
}

export interface PartFileOptions {
  crc32: boolean;
  sha256: boolean;
}

/** A CRC32 as S3's `x-amz-checksum-crc32` carries it: base64 of its four big-endian bytes. */
export function crc32Base64(crc: number): string {
  const be = Buffer.alloc(4);
  be.writeUInt32BE(crc >>> 0);
  return be.toString('base64');
}

export class PartFileWriter {
  private size = 0;
  private staged = 0;
  private crc = 0;
  private readonly hash: Hash | undefined;

  private constructor(
    readonly path: string,
    private readonly fh: FileHandle,
    private readonly staging: Buffer,
    private readonly opts: PartFileOptions,
  ) {
    this.hash = opts.sha256 ? createHash('sha256') : undefined;
  }

  /** Creates `path` (which must not exist; readable by the owner only). */
  static async create(path: string, staging: Buffer, opts: PartFileOptions): Promise<PartFileWriter> {
    return new PartFileWriter(path, await open(path, 'wx', 0o600), staging, opts);
  }

  get bytes(): number {
    return this.size;
  }

  /** Appends `chunk`; resolves at once unless the staging buffer filled and had to be written. */
  async append(chunk: Buffer): Promise<void> {
    if (this.opts.crc32) this.crc = crc32(chunk, this.crc);
    this.hash?.update(chunk);
    this.size += chunk.length;
    for (let off = 0; off < chunk.length;) {
      const n = chunk.copy(this.staging, this.staged, off);
      this.staged += n;
      off += n;
      if (this.staged === this.staging.length) await this.flush();
    }
  }

  /** Writes what is staged, closes the file and says what the part's request needs. */
  async finish(): Promise<PartFile> {
    await this.flush();
    await this.fh.close();
    const part: PartFile = { path: this.path, size: this.size };
    if (this.opts.crc32) part.crc32 = crc32Base64(this.crc);
    if (this.hash) part.sha256 = this.hash.digest('hex');
    return part;
  }

  /** Closes and removes the file; for a part that will never be sent. Never throws. */
  async discard(): Promise<void> {
    await this.fh.close().catch(() => undefined);
    await rm(this.path, { force: true }).catch(() => undefined);
  }

  private async flush(): Promise<void> {
    for (let off = 0; off < this.staged;) {
      const { bytesWritten } = await this.fh.write(this.staging, off, this.staged - off);
      off += bytesWritten;
    }
    this.staged = 0;
  }
}
