/**
 * The payload of an age file (age-encryption.org/v1, "Payload"): the STREAM construction over
 * ChaCha20-Poly1305, composed from node:crypto's (OpenSSL's) primitives. Nothing here is a cipher of its
 * own: the key comes from OpenSSL's HKDF-SHA256, every chunk is sealed by OpenSSL's ChaCha20-Poly1305 AEAD;
 * this module only lays the chunks out as the spec says:
 *
 * - payload key = HKDF-SHA256(ikm = file key, salt = the 16-byte payload nonce, info = "payload"), 32 bytes;
 * - the plaintext is cut into 64 KiB chunks, each sealed with a 12-byte nonce: an 11-byte big-endian chunk
 *   counter from 0, then a flag byte, 0x01 on the last chunk and 0x00 on all others;
 * - only the last chunk may be short, and it is empty only when the whole plaintext is.
 *
 * Why not the age library's own payload code: it is pure JavaScript (~150-185 MB/s), OpenSSL's is several
 * times faster, which is what keeps an encrypted snapshot near the speed of a plain one (issue 17).
 *
 * Sealer and opener keep one chunk buffer each and reuse it; OpenSSL's output is the only allocation per
 * chunk. They are plain objects fed with `write`/`end` and handing their output to `emit`, so that the
 * age file streams (encryption.ts) put the header in front without a stream stage of their own.
 */
import { createCipheriv, createDecipheriv, hkdfSync } from 'node:crypto';
import { SnapStoreError } from './errors.js';

/** Plaintext bytes per chunk. */
export const AGE_CHUNK_SIZE = 64 * 1024;
/** The Poly1305 tag after each chunk's ciphertext. */
export const AGE_TAG_SIZE = 16;
/** The random nonce between the header and the first chunk, the payload key's HKDF salt. */
export const AGE_PAYLOAD_NONCE_SIZE = 16;

/** Receives output in order; each buffer is the receiver's from then on (never reused by us). */
export type Emit = (bytes: Buffer) => void;

const SEALED_CHUNK_SIZE = AGE_CHUNK_SIZE + AGE_TAG_SIZE;
const CIPHER = 'chacha20-poly1305';
/** 2^48 chunks of 64 KiB (16 EiB) is where the 6 low counter bytes we write run out; the spec allows 11. */
const MAX_CHUNKS = 2 ** 48;

/** The payload key: HKDF-SHA256(file key, payload nonce, "payload"). */
export function payloadKey(fileKey: Uint8Array, nonce: Uint8Array): Buffer {
  return Buffer.from(hkdfSync('sha256', fileKey, nonce, 'payload', 32));
}

/** The 12-byte ChaCha20-Poly1305 nonces of the chunks in order, in one reused buffer. */
class ChunkNonces {
  private readonly nonce = Buffer.alloc(12);
  private counter = 0;

  /** The current chunk's nonce (valid until the next call; OpenSSL copies it when a cipher is made). */
  current(last: boolean): Buffer {
    if (this.counter >= MAX_CHUNKS) throw new SnapStoreError('E_CORRUPT', 'age payload: more chunks than this implementation counts');
    this.nonce.writeUIntBE(this.counter, 5, 6);
    this.nonce[11] = last ? 1 : 0;
    return this.nonce;
  }

  /** On to the next chunk. */
  advance(): void {
    this.counter++;
  }

  /** The current chunk's index: chunks done so far. */
  get index(): number {
    return this.counter;
  }
}

/**
 * Plaintext in, the age payload out (the sealed chunks, without header and nonce: the caller writes those
 * first). A full chunk is held back until more input arrives, because only then is it known not to be last.
 */
export class PayloadSealer {
  private readonly nonces = new ChunkNonces();
  private readonly staged = Buffer.allocUnsafe(AGE_CHUNK_SIZE);
  private stagedLength = 0;

  constructor(private readonly key: Buffer) {}

  private seal(plain: Buffer, last: boolean, emit: Emit): void {
    const cipher = createCipheriv(CIPHER, this.key, this.nonces.current(last), { authTagLength: AGE_TAG_SIZE });
    this.nonces.advance();
    emit(cipher.update(plain));
    cipher.final();
    emit(cipher.getAuthTag());
  }

  write(chunk: Buffer, emit: Emit): void {
    let offset = 0;
    while (offset < chunk.length) {
      if (this.stagedLength === AGE_CHUNK_SIZE) {
        // More input follows a full staged chunk: it was not the last.
        this.seal(this.staged, false, emit);
        this.stagedLength = 0;
      }
      const rest = chunk.length - offset;
      if (this.stagedLength === 0 && rest > AGE_CHUNK_SIZE) {
        // A whole chunk with more after it in the same write: sealed in place, no copy.
        this.seal(chunk.subarray(offset, offset + AGE_CHUNK_SIZE), false, emit);
        offset += AGE_CHUNK_SIZE;
        continue;
      }
      const n = Math.min(AGE_CHUNK_SIZE - this.stagedLength, rest);
      chunk.copy(this.staged, this.stagedLength, offset, offset + n);
      this.stagedLength += n;
      offset += n;
    }
  }

