import { defineGroup } from '../schema.js';
import type { HealthConfig } from '../types.js';

/** Health and Kubernetes leases (`pkg/types/health.go`). */
export const healthGroup = defineGroup<HealthConfig>({
  title: 'health and leases',
  fields: {
    snapshotLeaseRenewalEnabled: {
      type: 'bool',
      flag: 'enable-snapshot-lease-renewal',
      usage: 'renew the full and delta snapshot leases in Kubernetes after each snapshot, the delta lease every delta period',
    },
    memberLeaseRenewalEnabled: {
      type: 'bool',
      flag: 'enable-member-lease-renewal',
      usage: "renew this member's lease in Kubernetes periodically",
    },
    heartbeatDuration: { type: 'duration', flag: 'k8s-heartbeat-duration', usage: 'period of the member lease heartbeat' },
    fullSnapshotLeaseName: { type: 'string', flag: 'full-snapshot-lease-name', usage: 'name of the full snapshot lease' },
    deltaSnapshotLeaseName: { type: 'string', flag: 'delta-snapshot-lease-name', usage: 'name of the delta snapshot lease' },
  },
  defaults: () => ({
    snapshotLeaseRenewalEnabled: false,
    memberLeaseRenewalEnabled: false,
    heartbeatDuration: 30_000,
    fullSnapshotLeaseName: 'full-snapshot-revisions',
    deltaSnapshotLeaseName: 'delta-snapshot-revisions',
  }),
  validate(c, issues, flag) {
    if (c.heartbeatDuration <= 0) issues.add(`${flag('heartbeatDuration')} must be greater than 0`);
    if (c.snapshotLeaseRenewalEnabled) {
      if (c.fullSnapshotLeaseName === '')
        issues.add(`${flag('fullSnapshotLeaseName')} must not be empty when snapshot lease renewal is enabled`);
      if (c.deltaSnapshotLeaseName === '')
        issues.add(`${flag('deltaSnapshotLeaseName')} must not be empty when snapshot lease renewal is enabled`);
    }
  },
});
