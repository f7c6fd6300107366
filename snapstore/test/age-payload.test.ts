/**
 * Our age payload (OpenSSL's ChaCha20-Poly1305 laid out as age's STREAM, snapstore/src/age-stream.ts) against
 * two independent implementations, both ways, at every chunk boundary: the age library's own pure-JS
 * payload code (typage) and the reference `age` CLI (Go). Then files forged with valid tags but a wrong
 * layout (last-chunk flag, dropped or extra chunks, an empty final chunk) and damage at each boundary are
 * refused as E_CORRUPT, releasing nothing unauthenticated.
 */
import { execFile } from 'node:child_process';
import { createCipheriv } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import { Decrypter, Encrypter, generateX25519Identity, identityToRecipient } from 'age-encryption';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGE_CHUNK_SIZE, AGE_PAYLOAD_NONCE_SIZE, AGE_TAG_SIZE, payloadKey } from '../src/age-stream.js';
import { createDecryptStream, createEncryptStream, type AgeIdentity } from '../src/encryption.js';
import { isSnapStoreError } from '../src/errors.js';
import { chunksOf, randomBytes, through } from './support/streams.js';

const run = promisify(execFile);
const CHUNK = AGE_CHUNK_SIZE;
const SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 1 << 20];

let dir: string;
let alice: AgeIdentity;
let aliceKeyFile: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'age-payload-test-'));
  const secretKey = await generateX25519Identity();
  alice = { secretKey, recipient: await identityToRecipient(secretKey), source: 'alice.key' };
  aliceKeyFile = path.join(dir, 'alice.key');
  await writeFile(aliceKeyFile, `${secretKey}\n`, { mode: 0o600 });
  await run('age', ['--version']).catch((err: unknown) => {
    throw new Error(`the age CLI is needed for these tests (npm test installs it via scripts/setup.mjs): ${String(err)}`);
  });
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const seal = (data: Buffer, writeSize = 10_000): Promise<Buffer> => through(createEncryptStream([alice.recipient]), data, writeSize);
const open = (file: Buffer, writeSize = 7_777): Promise<Buffer> => through(createDecryptStream([alice], 'obj.age'), file, writeSize);

describe('interoperability at the chunk boundaries', () => {
  it.each(SIZES)('%i bytes: the age library decrypts ours and we decrypt the library’s', async (n) => {
    const data = randomBytes(n, n + 11);
    const ours = await seal(data);
    const decrypter = new Decrypter();
    decrypter.addIdentity(alice.secretKey);
    expect(Buffer.from(await decrypter.decrypt(ours)).equals(data)).toBe(true);

    const encrypter = new Encrypter();
    encrypter.addRecipient(alice.recipient);
    const theirs = Buffer.from(await encrypter.encrypt(data));
    expect((await open(theirs)).equals(data)).toBe(true);
    // Same layout, so the same size: header + nonce + data + one tag per chunk (at least one chunk).
    expect(ours.length - ours.indexOf('\n', ours.indexOf('\n--- ') + 1)).toBe(
      theirs.length - theirs.indexOf('\n', theirs.indexOf('\n--- ') + 1),
    );
  });

  it.each(SIZES)('%i bytes: age -d opens ours and we open what age encrypts', async (n) => {
    const data = randomBytes(n, n + 12);
    const oursFile = path.join(dir, `ours-${n}.age`);
    await writeFile(oursFile, await seal(data, 65_537));
    // To stdout: age creates no -o file for an empty plaintext.
    const { stdout } = await run('age', ['-d', '-i', aliceKeyFile, oursFile], { encoding: 'buffer', maxBuffer: 4 << 20 });
    expect(stdout.equals(data)).toBe(true);

    const plainFile = path.join(dir, `plain-${n}`);
    await writeFile(plainFile, data);
    const theirsFile = path.join(dir, `theirs-${n}.age`);
    await run('age', ['-r', alice.recipient, '-o', theirsFile, plainFile]);
    expect((await open(await readFile(theirsFile), 1 << 20)).equals(data)).toBe(true);
  });
});

/** An age file taken apart: header, nonce, payload key and the sealed chunks, to forge variants of it. */
async function dissect(file: Buffer): Promise<{ header: Buffer; nonce: Buffer; key: Buffer; chunks: Buffer[] }> {
  const headerEnd = file.indexOf('\n', file.indexOf('\n--- ') + 1) + 1;
  const header = file.subarray(0, headerEnd);
  const decrypter = new Decrypter();
  decrypter.addIdentity(alice.secretKey);
  const fileKey = await decrypter.decryptHeader(header);
  const nonce = file.subarray(headerEnd, headerEnd + AGE_PAYLOAD_NONCE_SIZE);
  const chunks = [...chunksOf(file.subarray(headerEnd + AGE_PAYLOAD_NONCE_SIZE), CHUNK + AGE_TAG_SIZE)];
  return { header, nonce, key: payloadKey(fileKey, nonce), chunks };
}

