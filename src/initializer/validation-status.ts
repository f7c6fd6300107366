/**
 * Data-directory validation status: upstream's `validator.DataDirStatus` (pkg/initializer/validator/types.go),
 * same names and iota order. The numbers appear in upstream logs; FailBelowRevisionConsistencyError, which sat
 * between RevisionConsistencyError and FailToOpenBoltDBError before v0.43, went with the fail-below-revision
 * check.
 */
export const DataDirStatus = {
  DataDirectoryValid: 0,
  WrongVolumeMounted: 1,
  DataDirectoryNotExist: 2,
  DataDirectoryInvStruct: 3,
  DataDirectoryCorrupt: 4,
  BoltDBCorrupt: 5,
  DataDirectoryStatusUnknown: 6,
  DataDirStatusInvalidInMultiNode: 7,
  RevisionConsistencyError: 8,
  FailToOpenBoltDBError: 9,
} as const;

export type DataDirStatus = (typeof DataDirStatus)[keyof typeof DataDirStatus];

export type DataDirStatusName = keyof typeof DataDirStatus;

const NAMES = Object.fromEntries(Object.entries(DataDirStatus).map(([k, v]) => [v, k])) as Record<DataDirStatus, DataDirStatusName>;

/** The upstream constant name of a status, for logs and messages. */
export function dataDirStatusName(status: DataDirStatus): DataDirStatusName {
  return NAMES[status];
}

/**
 * How loudly a validation outcome is logged, by what it means for the member: a wrong volume or a database
 * that cannot be opened needs a person (error); corrupt or inconsistent data is replaced from the backups,
 * losing what the data dir held beyond them (warn); a missing or empty data dir (no member/snap/wal) is the normal
 * start of a new member (info).
 */
export function logLevelOfStatus(status: DataDirStatus): 'error' | 'warn' | 'info' {
  switch (status) {
    case DataDirStatus.WrongVolumeMounted:
    case DataDirStatus.FailToOpenBoltDBError:
      return 'error';
    case DataDirStatus.DataDirectoryCorrupt:
    case DataDirStatus.BoltDBCorrupt:
    case DataDirStatus.RevisionConsistencyError:
    case DataDirStatus.DataDirectoryStatusUnknown:
      return 'warn';
    default:
      return 'info';
  }
}