  /** Seals what is staged as the last chunk: short, full, or empty when the whole plaintext is. */
  end(emit: Emit): void {
    this.seal(this.staged.subarray(0, this.stagedLength), true, emit);
  }
}

/**
 * The age payload in (the sealed chunks after the nonce), plaintext out. A chunk's plaintext is released
 * only after its tag verified. Tampering, a dropped, swapped or repeated chunk, a missing last chunk, bytes
 * after the last chunk and an empty last chunk after others all fail as E_CORRUPT naming the object.
 *
 * What is released before such a failure is what the reference implementation releases (the C2SP/CCTV
 * vectors check it): every chunk that authenticates at its position, also a full chunk that turns out to
 * be the last one before trailing bytes, or a chunk not flagged last where the file ends.
 */
export class PayloadOpener {
  private readonly nonces = new ChunkNonces();
  private readonly staged = Buffer.allocUnsafe(SEALED_CHUNK_SIZE);
  private stagedLength = 0;

  constructor(
    private readonly key: Buffer,
    private readonly objectName: string,
  ) {}

  private corrupt(what: string, cause?: unknown): SnapStoreError {
    return new SnapStoreError(
      'E_CORRUPT',
      `${this.objectName}: age payload failed authentication (tampered or truncated): ${what}`,
      cause === undefined ? undefined : { cause },
    );
  }

  /** The plaintext of the current chunk if it authenticates with this last-chunk flag, else undefined. */
  private tryOpen(sealed: Buffer, last: boolean): Buffer | undefined {
    const decipher = createDecipheriv(CIPHER, this.key, this.nonces.current(last), { authTagLength: AGE_TAG_SIZE });
    decipher.setAuthTag(sealed.subarray(sealed.length - AGE_TAG_SIZE));
    const plain = decipher.update(sealed.subarray(0, sealed.length - AGE_TAG_SIZE));
    try {
      decipher.final();
    } catch {
      return undefined; // OpenSSL says only that the tag did not match
    }
    return plain;
  }

  /** A full chunk with more bytes after it: it must open as a chunk that is not the last. */
  private openMiddle(sealed: Buffer, emit: Emit): void {
    const index = this.nonces.index;
    const plain = this.tryOpen(sealed, false);
    if (plain !== undefined) {
      this.nonces.advance();
      emit(plain);
      return;
    }
    const asLast = this.tryOpen(sealed, true);
    if (asLast === undefined) throw this.corrupt(`chunk ${index} was altered or moved`);
    emit(asLast);
    throw this.corrupt(`bytes after the last chunk (${index})`);
  }

  /** Throws E_CORRUPT on the first chunk that fails; what was emitted before it is authenticated. */
  write(chunk: Buffer, emit: Emit): void {
    let offset = 0;
    while (offset < chunk.length) {
      if (this.stagedLength === SEALED_CHUNK_SIZE) {
        this.openMiddle(this.staged, emit);
        this.stagedLength = 0;
      }
      const rest = chunk.length - offset;
      if (this.stagedLength === 0 && rest > SEALED_CHUNK_SIZE) {
        // A whole chunk with more after it in the same write: opened in place, no copy.
        this.openMiddle(chunk.subarray(offset, offset + SEALED_CHUNK_SIZE), emit);
        offset += SEALED_CHUNK_SIZE;
        continue;
      }
      const n = Math.min(SEALED_CHUNK_SIZE - this.stagedLength, rest);
      chunk.copy(this.staged, this.stagedLength, offset, offset + n);
      this.stagedLength += n;
      offset += n;
    }
  }

  /**
   * Opens what is staged as the last chunk. (Nothing staged means no chunk at all: a full chunk stays
   * staged until more bytes follow.)
   */
  end(emit: Emit): void {
    const sealed = this.staged.subarray(0, this.stagedLength);
    const index = this.nonces.index;
    if (sealed.length === 0) throw this.corrupt('no chunk at all');
    if (sealed.length < AGE_TAG_SIZE) throw this.corrupt(`chunk ${index} is shorter than its tag`);
    if (sealed.length === AGE_TAG_SIZE && index > 0) throw this.corrupt(`an empty last chunk (${index}) after full ones`);
    const plain = this.tryOpen(sealed, true);
    if (plain !== undefined) {
      this.nonces.advance();
      if (plain.length > 0) emit(plain);
      return;
    }
    const notLast = sealed.length === SEALED_CHUNK_SIZE ? this.tryOpen(sealed, false) : undefined;
    if (notLast === undefined) throw this.corrupt(`chunk ${index} was altered or moved`);
    emit(notLast);
    throw this.corrupt(`the object ends after chunk ${index}, which is not the last chunk (truncated)`);
  }
}
