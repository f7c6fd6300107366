import { defineGroup } from '../schema.js';
import type { SnapshotterConfig } from '../types.js';
import { cronScheduleError } from '../cron.js';

export const DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT = 10 * 1024 * 1024;

/** Snapshotter (`pkg/types/snapshotter.go`, defaults of `NewSnapshotterConfig`). */
export const snapshotterGroup = defineGroup<SnapshotterConfig>({
  title: 'snapshotter',
  fields: {
    schedule: { type: 'string', flag: 'schedule', shorthand: 's', usage: 'cron schedule of full snapshots (5 fields)' },
    deltaSnapshotPeriod: {
      type: 'duration',
      flag: 'delta-snapshot-period',
      usage: 'period after which a delta snapshot is persisted; below 1s disables delta snapshots',
    },
    deltaSnapshotMemoryLimit: {
      type: 'uint',
      flag: 'delta-snapshot-memory-limit',
      usage: 'size in bytes of buffered events after which a delta snapshot is taken early',
    },
    garbageCollectionPeriod: {
      type: 'duration',
      flag: 'garbage-collection-period',
      usage: 'period of garbage collection of old backups; 1s or less disables it',
    },
    garbageCollectionPolicy: {
      type: 'string',
      flag: 'garbage-collection-policy',
      usage: 'policy for garbage collecting old backups: Exponential or LimitBased',
    },
    maxBackups: { type: 'uint', flag: 'max-backups', shorthand: 'm', usage: 'number of full backups kept by the LimitBased policy' },
    deltaSnapshotRetentionPeriod: {
      type: 'duration',
      flag: 'delta-snapshot-retention-period',
      usage: 'how long delta snapshots older than the latest full snapshot are kept',
    },
  },
  defaults: () => ({
    schedule: '0 */1 * * *',
    deltaSnapshotPeriod: 20_000,
    deltaSnapshotMemoryLimit: DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT,
    garbageCollectionPeriod: 60_000,
    garbageCollectionPolicy: 'Exponential',
    maxBackups: 7,
    deltaSnapshotRetentionPeriod: 0,
  }),
  complete(c, notes) {
    if (c.deltaSnapshotMemoryLimit < 1) {
      notes.add(`delta snapshot memory limit is below 1 byte; using the default ${DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT}`);
      c.deltaSnapshotMemoryLimit = DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT;
    }
  },
  validate(c, issues, flag) {
    const cronErr = cronScheduleError(c.schedule);
    if (cronErr !== undefined) issues.add(`${flag('schedule')}: invalid schedule ${JSON.stringify(c.schedule)}: ${cronErr}`);
    if (c.garbageCollectionPolicy !== 'Exponential' && c.garbageCollectionPolicy !== 'LimitBased') {
      issues.add(
        `${flag('garbageCollectionPolicy')}: unknown policy ${JSON.stringify(c.garbageCollectionPolicy)}; use Exponential or LimitBased`,
      );
    }
    if (c.garbageCollectionPolicy === 'LimitBased' && c.maxBackups <= 0) {
      issues.add(`${flag('maxBackups')} must be greater than 0 with the LimitBased garbage collection policy`);
    }
    if (c.deltaSnapshotRetentionPeriod < 0) issues.add(`${flag('deltaSnapshotRetentionPeriod')} must not be negative`);
  },
});
