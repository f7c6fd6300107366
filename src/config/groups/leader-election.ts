import { defineGroup } from '../schema.js';
import type { LeaderElectionConfig } from '../types.js';

/** Leader election among sidecars (`pkg/types/leaderelection.go`). */
export const leaderElectionGroup = defineGroup<LeaderElectionConfig>({
  title: 'leader election',
  fields: {
    etcdConnectionTimeout: {
      type: 'duration',
      flag: 'etcd-connection-timeout-leader-election',
      usage: 'etcd client timeout while checking leadership',
    },
    reelectionPeriod: { type: 'duration', flag: 'reelection-period', usage: 'period after which leadership is checked again' },
  },
  defaults: () => ({ etcdConnectionTimeout: 5_000, reelectionPeriod: 5_000 }),
  validate(c, issues, flag) {
    if (c.etcdConnectionTimeout <= 1_000) issues.add(`${flag('etcdConnectionTimeout')} must be greater than 1s`);
    if (c.reelectionPeriod <= 1_000) issues.add(`${flag('reelectionPeriod')} must be greater than 1s`);
  },
});
