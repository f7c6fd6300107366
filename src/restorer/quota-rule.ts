/**
 * When a restore compacts its history (docs/how-it-works.md "How a restore works", step 4): a function of the chain and
 * the quota alone, so that a restore gives the same database every time and both replay paths agree.
 *
 * The chain's size is the base backend's file (as etcd's snapshot restore wrote it) plus every delta's
 * payload (the decompressed file the replay reads), up to the last delta the plan holds. When that passes
 * 80 % of `--embedded-etcd-quota-bytes`, the restored history is compacted at the restore's newest revision:
 * the offline replay writes it compacted, the online replay compacts its etcd there (and on the way, after
 * each delta from the one that passed, to stay inside the quota). etcd's own reported size is never asked:
 * it lags behind the writes, which made the online replay's compaction depend on timing.
 */
import { stat } from 'node:fs/promises';

/** Above this share of the quota, the restored history is compacted. */
export const QUOTA_COMPACT_RATIO = 0.8;

export interface QuotaRule {
  quotaBytes: number;
  /** Size of the base backend file right after etcd's snapshot restore. */
  baseBytes: number;
}

/** Whether base plus `deltaBytes` of delta payloads pass the rule's threshold. */
export function passesQuota(rule: QuotaRule, deltaBytes: number): boolean {
  return rule.baseBytes + deltaBytes > rule.quotaBytes * QUOTA_COMPACT_RATIO;
}

/** Whether the chain (base and these fetched delta files) passes the rule's threshold. */
export async function compactsForQuota(rule: QuotaRule, deltas: ReadonlyArray<{ file: string }>): Promise<boolean> {
  let bytes = 0;
  for (const d of deltas) bytes += (await stat(d.file)).size;
  return passesQuota(rule, bytes);
}
