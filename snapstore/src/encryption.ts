/**
 * Client-side encryption of snapshot objects as age files (age-encryption.org/v1): X25519 recipients,
 * ChaCha20-Poly1305 in 64 KiB authenticated chunks, so an operator can decrypt any object by hand with the
 * `age` CLI. We implement no cryptography: the header (file key, recipient stanzas, header MAC) is made and
 * opened by the `age-encryption` package (typage, by age's author); the payload is OpenSSL's HKDF and
 * ChaCha20-Poly1305 through node:crypto, laid out as the spec says (age-stream.ts), several times faster
 * than the package's pure-JavaScript cipher. This module parses key files, joins header and payload into
 * Node streams and turns failures into typed errors.
 *
 * Objects are compressed first, then encrypted; an encrypted object's name carries `.age` right after the
 * compression suffix (`Full-00000000-00000042-1700000000.gz.age`, `.final` still last).
 */
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { Transform, type Duplex, type TransformCallback } from 'node:stream';
import type { Decrypter, Identity, Stanza } from 'age-encryption';
import { AGE_PAYLOAD_NONCE_SIZE, AGE_TAG_SIZE, PayloadOpener, PayloadSealer, payloadKey } from './age-stream.js';
import { SnapStoreError } from './errors.js';
import { InternalError } from './internal-errors.js';

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
 * Thrown when the age library does not behave as its documented API says (checked once per object, so a
 * different package version fails loudly instead of writing something unreadable).
 */
function notAsDocumented(what: string): SnapStoreError {
  return new SnapStoreError('E_CONFIG', `age-encryption library: ${what} (an unexpected version of the package?)`);
}

/**
 * A new file key and the age header that wraps it for `recipients`, both made by the age library: its
 * recipient stanzas (X25519 and the other types it knows) and its header MAC. The library keeps the file
 * key to itself, so one more Recipient (its public Recipient interface) is added that sees the key and adds
 * no stanza. The library then encrypts an empty payload, which is dropped: the header is that file minus
 * the 16-byte nonce and the 16-byte tag of the single empty chunk. Our payload gets a fresh nonce, so its
 * key is not the one the dropped chunk used.
 */
async function sealHeader(recipients: readonly string[]): Promise<{ header: Buffer; fileKey: Buffer }> {
  const encrypter = new (age().Encrypter)();
  for (const r of recipients) encrypter.addRecipient(r);
  let fileKey: Buffer | undefined;
  encrypter.addRecipient({
    wrapFileKey(key: Uint8Array): Stanza[] {
      fileKey = Buffer.from(key);
      return [];
    },
  });
  const file = Buffer.from(await encrypter.encrypt(new Uint8Array(0)));
  const header = file.subarray(0, file.length - AGE_PAYLOAD_NONCE_SIZE - AGE_TAG_SIZE);
  if (fileKey?.length !== 16) throw notAsDocumented('no 16-byte file key was given to the recipients');
  if (headerEnd(header) !== header.length) throw notAsDocumented('an empty file is not a header, a nonce and one empty chunk');
  return { header, fileKey };
}

// Memory of its own (Buffer.alloc never uses Node's shared pool): a constant would keep a 64 KiB pool slab alive.
const MAC_LINE = Buffer.alloc(5, '\n--- ', 'latin1');

/** The length of the age header at the start of `bytes` (through the MAC line's newline), or -1 if not all there. */
function headerEnd(bytes: Buffer): number {
  // Stanza lines start with "-> " and body lines are base64, so the first "\n--- " starts the MAC line.
  const mac = bytes.indexOf(MAC_LINE);
  if (mac < 0) return -1;
  const newline = bytes.indexOf(0x0a, mac + MAC_LINE.length);
  return newline < 0 ? -1 : newline + 1;
}

/** Upper bound on an age header we read: room for hundreds of X25519 or dozens of post-quantum stanzas. */
const MAX_HEADER_BYTES = 64 * 1024;

/**
 * Plaintext in, one age file out: the header (the library's), the 16-byte payload nonce (OpenSSL's random
 * bytes), then the payload (age-stream.ts). Memory: one 64 KiB chunk buffer besides the stream buffers.
 */
class AgeEncryptStream extends Transform {
  /** The age file's bytes pushed so far: its size once the stream ended. */
  bytesOut = 0;
  private sealer: PayloadSealer | undefined;
  private readonly output = (bytes: Buffer): void => {
    if (bytes.length > 0) this.pushCounted(bytes);
  };

  private pushCounted(bytes: Buffer): void {
    this.bytesOut += bytes.length;
    this.push(bytes);
  }

  constructor(private readonly header: Promise<{ header: Buffer; fileKey: Buffer }>) {
    super();
  }

  private async started(): Promise<PayloadSealer> {
    if (this.sealer !== undefined) return this.sealer;
    const { header, fileKey } = await this.header;
    const nonce = randomBytes(AGE_PAYLOAD_NONCE_SIZE);
    this.pushCounted(header);
    this.pushCounted(nonce);
    return (this.sealer = new PayloadSealer(payloadKey(fileKey, nonce)));
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (this.sealer !== undefined) {
      // Once the header is out, synchronously: no promise per chunk.
      try {
        this.sealer.write(chunk, this.output);
      } catch (err) {
        callback(err as Error);
        return;
      }
      callback();
      return;
    }
    this.started().then((sealer) => {
      sealer.write(chunk, this.output);
      callback();
    }, callback);
  }

