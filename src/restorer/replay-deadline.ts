/**
 * How long one call to the restore's replay etcd (a transaction, a revision read, the connect, a compaction or
 * defragmentation) may wait. A module of its own so that the CLI's deadline settings, loaded by every command,
 * do not load the online replay.
 */
export const REPLAY_CALL_TIMEOUT_MS = 30_000;
