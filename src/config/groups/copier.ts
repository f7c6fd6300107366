import { defineGroup } from '../schema.js';
import type { CopierConfig } from '../types.js';

/** Copier (`cmd/options.go` copierOptions, only `copy`). */
export const copierGroup = defineGroup<CopierConfig>({
  title: 'copier',
  fields: {
    maxBackupsToCopy: { type: 'int', flag: 'max-backups-to-copy', usage: 'number of newest backups to copy; -1 = all' },
    maxBackupAge: { type: 'int', flag: 'max-backup-age', usage: 'copy only backups younger than this many days; -1 = all' },
    maxParallelCopyOperations: { type: 'int', flag: 'max-parallel-copy-operations', usage: 'number of snapshots copied in parallel' },
    waitForFinalSnapshot: {
      type: 'bool',
      flag: 'wait-for-final-snapshot',
      usage: 'wait until the source has a final full snapshot before copying',
    },
    waitForFinalSnapshotTimeout: {
      type: 'duration',
      flag: 'wait-for-final-snapshot-timeout',
      usage: 'give up waiting for the final snapshot after this long and copy anyway; 0 = no timeout',
    },
  },
  defaults: () => ({
    maxBackupsToCopy: -1,
    maxBackupAge: -1,
    maxParallelCopyOperations: 10,
    waitForFinalSnapshot: false,
    waitForFinalSnapshotTimeout: 0,
  }),
  validate(c, issues, flag) {
    if (c.maxBackupsToCopy < -1) issues.add(`${flag('maxBackupsToCopy')} must be -1 (all) or greater`);
    if (c.maxBackupAge < -1) issues.add(`${flag('maxBackupAge')} must be -1 (no filter) or greater`);
    if (c.maxParallelCopyOperations <= 0) issues.add(`${flag('maxParallelCopyOperations')} must be greater than 0`);
    if (c.waitForFinalSnapshotTimeout < 0) issues.add(`${flag('waitForFinalSnapshotTimeout')} must not be negative`);
  },
});
