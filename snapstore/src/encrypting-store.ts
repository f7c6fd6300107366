/**
 * The store as its users see it when encryption may be involved: every store `openSnapStore` opens is
 * wrapped in one. Encrypted objects (`snap.isEncrypted`, told by the `.age` in the name) are encrypted on
 * save and decrypted on fetch, so everything above it keeps working on compressed plaintext: the codecs,
 * the sha256 trailer checks, restore, verify, compact. Plain objects pass through untouched, so a store
 * without keys behaves exactly as before (and as the Go tool's).
 *
 * Whether a *new* snapshot is encrypted is its creator's decision (`encryptsNewSnapshots`), made when the
 * name is made, because the name says it.
 */
import { pipeline as pipelineCb, type Readable } from 'node:stream';
import { SnapStoreError } from './errors.js';
import { checkHeaderOpens, createDecryptStream, createEncryptStream, NO_ENCRYPTION, type SnapshotEncryption } from './encryption.js';
import type { ByteRange, FetchOptions, ListOptions, SaveOptions, SnapStore } from './store.js';
import type { Snapshot } from './snapshot.js';

export class EncryptingStore implements SnapStore {
  readonly provider: SnapStore['provider'];
  readonly prefix: string;

  constructor(
    /** The provider's store: stored bytes as they are. */
    readonly inner: SnapStore,
    readonly encryption: SnapshotEncryption,
  ) {
    this.provider = inner.provider;
    this.prefix = inner.prefix;
  }

  list(options?: ListOptions): Promise<Snapshot[]> {
    return this.inner.list(options);
  }

  /** Plaintext of the object (still compressed). A range is refused for encrypted objects: it has no meaning there. */
  async fetch(snap: Snapshot, range?: ByteRange, options?: FetchOptions): Promise<Readable> {
    if (snap.isEncrypted !== true) return this.inner.fetch(snap, range, options);
    if (range !== undefined) {
      throw new SnapStoreError('E_CONFIG', `${snap.snapName}: byte ranges of an encrypted object cannot be fetched`);
    }
    if (this.encryption.identities.length === 0) {
      // Fail before opening a download that nothing could read.
      await this.checkDecryptable([snap]);
    }
    const stored = await this.inner.fetch(snap, undefined, options);
    return pipelineCb(stored, createDecryptStream(this.encryption.identities, snap.snapName), () => {});
  }

  /** Encrypts to the recipients when the snapshot's name says it is encrypted; E_CONFIG when there are none. */
  save(snap: Snapshot, data: Readable, options?: SaveOptions): Promise<void> {
    if (snap.isEncrypted !== true) return this.inner.save(snap, data, options);
    if (this.encryption.recipients.length === 0) {
      data.destroy();
      return Promise.reject(
        new SnapStoreError(
          'E_CONFIG',
          `cannot save ${snap.snapName} encrypted: no encryption recipient given (--encryption-recipients-file)`,
        ),
      );
    }
    // pipeline() destroys the other stage on an error, so the provider sees the failure and commits nothing.
    const encrypt = createEncryptStream(this.encryption.recipients);
    const encrypted = pipelineCb(data, encrypt, () => {});
    return this.inner.save(snap, encrypted, options).then(() => options?.onEncryptedSize?.(encrypt.bytesOut));
  }

  delete(snap: Snapshot): Promise<void> {
    return this.inner.delete(snap);
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  /**
   * Reads only the age header of each encrypted snapshot and checks that an identity opens it. Throws
   * E_NO_IDENTITY (naming the object, its recipient stanzas and the identities tried) or E_CORRUPT.
   */
  async checkDecryptable(snaps: readonly Snapshot[]): Promise<void> {
    for (const snap of snaps) {
      if (snap.isEncrypted !== true) continue;
      await checkHeaderOpens(await this.inner.fetch(snap), this.encryption.identities, snap.snapName);
    }
  }
}

/** Wraps a provider's store (idempotent: a wrapped store is returned as it is). */
export function withEncryption(store: SnapStore, encryption: SnapshotEncryption = NO_ENCRYPTION): SnapStore {
  return store instanceof EncryptingStore ? store : new EncryptingStore(store, encryption);
}

/** Whether snapshots created for `store` are to be encrypted: it has recipients. */
export function encryptsNewSnapshots(store: SnapStore): boolean {
  return store instanceof EncryptingStore && store.encryption.recipients.length > 0;
}

/**
 * Before a restore touches anything: every encrypted snapshot among `snaps` can be opened. A store that is
 * not wrapped cannot decrypt at all, so any encrypted snapshot there is E_NO_IDENTITY.
 */
export async function checkDecryptable(store: SnapStore, snaps: readonly Snapshot[]): Promise<void> {
  await (store instanceof EncryptingStore ? store : new EncryptingStore(store, NO_ENCRYPTION)).checkDecryptable(snaps);
}

/** The stored bytes, encrypted or not, for copies that keep objects as they are. */
export function storedBytesStore(store: SnapStore): SnapStore {
  return store instanceof EncryptingStore ? store.inner : store;
}
