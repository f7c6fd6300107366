import { defineGroup } from '../schema.js';
import type { CompressionConfig, CompressionPolicy } from '../types.js';

export const COMPRESSION_POLICIES: readonly CompressionPolicy[] = ['gzip', 'lzw', 'zlib', 'zstd'];

/** Compression (`pkg/compressor/init.go`); `zstd` is ours. */
export const compressionGroup = defineGroup<CompressionConfig>({
  title: 'compression',
  fields: {
    enabled: { type: 'bool', flag: 'compress-snapshots', usage: 'compress snapshots before storing them' },
    policy: {
      type: 'string',
      flag: 'compression-policy',
      usage: 'compression policy: gzip, lzw, zlib, or zstd (zstd cannot be read by etcd-backup-restore)',
    },
  },
  defaults: () => ({ enabled: true, policy: 'gzip' }),
  validate(c, issues, flag) {
    // Upstream checks the policy only when compression is on.
    if (c.enabled && !COMPRESSION_POLICIES.includes(c.policy)) {
      issues.add(`${flag('policy')}: unknown policy ${JSON.stringify(c.policy)}; use ${COMPRESSION_POLICIES.join(', ')}`);
    }
  },
});
