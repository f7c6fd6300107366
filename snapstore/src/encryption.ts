/**
 * Client-side encryption of snapshot objects as age files (age-encryption.org/v1): X25519 recipients,
 * ChaCha20-Poly1305 in 64 KiB authenticated chunks, so an operator can decrypt any object by hand with the
 * `age` CLI. All cryptography is the `age-encryption` package's (typage, by age's author); this module only
 * adapts its web streams to Node streams, parses key files and turns its failures into typed errors.
 *
 * Objects are compressed first, then encrypted; an encrypted object's name carries `.age` right after the
 * compression suffix (`Full-00000000-00000042-1700000000.gz.age`, `.final` still last).
 */
import { Duplex, Readable, Writable } from 'node:stream';
import { createRequire } from 'node:module';
import type { Decrypter, Identity, Stanza } from 'age-encryption';

type AgeLibrary = typeof import('age-encryption');
let ageLibrary: AgeLibrary | undefined;

/**
 * age-encryption and its @noble dependencies (about 50 modules, ~80 ms to load) load on first use, so a
 * command on a store without encryption (the default) never pays for them. Node 24 requires an ES module
 * synchronously, which keeps the stream factories below synchronous.
 */
function age(): AgeLibrary {
  return (ageLibrary ??= createRequire(import.meta.url)('age-encryption') as AgeLibrary);
}
import { SnapStoreError } from './errors.js';
import { InternalError } from './internal-errors.js';

/** A private key as read from an identity file, with its public key for messages (never the secret). */
export interface AgeIdentity {
  /** `AGE-SECRET-KEY-1…` */
  secretKey: string;
  /** The matching recipient (`age1…`), what error messages name. */
  recipient: string;
  /** The file it came from. */
  source: string;
}

/** The keys a store uses: recipients for what it writes, identities for what it reads. */
export interface SnapshotEncryption {
  /** Public keys (`age1…`) new objects are encrypted to, all of them; empty: new objects are stored plain. */
  recipients: readonly string[];
  /** Private keys tried on encrypted objects, several so that objects from before a key rotation stay readable. */
  identities: readonly AgeIdentity[];
}

export const NO_ENCRYPTION: SnapshotEncryption = { recipients: [], identities: [] };

/** Key files hold one key a line; `#` starts a comment line, as age's recipients and identity files. */
function keyLines(text: string): Array<{ line: number; value: string }> {
  const out: Array<{ line: number; value: string }> = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const value = raw.trim();
    if (value !== '' && !value.startsWith('#')) out.push({ line: i + 1, value });
  });
  return out;
}

