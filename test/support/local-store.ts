import { openSnapStore, type LocalStoreConfig, type SnapStore } from '@etcdbrctl/snapstore';

/**
 * The Local store at `rootDir` as the CLI configures it by default (prefix `v2`, 5 MiB chunks, 5 parallel
 * uploads), i.e. the store a sidecar with `--storage-provider=Local --store-container=<rootDir>` uses.
 */
export function localStoreConfig(rootDir: string, tempDir: string): LocalStoreConfig {
  return {
    provider: 'Local',
    rootDir,
    // Informational for Local: the directory is rootDir.
    container: rootDir,
    prefix: 'v2',
    maxParallelChunkUploads: 5,
    minChunkSize: 5 * 1024 * 1024,
    tempDir,
  };
}

/** Opens {@link localStoreConfig}; the caller closes the store. */
export function openLocalStore(rootDir: string, tempDir: string): Promise<SnapStore> {
  return openSnapStore(localStoreConfig(rootDir, tempDir));
}
