/**
 * Whether what etcd reports under a running snapshotter still belongs to the history the store's chain
 * records. A delta chain is only valid while etcd's revisions keep growing within one cluster: when etcd is
 * restored to an older revision or replaced by another cluster, the revisions after that point are reused
 * by different writes, so the old chain must not be continued (a watch resuming from its last revision would
 * silently skip the new writes that reuse lower revisions).
 */
export interface TimelinePoint {
  /** Store revision etcd reported (a response header's revision). */
  revision: number;
  /** etcd's cluster ID as a decimal string, when known. */
  clusterId?: string | undefined;
}

export type TimelineVerdict = { continues: true } | { continues: false; reason: string };

export function continuesTimeline(last: TimelinePoint | undefined, seen: TimelinePoint): TimelineVerdict {
  if (last === undefined) return { continues: true };
  if (last.clusterId && seen.clusterId && last.clusterId !== seen.clusterId) {
    return { continues: false, reason: `etcd's cluster ID changed from ${last.clusterId} to ${seen.clusterId} (etcd was replaced)` };
  }
  if (seen.revision < last.revision) {
    return {
      continues: false,
      reason: `etcd's revision went backwards from ${last.revision} to ${seen.revision} (etcd was restored or replaced)`,
    };
  }
  return { continues: true };
}

/** The newest point seen so far: the higher revision, and the cluster ID once one is known. */
export function advanceTimeline(last: TimelinePoint | undefined, seen: TimelinePoint): TimelinePoint {
  return {
    revision: Math.max(last?.revision ?? 0, seen.revision),
    clusterId: last?.clusterId || seen.clusterId,
  };
}