  override _flush(callback: TransformCallback): void {
    this.started().then((sealer) => {
      sealer.end(this.output);
      callback();
    }, callback);
  }
}

/**
 * An encrypting stream: plaintext in, one age file out, with bounded memory; `bytesOut` is the age file's
 * size once it ended. Throws E_CONFIG when there is no recipient.
 */
export function createEncryptStream(recipients: readonly string[]): Duplex & { readonly bytesOut: number } {
  if (recipients.length === 0) throw new SnapStoreError('E_CONFIG', 'cannot encrypt: no recipient given');
  const header = sealHeader(recipients);
  header.catch(() => undefined); // surfaces through the stream
  return new AgeEncryptStream(header);
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

function incomplete(objectName: string, what: string): SnapStoreError {
  return new SnapStoreError('E_CORRUPT', `${objectName}: not a valid age file (truncated or not an age file): ${what}`);
}

function headerTooLong(objectName: string): SnapStoreError {
  return incomplete(objectName, `no complete age header in the first ${MAX_HEADER_BYTES} bytes`);
}

/** The file key from an age header, checked against the header MAC by the library; E_NO_IDENTITY or E_CORRUPT. */
async function openHeader(header: Buffer, identities: readonly AgeIdentity[], objectName: string): Promise<Buffer> {
  const { decrypter, recorder } = decrypterFor(identities);
  try {
    return Buffer.from(await decrypter.decryptHeader(header));
  } catch (err) {
    throw headerError(err, recorder, identities, objectName);
  }
}

/**
 * One age file in, plaintext out: collects the header (bounded), has the library open it (file key and
 * header MAC), reads the 16-byte nonce, then opens the payload chunk by chunk (age-stream.ts).
 */
class AgeDecryptStream extends Transform {
  /** Bytes before the payload: the header, then the nonce. */
  private head: Buffer = Buffer.alloc(0);
  private fileKey: Buffer | undefined;
  private opener: PayloadOpener | undefined;
  private readonly output = (bytes: Buffer): void => {
    this.push(bytes);
  };

  constructor(
    private readonly identities: readonly AgeIdentity[],
    private readonly objectName: string,
  ) {
    super();
  }

  /** Collects header and nonce until the payload opener can be made; then it gets the rest. */
  private async beforePayload(chunk: Buffer): Promise<void> {
    this.head = this.head.length === 0 ? chunk : Buffer.concat([this.head, chunk]);
    if (this.fileKey === undefined) {
      const end = headerEnd(this.head.subarray(0, MAX_HEADER_BYTES));
      if (end < 0) {
        if (this.head.length > MAX_HEADER_BYTES) throw headerTooLong(this.objectName);
        return;
      }
      this.fileKey = await openHeader(this.head.subarray(0, end), this.identities, this.objectName);
      this.head = this.head.subarray(end);
    }
    if (this.head.length < AGE_PAYLOAD_NONCE_SIZE) return;
    this.opener = new PayloadOpener(payloadKey(this.fileKey, this.head.subarray(0, AGE_PAYLOAD_NONCE_SIZE)), this.objectName);
    const payload = this.head.subarray(AGE_PAYLOAD_NONCE_SIZE);
    this.head = Buffer.alloc(0);
    this.opener.write(payload, this.output);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (this.opener === undefined) {
      this.beforePayload(chunk).then(() => callback(), callback);
      return;
    }
    try {
      this.opener.write(chunk, this.output);
    } catch (err) {
      callback(err as Error);
      return;
    }
    callback();
  }

  override _flush(callback: TransformCallback): void {
    try {
      if (this.fileKey === undefined) throw incomplete(this.objectName, 'no complete age header');
      if (this.opener === undefined) throw incomplete(this.objectName, 'no payload nonce after the header');
      this.opener.end(this.output);
      callback();
    } catch (err) {
      callback(err as Error);
    }
  }
}

/**
 * A decrypting stream: one age file in, plaintext out. A wrong or missing identity is E_NO_IDENTITY naming
 * the object, its recipient stanza types and the identities tried; any authentication failure (tampering,
 * truncation, a swapped chunk) is E_CORRUPT. Plaintext leaves only in authenticated 64 KiB chunks.
 */
export function createDecryptStream(identities: readonly AgeIdentity[], objectName: string): Duplex {
  return new AgeDecryptStream(identities, objectName);
}

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
    end = headerEnd(head.subarray(0, MAX_HEADER_BYTES));
    if (end >= 0 || head.length > MAX_HEADER_BYTES) break;
  }
  if (end < 0) throw head.length > MAX_HEADER_BYTES ? headerTooLong(objectName) : incomplete(objectName, 'no complete age header');
  await openHeader(head.subarray(0, end), identities, objectName);
}
