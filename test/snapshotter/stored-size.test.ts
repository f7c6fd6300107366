/**
 * A saved snapshot's `storedBytes` (the "Full snapshot saved" log line's field, etcdbr_snapshot_size_bytes)
 * is the object's size in the store: compressed, and encrypted when it is. It once was the compressed size
 * before encryption.
 */
import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { generateX25519Identity, identityToRecipient } from 'age-encryption';
import { describe, expect, it } from 'vitest';
import { newSnapshot, storedBytesStore, withEncryption, type SnapStore } from '@etcdbrctl/snapstore';
import { DeltaBuffer } from '../../src/snapshotter/delta-buffer.js';
import { saveSizedDeltaSnapshot } from '../../src/snapshotter/delta-snapshot.js';
import { saveVerifiedFullSnapshot } from '../../src/snapshotter/full-snapshot.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { openLocalStore } from '../support/local-store.js';

const cleanups = cleanupAfterEach();

/** A Local store in a temp dir, encrypting new snapshots to a fresh key when `encrypted`. */
async function store(encrypted: boolean): Promise<SnapStore> {
  const dir = await cleanups.tempDir('etcdbr-stored-size-');
  const plain = await openLocalStore(join(dir, 'store'), join(dir, 'tmp'));
  cleanups.push(() => plain.close());
  if (!encrypted) return plain;
  const recipient = await identityToRecipient(await generateX25519Identity());
  // openSnapStore wraps every store without keys; this one gets a key.
  return withEncryption(storedBytesStore(plain), { recipients: [recipient], identities: [] });
}

describe('storedBytes is the size of the object in the store', () => {
  it.each([[false], [true]])('a full snapshot and a delta (encrypted: %s)', async (encrypted) => {
    const s = await store(encrypted);
    const db = randomBytes(300 * 1024);
    const full = newSnapshot({
      kind: 'Full',
      startRevision: 0,
      lastRevision: 10,
      createdOn: new Date(),
      compressionSuffix: '.gz',
      encrypted,
    });
    const fullSizes = await saveVerifiedFullSnapshot(s, full, Readable.from([db, createHash('sha256').update(db).digest()]), 'gzip');

    const buffer = new DeltaBuffer();
    for (let rev = 11; rev <= 20; rev++) {
      buffer.append({
        type: 'PUT',
        key: Buffer.from(`/k/${rev}`),
        value: randomBytes(10_000),
        createRevision: rev,
        modRevision: rev,
        version: 1,
        lease: '0',
        time: '2027-01-01T00:00:00Z',
      });
    }
    const delta = await saveSizedDeltaSnapshot(s, buffer.take()!, 11, 'gzip', new Date(Date.now() + 1000));

    const listed = await s.list();
    expect(listed.map((x) => x.isEncrypted === true)).toEqual([encrypted, encrypted]);
    expect(fullSizes.storedBytes).toBe(listed.find((x) => x.kind === 'Full')!.sizeBytes);
    expect(delta.storedBytes).toBe(listed.find((x) => x.kind === 'Incr')!.sizeBytes);
  });
});
