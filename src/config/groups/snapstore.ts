import { defineGroup } from '../schema.js';
import type { GroupDef } from '../schema.js';
import type { SecondarySnapstoreConfig, SnapstoreConfig } from '../types.js';

/** Providers this implementation has. */
export const SUPPORTED_PROVIDERS = ['Local', 'S3', 'ABS', 'GCS', 'Swift', 'OSS', 'ECS', 'OCS'] as const;
/** Providers upstream has and we do not (`FAILED` is upstream's test fake). */
export const UPSTREAM_ONLY_PROVIDERS = ['FAILED'] as const;

export const MIN_CHUNK_SIZE = 5 * 1024 * 1024;

/** Problem with a provider name, or undefined when it is '' (no store) or supported. */
export function providerError(provider: string): string | undefined {
  if (provider === '' || (SUPPORTED_PROVIDERS as readonly string[]).includes(provider)) return undefined;
  const supported = SUPPORTED_PROVIDERS.join(', ');
  if ((UPSTREAM_ONLY_PROVIDERS as readonly string[]).includes(provider)) {
    return `storage provider ${JSON.stringify(provider)} is supported by etcd-backup-restore but not by this implementation; supported providers: ${supported}`;
  }
  return `unknown storage provider ${JSON.stringify(provider)}; supported providers: ${supported} (names are case-sensitive)`;
}

/** Flag-name prefixes of the three snapstore registrations. */
export type SnapstoreFlagPrefix = '' | 'source-' | 'secondary-';

function describe(prefix: SnapstoreFlagPrefix): string {
  if (prefix === 'source-') return 'copy source ';
  if (prefix === 'secondary-') return 'secondary ';
  return '';
}

/**
 * The snapstore flag group (`pkg/types/snapstore.go` `addFlags(fs, prefix)`), for the primary store,
 * the copy source (`source-`) and the secondary store (`secondary-`).
 */
export function snapstoreGroup(prefix: SnapstoreFlagPrefix): GroupDef<SnapstoreConfig> {
  const what = describe(prefix);
  const envVar = `${prefix === '' ? '' : prefix.slice(0, -1).toUpperCase() + '_'}STORAGE_CONTAINER`;
  return defineGroup<SnapstoreConfig>({
    title: `${what}snapstore`.trim(),
    fields: {
      provider: {
        type: 'string',
        flag: `${prefix}storage-provider`,
        usage:
          prefix === 'source-'
            ? `${what}snapshot storage provider: Local, S3, ABS, GCS, Swift, OSS, ECS or OCS; default: the destination's (--storage-provider)`
            : `${what}snapshot storage provider: Local, S3, ABS, GCS, Swift, OSS, ECS or OCS; none = no store`,
      },
      container: {
        type: 'string',
        flag: `${prefix}store-container`,
        usage:
          prefix === 'source-'
            ? `${what}bucket or container of the snapstore (Local: a directory); default $${envVar}; one of them is required`
            : `${what}bucket or container of the snapstore (Local: a directory); default $${envVar}`,
      },
      endpointOverride: {
        type: 'string',
        flag: `${prefix}store-endpoint-override`,
        usage: `${what}URL of the object store endpoint, overriding the provider's default`,
      },
      prefix: {
        type: 'string',
        flag: `${prefix}store-prefix`,
        usage: `${what}prefix inside the container; snapshots go under <prefix>/v2/`,
      },
      tempDir: {
        type: 'string',
        flag: `${prefix}snapstore-temp-directory`,
        // Say what lands there, and what initialization removes: operators point it at shared volumes.
        usage:
          prefix === ''
            ? 'directory where S3 uploads keep the parts in flight (.etcdbr-part-* files); each initialization removes the parts a stopped process left there, nothing else'
            : `${what}directory where S3 uploads keep the parts in flight (.etcdbr-part-* files)`,
      },
      maxParallelChunkUploads: {
        type: 'uint',
        flag: `${prefix}max-parallel-chunk-uploads`,
        usage: `${what}maximum number of chunks uploaded in parallel`,
      },
      minChunkSize: {
        type: 'int64',
        flag: `${prefix}min-chunk-size`,
        usage: `${what}minimum size in bytes of a multipart chunk (at least 5 MiB)`,
      },
    },
    defaults: () => ({
      provider: '',
      container: '',
      endpointOverride: '',
      prefix: '',
      tempDir: '/tmp',
      maxParallelChunkUploads: 5,
      minChunkSize: MIN_CHUNK_SIZE,
    }),
    // Upstream's file keys for the env prefix and source role; here they follow from which store it is.
    ignoredFileKeys: ['envPrefix', 'isSource'],
    validate(c, issues, flag) {
      const pErr = providerError(c.provider);
      if (pErr !== undefined) issues.add(`${flag('provider')}: ${pErr}`);
      if (c.maxParallelChunkUploads <= 0) issues.add(`${flag('maxParallelChunkUploads')} must be greater than 0`);
      if (c.minChunkSize < MIN_CHUNK_SIZE) {
        issues.add(`${flag('minChunkSize')} must be at least ${MIN_CHUNK_SIZE} bytes (5 MiB), got ${c.minChunkSize}`);
      }
      if (c.endpointOverride !== '') {
        const err = endpointError(c.endpointOverride);
        if (err !== undefined) issues.add(`${flag('endpointOverride')}: ${err}`);
      }
    },
  });
}

/** Stricter than Go's url.Parse on purpose: an endpoint without scheme and host cannot work. */
function endpointError(value: string): string | undefined {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return `${JSON.stringify(value)} is not a URL (expected e.g. https://s3.example.com:9000)`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return `${JSON.stringify(value)} must use http or https`;
  }
  return undefined;
}

/** The secondary store's own flags (`SecondarySnapstoreConfig.AddFlags`); its store fields are nested. */
export const secondarySyncGroup = defineGroup<Omit<SecondarySnapstoreConfig, 'storeConfig'>>({
  title: 'secondary backup sync',
  fields: {
    backupSyncEnabled: {
      type: 'bool',
      flag: 'secondary-backup-sync-enabled',
      usage: 'copy backups to the secondary snapstore periodically',
    },
    syncPeriod: { type: 'duration', flag: 'secondary-backup-sync-period', usage: 'period of the secondary backup sync' },
  },
  defaults: () => ({ backupSyncEnabled: false, syncPeriod: 60 * 60_000 }),
  validate(c, issues, flag) {
    if (c.backupSyncEnabled && c.syncPeriod <= 0) issues.add(`${flag('syncPeriod')} must be greater than 0`);
  },
});
