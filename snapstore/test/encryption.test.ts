/**
 * age encryption of snapshot objects: key files, round trips at chunk boundaries, interoperability with
 * the reference `age` CLI (an independent implementation, both directions), wrong and missing identities as
 * E_NO_IDENTITY, tampering and truncation as E_CORRUPT, and the `.age` name suffix.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import { generateX25519Identity, identityToRecipient } from 'age-encryption';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkHeaderOpens,
  createDecryptStream,
  createEncryptStream,
  parseIdentityFile,
  parseRecipientsFile,
  type AgeIdentity,
} from '../src/encryption.js';
import { checkDecryptable, encryptsNewSnapshots, withEncryption } from '../src/encrypting-store.js';
import { isSnapStoreError } from '../src/errors.js';
import { openLocalStore } from '../src/providers/local.js';
import {
  generateSnapshotName,
  newSnapshot,
  parseSnapshotKey,
  setEncrypted,
  setFinal,
  snapshotFromJSON,
  snapshotToJSON,
} from '../src/snapshot.js';
import { chunksOf, randomBytes, through } from './support/streams.js';

const run = promisify(execFile);
const CHUNK = 64 * 1024;

async function newIdentity(source = 'test'): Promise<AgeIdentity> {
  const secretKey = await generateX25519Identity();
  return { secretKey, recipient: await identityToRecipient(secretKey), source };
}

let dir: string;
let alice: AgeIdentity;
let bob: AgeIdentity;
let mallory: AgeIdentity;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'age-test-'));
  [alice, bob, mallory] = await Promise.all([newIdentity('alice.txt'), newIdentity('bob.txt'), newIdentity('mallory.txt')]);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function errorOf(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a failure');
}

describe('key files', () => {
  it('reads recipients and identities, skipping comments and blank lines (age-keygen format)', async () => {
    const text = `# created: 2026-01-01T00:00:00Z\n# public key: ${alice.recipient}\n${alice.secretKey}\n\n`;
    const ids = await parseIdentityFile(text, '/keys/a.txt');
    expect(ids).toEqual([{ secretKey: alice.secretKey, recipient: alice.recipient, source: '/keys/a.txt' }]);
    expect(parseRecipientsFile(`# ops\n${alice.recipient}\r\n${bob.recipient}\n`, 'r.txt')).toEqual([alice.recipient, bob.recipient]);
  });

  it('refuses empty files, private keys as recipients and garbage, naming file and line but never the secret', async () => {
    expect(() => parseRecipientsFile('# nothing\n', 'r.txt')).toThrow(/r\.txt: no recipient/);
    expect(() => parseRecipientsFile(`\n${alice.secretKey}\n`, 'r.txt')).toThrow(/r\.txt line 2: .*private key/);
    expect(() => parseRecipientsFile('age1notakey\n', 'r.txt')).toThrow(/line 1: not an age recipient/);
    const err = await errorOf(parseIdentityFile(`${alice.recipient}\n`, 'i.txt'));
    expect(isSnapStoreError(err, 'E_CONFIG')).toBe(true);
    const broken = alice.secretKey.slice(0, -3) + 'qqq';
    const err2 = await errorOf(parseIdentityFile(`${broken}\n`, 'i.txt'));
    expect((err2 as Error).message).toMatch(/i\.txt line 1: not an age identity/);
    expect((err2 as Error).message).not.toContain(broken);
  });
});

describe('streams', () => {
  const sizes = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, 2 * CHUNK];

  it.each(sizes)('round trips %i bytes to two recipients; each identity opens it alone', async (n) => {
    const data = randomBytes(n, n + 1);
    const sealed = await through(createEncryptStream([alice.recipient, bob.recipient]), data, 10_000);
    expect(sealed.subarray(0, 22).toString()).toBe('age-encryption.org/v1\n');
    // header + 16-byte nonce + per started 64 KiB chunk a 16-byte tag (at least one chunk)
    const chunks = Math.max(1, Math.ceil(n / CHUNK));
    const headerEnd = sealed.indexOf('\n', sealed.indexOf('\n--- ') + 1) + 1;
    expect(sealed.length).toBe(headerEnd + 16 + n + 16 * chunks);
    for (const id of [alice, bob]) {
      expect((await through(createDecryptStream([mallory, id], 'obj'), sealed, 7_777)).equals(data)).toBe(true);
    }
  });

  it('a wrong identity is E_NO_IDENTITY naming the object, the stanza types and the identities tried', async () => {
    const sealed = await through(createEncryptStream([alice.recipient, bob.recipient]), randomBytes(1000, 1));
    const err = await errorOf(through(createDecryptStream([mallory], 'v2/Full-1.gz.age'), sealed));
    expect(isSnapStoreError(err, 'E_NO_IDENTITY')).toBe(true);
    expect((err as Error).message).toContain('cannot decrypt v2/Full-1.gz.age: it is encrypted to 2 X25519 recipient stanzas');
    expect((err as Error).message).toContain(`${mallory.recipient} (mallory.txt)`);
    expect((err as Error).message).not.toContain(mallory.secretKey);
    const none = await errorOf(through(createDecryptStream([], 'o'), sealed));
    expect(isSnapStoreError(none, 'E_NO_IDENTITY')).toBe(true);
    expect((none as Error).message).toContain('no identity was given');
    await expect(checkHeaderOpens(Readable.from(chunksOf(sealed, 50)), [mallory], 'o')).rejects.toMatchObject({ code: 'E_NO_IDENTITY' });
    await expect(checkHeaderOpens(Readable.from(chunksOf(sealed, 50)), [mallory, bob], 'o')).resolves.toBeUndefined();
  });

  it('tampering anywhere and truncation at any point fail authentication as E_CORRUPT', async () => {
    const data = randomBytes(3 * CHUNK + 100, 9);
    const sealed = await through(createEncryptStream([alice.recipient]), data);
    const headerEnd = sealed.indexOf('\n', sealed.indexOf('\n--- ') + 1) + 1;
    const cases: Array<[string, Buffer]> = [
      ['a payload byte flipped', Buffer.from(sealed)],
      ['a byte of the header MAC flipped', Buffer.from(sealed)],
      ['truncated inside the last chunk', sealed.subarray(0, sealed.length - 10)],
      ['truncated at a chunk boundary', sealed.subarray(0, headerEnd + 16 + 3 * (CHUNK + 16))],
      ['only the header', sealed.subarray(0, headerEnd)],
      [
        'a chunk dropped',
        Buffer.concat([sealed.subarray(0, headerEnd + 16 + CHUNK + 16), sealed.subarray(headerEnd + 16 + 2 * (CHUNK + 16))]),
      ],
    ];
    (cases[0]![1] as Buffer)[headerEnd + 16 + CHUNK + 7]! ^= 1;
    (cases[1]![1] as Buffer)[sealed.indexOf('\n--- ') + 6]! ^= 1;
    for (const [what, bytes] of cases) {
      const out: Buffer[] = [];
      const err = await errorOf(
        pipeline(
          Readable.from(chunksOf(bytes, 4096)),
          createDecryptStream([alice], 'obj'),
          new Writable({ write: (c: Buffer, _e, cb) => (out.push(c), cb()) }),
        ),
      );
      expect(isSnapStoreError(err, 'E_CORRUPT'), `${what}: ${String(err)}`).toBe(true);
      // Nothing past the damage comes out: at most the authenticated chunks before it.
      expect(Buffer.concat(out).equals(data.subarray(0, Buffer.concat(out).length)), what).toBe(true);
    }
    // A damaged recipient stanza cannot be told from one for somebody else (age authenticates the header
    // with the file key that stanza would give): refused all the same, as not ours.
    const stanza = Buffer.from(sealed);
    stanza[30]! ^= 1;
    await expect(through(createDecryptStream([alice], 'obj'), stanza)).rejects.toMatchObject({ code: 'E_NO_IDENTITY' });
  });
});

describe('the reference age CLI (independent implementation)', () => {
  beforeAll(async () => {
    // Installed by scripts/setup.mjs --tests (Debian package `age`); its absence is a failure, not a skip.
    await run('age', ['--version']).catch((err: unknown) => {
      throw new Error(`the age CLI is needed for these tests (npm test installs it via scripts/setup.mjs): ${String(err)}`);
    });
  });

  it('age -d opens what we encrypt, for each of several recipients; age-keygen keys work with us', async () => {
    const { stdout: generated } = await run('age-keygen', []);
    const fromKeygen = await parseIdentityFile(generated, 'keygen.txt');
    const data = randomBytes(2 * CHUNK + 3, 5);
    const sealed = await through(createEncryptStream([alice.recipient, fromKeygen[0]!.recipient]), data);
    const file = path.join(dir, 'obj.gz.age');
    await writeFile(file, sealed);
    for (const [name, key] of [
      ['alice.key', `${alice.secretKey}\n`],
      ['keygen.key', generated],
    ] as const) {
      const keyFile = path.join(dir, name);
      await writeFile(keyFile, key, { mode: 0o600 });
      const out = path.join(dir, `${name}.out`);
      await run('age', ['-d', '-i', keyFile, '-o', out, file]);
      expect((await readFile(out)).equals(data)).toBe(true);
    }
  });

  it('we open what age encrypts, and age -d refuses our tampered object', async () => {
    const data = randomBytes(CHUNK + 1, 6);
    const plainFile = path.join(dir, 'plain');
    await writeFile(plainFile, data);
    const sealedFile = path.join(dir, 'by-age.age');
    await run('age', ['-r', bob.recipient, '-r', alice.recipient, '-o', sealedFile, plainFile]);
    expect((await through(createDecryptStream([bob], 'by-age'), await readFile(sealedFile))).equals(data)).toBe(true);

    const ours = await through(createEncryptStream([alice.recipient]), data);
    ours[ours.length - 5]! ^= 1;
    const tampered = path.join(dir, 'tampered.age');
    await writeFile(tampered, ours);
    const keyFile = path.join(dir, 'alice2.key');
    await writeFile(keyFile, `${alice.secretKey}\n`, { mode: 0o600 });
    await expect(run('age', ['-d', '-i', keyFile, '-o', path.join(dir, 'x'), tampered])).rejects.toThrow();
  });
});

const createdOn = new Date(1_700_000_000_000);

describe('names', () => {
  it('puts .age after the compression suffix and before .final, and parses it back', () => {
    const full = newSnapshot({
      kind: 'Full',
      startRevision: 0,
      lastRevision: 42,
      createdOn,
      compressionSuffix: '.gz',
      isFinal: true,
      encrypted: true,
    });
    expect(full.snapName).toBe('Full-00000000-00000042-1700000000.gz.age.final');
    const parsed = parseSnapshotKey(`p/v2/${full.snapName}`);
    expect(parsed).toMatchObject({ compressionSuffix: '.gz', isEncrypted: true, isFinal: true, lastRevision: 42 });
    expect(parseSnapshotKey('v2/Incr-00000043-00000050-1700000001.age')).toMatchObject({
      compressionSuffix: '',
      isEncrypted: true,
      isFinal: false,
    });
    expect(parseSnapshotKey('v2/Incr-00000043-00000050-1700000001.zst.age/0000000003')).toMatchObject({
      compressionSuffix: '.zst',
      isEncrypted: true,
      isChunk: true,
    });
    expect(generateSnapshotName({ ...parsed })).toBe(full.snapName);
  });

  it('leaves plain names exactly as before (no isEncrypted key at all)', () => {
    const plain = newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: 42, createdOn, compressionSuffix: '.gz' });
    expect(plain.snapName).toBe('Full-00000000-00000042-1700000000.gz');
    expect('isEncrypted' in plain).toBe(false);
    expect('isEncrypted' in parseSnapshotKey(`v2/${plain.snapName}.final`)).toBe(false);
  });

  it('setEncrypted renames both ways, keeping .final last; JSON carries it in the name', () => {
    const plain = setFinal(newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: 1, createdOn, compressionSuffix: '.zst' }), true);
    const sealed = setEncrypted(plain, true);
    expect(sealed.snapName).toBe('Full-00000000-00000001-1700000000.zst.age.final');
    expect(setEncrypted(sealed, false)).toEqual(plain);
    expect(setFinal(sealed, false).snapName).toBe('Full-00000000-00000001-1700000000.zst.age');
    expect(snapshotFromJSON(snapshotToJSON(sealed)).isEncrypted).toBe(true);
  });
});

describe('EncryptingStore', () => {
  it('encrypts objects named encrypted, passes plain ones through byte for byte, and checks headers before a restore', async () => {
    const root = path.join(dir, 'store');
    const inner = await openLocalStore({
      provider: 'Local',
      rootDir: root,
      container: 'c',
      prefix: 'v2',
      maxParallelChunkUploads: 1,
      minChunkSize: 5 << 20,
      tempDir: dir,
    });
    const store = withEncryption(inner, { recipients: [alice.recipient], identities: [bob, alice] });
    const readerWithoutKey = withEncryption(inner, { recipients: [], identities: [mallory] });
    try {
      expect(encryptsNewSnapshots(store)).toBe(true);
      expect(encryptsNewSnapshots(readerWithoutKey)).toBe(false);
      const data = randomBytes(CHUNK * 2 + 9, 3);
      const sealed = newSnapshot({ kind: 'Full', startRevision: 0, lastRevision: 5, createdOn, compressionSuffix: '.gz', encrypted: true });
      const plain = newSnapshot({
        kind: 'Incr',
        startRevision: 6,
        lastRevision: 7,
        createdOn: new Date(createdOn.getTime() + 1000),
        compressionSuffix: '.gz',
      });
      // The size as stored is told for the encrypted object (it is not the size of the data given), not for the plain one.
      const told: Array<[string, number]> = [];
      await store.save(sealed, Readable.from([data]), { onEncryptedSize: (n) => told.push([sealed.snapName, n]) });
      await store.save(plain, Readable.from([data]), { onEncryptedSize: (n) => told.push([plain.snapName, n]) });
      const listed = await store.list();
      expect(told).toEqual([[sealed.snapName, listed[0]!.sizeBytes]]);
      expect(listed[0]!.sizeBytes).toBeGreaterThan(data.length);
      expect(listed.map((s) => [s.snapName, s.isEncrypted ?? false])).toEqual([
        [sealed.snapName, true],
        [plain.snapName, false],
      ]);
      const stored = await readFile(path.join(root, 'v2', sealed.snapName));
      expect(stored.subarray(0, 21).toString()).toBe('age-encryption.org/v1');
      expect((await readFile(path.join(root, 'v2', plain.snapName))).equals(data)).toBe(true);
      const read = async (s: typeof store, snap: (typeof listed)[number]): Promise<Buffer> => {
        const parts: Buffer[] = [];
        for await (const c of await s.fetch(snap)) parts.push(c as Buffer);
        return Buffer.concat(parts);
      };
      expect((await read(store, listed[0]!)).equals(data)).toBe(true);
      expect((await read(store, listed[1]!)).equals(data)).toBe(true);
      await expect(checkDecryptable(store, listed)).resolves.toBeUndefined();
      const err = await errorOf(checkDecryptable(readerWithoutKey, listed));
      expect(isSnapStoreError(err, 'E_NO_IDENTITY')).toBe(true);
      expect((err as Error).message).toContain(sealed.snapName);
      // An unwrapped store cannot decrypt anything: the same typed error.
      await expect(checkDecryptable(inner, listed)).rejects.toMatchObject({ code: 'E_NO_IDENTITY' });
      await expect(readerWithoutKey.save(setEncrypted(plain, true), Readable.from([data]))).rejects.toMatchObject({ code: 'E_CONFIG' });
      expect((await inner.list()).length).toBe(2);
    } finally {
      await store.close();
    }
  });
});