/** The recipients of an age recipients file (`age1…` per line). Throws E_CONFIG naming file and line. */
export function parseRecipientsFile(text: string, source: string): string[] {
  const lines = keyLines(text);
  if (lines.length === 0) throw new SnapStoreError('E_CONFIG', `encryption recipients file ${source}: no recipient (age1…) in it`);
  return lines.map(({ line, value }) => {
    try {
      // The library validates the bech32 encoding and type when a recipient is added.
      new (age().Encrypter)().addRecipient(value);
    } catch (err) {
      const hint = value.startsWith('AGE-SECRET-KEY-') ? ' (this is a private key: give it with the identity file instead)' : '';
      throw new SnapStoreError(
        'E_CONFIG',
        `encryption recipients file ${source} line ${line}: not an age recipient${hint}: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
    return value;
  });
}

/** The identities of an age identity file (`AGE-SECRET-KEY-1…` per line, as age-keygen writes it). */
export async function parseIdentityFile(text: string, source: string): Promise<AgeIdentity[]> {
  const lines = keyLines(text);
  if (lines.length === 0) throw new SnapStoreError('E_CONFIG', `encryption identity file ${source}: no identity (AGE-SECRET-KEY-1…) in it`);
  const out: AgeIdentity[] = [];
  for (const { line, value } of lines) {
    let recipient: string;
    try {
      if (!value.startsWith('AGE-SECRET-KEY-')) throw new InternalError('E_BAD_INPUT', 'expected AGE-SECRET-KEY-1…');
      recipient = await age().identityToRecipient(value);
    } catch (err) {
      // The message never repeats the line: it may be a secret.
      throw new SnapStoreError(
        'E_CONFIG',
        `encryption identity file ${source} line ${line}: not an age identity: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
    out.push({ secretKey: value, recipient, source });
  }
  return out;
}

/**
 * A Node Writable feeding a web ReadableStream for the library to read, with backpressure (one chunk
 * queued). Failures of the library then surface only on its output, where they are given types; once it
 * stops reading (after such a failure), further writes are dropped.
 */
function webSource(): { writable: Writable; stream: ReadableStream<Uint8Array> } {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let waiting: (() => void) | undefined;
  let cancelled = false;
  const stream = new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c;
      },
      pull() {
        const w = waiting;
        waiting = undefined;
        w?.();
      },
      cancel() {
        cancelled = true;
        const w = waiting;
        waiting = undefined;
        w?.();
      },
    },
    { highWaterMark: 1 },
  );
  const writable = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (cancelled) return cb();
      controller.enqueue(chunk);
      if ((controller.desiredSize ?? 0) > 0) cb();
      else waiting = () => cb();
    },
    final(cb) {
      if (!cancelled) controller.close();
      cb();
    },
    destroy(err, cb) {
      if (!cancelled && err !== null) {
        try {
          controller.error(err);
        } catch {
          // already closed: nothing to tell the reader
        }
      }
      cb(err);
    },
  });
  return { writable, stream };
}

/** Web stream chunks as Buffers, without copying: the rest of the pipeline expects Buffers. */
function asBuffer(chunk: Uint8Array): Buffer {
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
}

/**
 * An encrypting Duplex: plaintext in, one age file out. Streams with bounded memory (the library holds one
 * 64 KiB chunk, the web streams one chunk each). Throws E_CONFIG when there is no recipient.
 */
export function createEncryptStream(recipients: readonly string[]): Duplex {
  if (recipients.length === 0) throw new SnapStoreError('E_CONFIG', 'cannot encrypt: no recipient given');
  const encrypter = new (age().Encrypter)();
  for (const r of recipients) encrypter.addRecipient(r);
  const plain = webSource();
  const cipher = encrypter.encrypt(plain.stream);
  cipher.catch(() => undefined); // surfaces through the readable side
  async function* output(): AsyncGenerator<Buffer> {
    for await (const chunk of await cipher) yield asBuffer(chunk);
  }
  return Duplex.from({ writable: plain.writable, readable: Readable.from(output(), { objectMode: false }) });
}

/** What an age header says about who can open it: stanza types, never secrets. */
export function describeStanzas(stanzas: readonly Stanza[]): string {
  if (stanzas.length === 0) return 'no recipient stanza';
  const counts = new Map<string, number>();
  for (const s of stanzas) counts.set(s.args[0] ?? '?', (counts.get(s.args[0] ?? '?') ?? 0) + 1);
  return [...counts].map(([type, n]) => `${n} ${type} recipient stanza${n === 1 ? '' : 's'}`).join(', ');
}

function describeIdentities(identities: readonly AgeIdentity[]): string {
  if (identities.length === 0) return 'no identity was given (--encryption-identity-file)';
  return `none of the identities given opens it: ${identities.map((i) => `${i.recipient} (${i.source})`).join(', ')}`;
}

/** An Identity that opens nothing and remembers the header's stanzas, for the error message. */
class StanzaRecorder implements Identity {
  stanzas: Stanza[] = [];
  unwrapFileKey(stanzas: Stanza[]): null {
    this.stanzas = stanzas;
    return null;
  }
}

const NO_MATCH = 'no identity matched';

