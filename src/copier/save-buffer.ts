import type { StoreConfig } from '@etcdbrctl/snapstore';

const MiB = 1024 * 1024;

/**
 * What one save into a store of this config holds in memory for a large object (its part, block or
 * chunk buffers; see each provider's save), so the copier can bound the sum over parallel copies
 * (`CopierDeps.saveBufferBytes`). Shared by `etcdbrctl copy` and the server's secondary backup sync.
 */
export function saveBufferBytes(c: StoreConfig): number {
  switch (c.provider) {
    case 'Local':
      return 0;
    case 'S3':
    case 'ECS':
    case 'OCS':
      return (c.maxParallelChunkUploads + 1) * Math.max(c.minChunkSize, 5 * MiB);
    case 'ABS':
      return (c.maxParallelChunkUploads + 1) * c.minChunkSize;
    case 'GCS':
      return 2 * c.minChunkSize;
    case 'Swift':
      return (c.maxParallelChunkUploads + 1) * c.minChunkSize;
  }
}
