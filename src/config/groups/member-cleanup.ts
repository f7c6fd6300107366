import { defineGroup } from '../schema.js';
import type { ServerConfig } from '../types.js';

/**
 * Ours: the leading sidecar's removal of superfluous members (etcd-druid proposal 01-multi-node-etcd-clusters.md). Upstream has no live switch:
 * its member GC was never enabled and was deleted in v0.42 (only the unused `DefaultEtcdMemberGCEnabled`
 * constant remains), so this flag is new; on by default because the proposal requires the cleanup.
 */
export const memberCleanupGroup = defineGroup<Pick<ServerConfig, 'enableMemberCleanup'>>({
  title: 'member cleanup (not in etcd-backup-restore)',
  fields: {
    enableMemberCleanup: {
      type: 'bool',
      flag: 'enable-member-cleanup',
      usage: 'while leading, remove etcd members whose StatefulSet ordinal is at or above the configured cluster size',
    },
  },
  defaults: () => ({ enableMemberCleanup: true }),
});
