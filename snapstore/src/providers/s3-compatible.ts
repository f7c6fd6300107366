/**
 * Dell ECS and OpenShift Container Storage: S3-compatible stores that upstream reaches through its generic
 * S3 client (`newGenericS3FromAuthOpt`): static keys, path-style addressing, the region of the credentials
 * (`US-Standard` for ECS), TLS verification optional. Here they are the S3 provider with credentials
 * mapped from their own sources (credentials-s3-compatible.ts).
 */
import type { EcsStoreConfig, OcsStoreConfig, S3Credentials, S3StoreConfig } from '../config.js';
import { s3CompatibleEndpoint } from '../credentials-s3-compatible.js';
import type { SnapStore } from '../store.js';
import { openS3Store } from './s3.js';
import type { S3Tuning } from './s3.js';

/**
 * The S3 configuration of an ECS or OCS store (pure). `--store-endpoint-override` wins over the
 * credentials' endpoint, as it does for S3 (upstream ignores the flag for these two).
 */
export function s3ConfigOf(config: EcsStoreConfig | OcsStoreConfig): S3StoreConfig {
  const { provider: _provider, credentials: c, ...base } = config;
  const credentials: S3Credentials = {
    region: c.region,
    accessKeyID: c.accessKeyID,
    secretAccessKey: c.secretAccessKey,
    endpoint: s3CompatibleEndpoint(c),
    s3ForcePathStyle: true,
    insecureSkipVerify: c.insecureSkipVerify,
  };
  return { ...base, provider: 'S3', credentials };
}

export function openS3CompatibleStore(config: EcsStoreConfig | OcsStoreConfig, tuning: S3Tuning = {}): Promise<SnapStore> {
  return openS3Store(s3ConfigOf(config), tuning, config.provider);
}
