import type { StoreConfig } from './config.js';
import { withEncryption } from './encrypting-store.js';
import type { OpenOptions, SnapStore } from './store.js';

/**
 * Opens the store a configuration describes, wrapped so that encrypted objects are encrypted and
 * decrypted with the configured keys (plain objects pass through). Providers load lazily so that a
 * Local-only process never loads the cloud SDKs.
 */
export async function openSnapStore(config: StoreConfig, options: OpenOptions = {}): Promise<SnapStore> {
  return withEncryption(await openProviderStore(config, options), config.encryption);
}

async function openProviderStore(config: StoreConfig, options: OpenOptions): Promise<SnapStore> {
  switch (config.provider) {
    case 'Local':
      return (await import('./providers/local.js')).openLocalStore(config, options);
    case 'S3':
      return (await import('./providers/s3.js')).openS3Store(config);
    case 'ABS':
      return (await import('./providers/abs.js')).openAbsStore(config);
    case 'GCS':
      return (await import('./providers/gcs.js')).openGcsStore(config);
    case 'Swift':
      return (await import('./providers/swift.js')).openSwiftStore(config);
    case 'ECS':
    case 'OCS':
      return (await import('./providers/s3-compatible.js')).openS3CompatibleStore(config);
  }
}