/** A chunk sealed with a valid tag for position `index` and the given last-chunk flag. */
function sealChunk(key: Buffer, index: number, last: boolean, plain: Buffer): Buffer {
  const nonce = Buffer.alloc(12);
  nonce.writeUIntBE(index, 5, 6);
  nonce[11] = last ? 1 : 0;
  const cipher = createCipheriv('chacha20-poly1305', key, nonce, { authTagLength: AGE_TAG_SIZE });
  return Buffer.concat([cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
}

/** Feeds `file` to our decryptor; the error and what was released before it. */
async function attempt(file: Buffer, writeSize: number): Promise<{ released: Buffer; error: unknown }> {
  const out: Buffer[] = [];
  try {
    await pipeline(
      Readable.from(chunksOf(file, writeSize)),
      createDecryptStream([alice], 'obj.age'),
      new Writable({ write: (c: Buffer, _e, cb) => (out.push(c), cb()) }),
    );
    return { released: Buffer.concat(out), error: undefined };
  } catch (error) {
    return { released: Buffer.concat(out), error };
  }
}

describe('forged and damaged files', () => {
  it('refuses every wrong layout and every damage as E_CORRUPT, releasing only authenticated chunks before it', async () => {
    // Two full chunks and a short one; and a file that ends exactly on a full last chunk.
    const data = randomBytes(2 * CHUNK + 100, 21);
    const file = await seal(data);
    const { header, nonce, key, chunks } = await dissect(file);
    expect(chunks.map((c) => c.length)).toEqual([CHUNK + 16, CHUNK + 16, 100 + 16]);
    const exact = randomBytes(2 * CHUNK, 22);
    const exactParts = await dissect(await seal(exact));
    expect(exactParts.chunks.map((c) => c.length)).toEqual([CHUNK + 16, CHUNK + 16]);
    const join = (parts: { header: Buffer; nonce: Buffer }, ...rest: Buffer[]): Buffer =>
      Buffer.concat([parts.header, parts.nonce, ...rest]);
    const plainOf = (i: number): Buffer => data.subarray(i * CHUNK, (i + 1) * CHUNK);
    const flipped = (b: Buffer, at: number): Buffer => {
      const c = Buffer.from(b);
      c[at]! ^= 1;
      return c;
    };
    const [c0, c1, c2] = chunks as [Buffer, Buffer, Buffer];
    const [e0, e1] = exactParts.chunks as [Buffer, Buffer];
    const cases: Array<[string, Buffer]> = [
      // The layout: every chunk below carries a valid tag for the flag and position it was sealed with.
      [
        'the last chunk sealed without the last-chunk flag',
        join({ header, nonce }, c0, c1, sealChunk(key, 2, false, data.subarray(2 * CHUNK))),
      ],
      ['a middle chunk sealed with the last-chunk flag', join({ header, nonce }, c0, sealChunk(key, 1, true, plainOf(1)), c2)],
      ['the final chunk dropped (ends on a full chunk not flagged last)', join({ header, nonce }, c0, c1)],
      ['the final full chunk dropped from an exact-multiple file', join(exactParts, e0)],
      [
        'an empty last chunk after full ones',
        join(
          exactParts,
          e0,
          sealChunk(exactParts.key, 1, false, exact.subarray(CHUNK)),
          sealChunk(exactParts.key, 2, true, Buffer.alloc(0)),
        ),
      ],
      ['two chunks swapped', join({ header, nonce }, c1, c0, c2)],
      ['a chunk repeated', join({ header, nonce }, c0, c0, c1, c2)],
      ['bytes after the last chunk', Buffer.concat([file, Buffer.from([0])])],
      ['a valid chunk after the last chunk', join({ header, nonce }, c0, c1, c2, sealChunk(key, 3, true, Buffer.from('x')))],
      // Damage at each boundary.
      ['a byte of the header MAC flipped', flipped(file, header.indexOf('\n--- ') + 6)],
      ['a nonce byte flipped', flipped(file, header.length + 3)],
      ['the first byte of a chunk flipped', flipped(file, header.length + 16 + CHUNK + 16)],
      ['a tag byte flipped', flipped(file, header.length + 16 + CHUNK + 5)],
      ['truncated in the header', file.subarray(0, header.length - 2)],
      ['truncated after the header', file.subarray(0, header.length)],
      ['truncated in the nonce', file.subarray(0, header.length + 8)],
      ['truncated after the nonce', file.subarray(0, header.length + 16)],
      ['truncated in a tag', file.subarray(0, header.length + 16 + CHUNK + 8)],
      ['the last chunk shorter than a tag', file.subarray(0, file.length - 100 - 5)],
    ];
    // What the message says where the layout, not a tag, is what is wrong.
    const says: Record<string, RegExp> = {
      'a middle chunk sealed with the last-chunk flag': /bytes after the last chunk \(1\)/,
      'the final chunk dropped (ends on a full chunk not flagged last)': /ends after chunk 1, which is not the last chunk \(truncated\)/,
      'an empty last chunk after full ones': /an empty last chunk \(2\) after full ones/,
    };
    for (const [what, bytes] of cases) {
      for (const writeSize of [bytes.length, 4096]) {
        const { released, error } = await attempt(bytes, writeSize);
        expect(isSnapStoreError(error, 'E_CORRUPT'), `${what} (writes of ${writeSize}): ${String(error)}`).toBe(true);
        expect((error as Error).message, what).toContain('obj.age');
        expect((error as Error).message, what).toMatch(says[what] ?? /./);
        // Only whole authenticated chunks of the original came out before the failure.
        expect(released.length % CHUNK, what).toBe(0);
        const original = what.includes('exact') || what.includes('empty last') ? exact : data;
        expect(released.equals(original.subarray(0, released.length)), what).toBe(true);
      }
    }
    // The forgeries are well-formed otherwise: the untouched pieces reassemble into a file that opens.
    expect((await open(join({ header, nonce }, c0, c1, c2))).equals(data)).toBe(true);
    expect((await open(join(exactParts, e0, e1))).equals(exact)).toBe(true);
  });
});