function decrypterFor(identities: readonly AgeIdentity[]): { decrypter: Decrypter; recorder: StanzaRecorder } {
  const decrypter = new (age().Decrypter)();
  const recorder = new StanzaRecorder();
  decrypter.addIdentity(recorder);
  for (const id of identities) decrypter.addIdentity(id.secretKey);
  return { decrypter, recorder };
}

/** The typed error for a header that could not be opened: no matching identity, or a broken header. */
function headerError(err: unknown, recorder: StanzaRecorder, identities: readonly AgeIdentity[], objectName: string): SnapStoreError {
  const detail = err instanceof Error ? err.message : String(err);
  if (detail.startsWith(NO_MATCH)) {
    return new SnapStoreError(
      'E_NO_IDENTITY',
      `cannot decrypt ${objectName}: it is encrypted to ${describeStanzas(recorder.stanzas)}; ${describeIdentities(identities)}`,
      { cause: err },
    );
  }
  return new SnapStoreError('E_CORRUPT', `${objectName}: not a valid age file (tampered or not encrypted by us): ${detail}`, {
    cause: err,
  });
}

/**
 * A decrypting Duplex: one age file in, plaintext out. A wrong or missing identity is E_NO_IDENTITY naming
 * the object, its recipient stanza types and the identities tried; any authentication failure (tampering,
 * truncation, a swapped chunk) is E_CORRUPT. Plaintext leaves only in authenticated 64 KiB chunks.
 */
export function createDecryptStream(identities: readonly AgeIdentity[], objectName: string): Duplex {
  const { decrypter, recorder } = decrypterFor(identities);
  const cipher = webSource();
  const plain = decrypter.decrypt(cipher.stream);
  plain.catch(() => undefined); // surfaces through the readable side
  async function* output(): AsyncGenerator<Buffer> {
    let stream: ReadableStream<Uint8Array>;
    try {
      stream = await plain;
    } catch (err) {
      throw headerError(err, recorder, identities, objectName);
    }
    try {
      for await (const chunk of stream) yield asBuffer(chunk);
    } catch (err) {
      if (err instanceof SnapStoreError) throw err;
      const detail = err instanceof Error ? err.message : String(err);
      throw new SnapStoreError('E_CORRUPT', `${objectName}: age payload failed authentication (tampered or truncated): ${detail}`, {
        cause: err,
      });
    }
  }
  return Duplex.from({ writable: cipher.writable, readable: Readable.from(output(), { objectMode: false }) });
}

/** Upper bound on an age header we read ahead of a restore: room for hundreds of X25519 stanzas. */
const MAX_HEADER_BYTES = 64 * 1024;
const MAC_LINE = Buffer.from('\n--- ');

/**
 * Checks that one of `identities` opens the age header at the start of `source` (the object's first bytes;
 * only the header is read). Throws E_NO_IDENTITY or E_CORRUPT as createDecryptStream would, before any
 * plaintext is needed, so a restore can fail before it touches its data dir.
 */
export async function checkHeaderOpens(
  source: AsyncIterable<Uint8Array>,
  identities: readonly AgeIdentity[],
  objectName: string,
): Promise<void> {
  let head = Buffer.alloc(0);
  let end = -1;
  for await (const chunk of source) {
    head = Buffer.concat([head, chunk]);
    const mac = head.indexOf(MAC_LINE);
    if (mac >= 0) end = head.indexOf(0x0a, mac + MAC_LINE.length);
    if (end >= 0 || head.length > MAX_HEADER_BYTES) break;
  }
  const { decrypter, recorder } = decrypterFor(identities);
  try {
    if (end < 0) throw new InternalError('E_CORRUPT_STREAM', 'no complete age header in the first bytes of the object');
    await decrypter.decryptHeader(head.subarray(0, end + 1));
  } catch (err) {
    throw headerError(err, recorder, identities, objectName);
  }
}
