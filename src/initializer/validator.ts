/**
 * Data-directory validation (upstream `pkg/initializer/validator/datavalidator.go` `DataValidator.Validate`).
 *
 * Sanity (both modes): safe_guard file, data dir and member/{snap,wal} structure, then, with a snapstore,
 * the backend's revision against the latest backup (a member of a multi-node cluster skips that: it catches
 * up from the leader). A backend behind the backups gets one chance to catch up by WAL replay, done by the
 * injected `catchUp` (a local etcd on the data dir). Full mode then loads the newest .snap, verifies the WAL
 * against it and runs the bbolt consistency check; any failure there means DataDirectoryCorrupt.
 *
 * Everything is read directly from the files (src/bbolt, src/wal), no etcd binary, and nothing in the data
 * dir is modified: upstream's `wal.Repair` of a torn WAL tail and renaming of broken .snap files are left to
 * etcd, which does both itself when it starts. The only write is the safe_guard file next to the data dir.
 */
import { chmod, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { BoltError } from '../bbolt/db.js';
import { checkConsistency } from '../bbolt/check.js';
import { waitForFlockRelease } from '../bbolt/lock.js';
import { latestRevision } from '../backend/store-revision.js';
import type { Logger } from '../log.js';
import { loadNewestSnapshot } from '../wal/snap.js';
import { verifyWal } from '../wal/verify.js';
import { DataDirStatus, dataDirStatusName, logLevelOfStatus } from './validation-status.js';

export type ValidationMode = 'sanity' | 'full';

export interface ValidateDataDirOptions {
  dataDir: string;
  mode: ValidationMode;
  /** POD_NAMESPACE; when set, `dirname(dataDir)/safe_guard` must hold it (created if absent). */
  podNamespace?: string;
  /**
   * Last revision of the latest backup set (last delta's, else the full's). `undefined`: no snapstore is
   * configured (revision checks are skipped); 0: a snapstore with no backups. A function is called at most
   * once and only when the value is needed (it lists the store); if it throws, the status is unknown.
   */
  latestSnapshotRevision?: number | (() => Promise<number>);
  /** Members in the etcd config's initial-cluster. */
  clusterSize: number;
  /**
   * Replays the WAL onto the backend (upstream: embedded etcd, `Get` polled every 1 s for up to 60 s) and
   * says whether the backend reached `targetRevision`. Throwing means etcd could not start on the data dir.
   * Without it, a backend behind the backups is a RevisionConsistencyError.
   */
  catchUp?: (dataDir: string, targetRevision: number) => Promise<boolean>;
  logger: Logger;
  /** How long a lock on member/snap/db held by another process is waited for. Default 120 s, as upstream. */
  lockTimeoutMs?: number;
}

export interface ValidationResult {
  status: DataDirStatus;
  /** Why the status is not DataDirectoryValid (also logged). */
  reason?: string;
  /** Full mode: what the WAL or bbolt checks found, one line each. */
  problems?: string[];
  /** The backend's revision, when it was read. */
  dbRevision?: number;
  /** Full mode: the last WAL segment ends in a torn record that etcd will truncate on start. */
  walRepairable?: boolean;
}

const DEFAULT_LOCK_TIMEOUT_MS = 120_000;
const MAX_REPORTED_PROBLEMS = 20;

/** Validates the data dir; never throws for what it finds on disk (that is what the status is for). */
export async function validateDataDir(opts: ValidateDataDirOptions): Promise<ValidationResult> {
  const v = new Validation(opts);
  const sanity = await v.sanity();
  if (sanity.status !== DataDirStatus.DataDirectoryValid) return v.checkStatus(sanity);
  if (opts.mode === 'full') {
    opts.logger.info('Checking for data directory files corruption...');
    const full = await v.full();
    if (full.status !== DataDirStatus.DataDirectoryValid) return full;
    if (full.walRepairable) sanity.walRepairable = true;
  }
  opts.logger.info('Data directory valid.');
  return sanity;
}

class Validation {
  private readonly log: Logger;
  private readonly memberDir: string;
  private readonly snapDir: string;
  private readonly walDir: string;
  private readonly dbPath: string;
  private latest: Promise<number> | undefined;

  constructor(private readonly opts: ValidateDataDirOptions) {
    this.log = opts.logger;
    this.memberDir = join(opts.dataDir, 'member');
    this.snapDir = join(this.memberDir, 'snap');
    this.walDir = join(this.memberDir, 'wal');
    this.dbPath = join(this.snapDir, 'db');
  }

  private result(status: DataDirStatus, reason?: string, extra: Partial<ValidationResult> = {}): ValidationResult {
    if (reason !== undefined) {
      this.log[logLevelOfStatus(status)]({ status: dataDirStatusName(status) }, reason);
    }
    return reason === undefined ? { status, ...extra } : { status, reason, ...extra };
  }

  async sanity(): Promise<ValidationResult> {
    const { dataDir } = this.opts;
    const guard = await this.safeGuard();
    if (guard) return guard;

    const dirState = await exists(dataDir);
    if (dirState === 'missing') return this.result(DataDirStatus.DataDirectoryNotExist, `directory does not exist: ${dataDir}`);
    if (typeof dirState === 'object') {
      return this.result(DataDirStatus.DataDirectoryStatusUnknown, `cannot stat ${dataDir}: ${dirState.message}`);
    }
    if (dirState !== 'dir') return this.result(DataDirStatus.DataDirectoryInvStruct, `${dataDir} is not a directory`);

    this.log.info('Checking for data directory structure validity...');
    for (const d of [this.memberDir, this.snapDir, this.walDir]) {
      const s = await exists(d);
      if (typeof s === 'object') return this.result(DataDirStatus.DataDirectoryStatusUnknown, `cannot stat ${d}: ${s.message}`);
      if (s !== 'dir')
        return this.result(
          DataDirStatus.DataDirectoryInvStruct,
          `Data directory structure invalid: ${d} ${s === 'missing' ? 'is missing' : 'is not a directory'}`,
        );
    }

    if (this.opts.latestSnapshotRevision === undefined) {
      this.log.info('Skipping check for revision consistency, since no snapstore configured.');
      return { status: DataDirStatus.DataDirectoryValid };
    }

    this.log.info('Checking for Etcd revision...');
    const locked = await this.lockTimedOut();
    if (locked) return locked;
    let dbRevision: number;
    try {
      dbRevision = await latestRevision(this.dbPath);
    } catch (err) {
      // bbolt panics on malformed pages (upstream: BoltDBCorrupt); failing to open or a missing bucket is an error.
      const status =
        err instanceof BoltError && err.code === 'E_BOLT_CORRUPT' ? DataDirStatus.BoltDBCorrupt : DataDirStatus.DataDirectoryCorrupt;
      return this.result(status, `unable to get current etcd revision from backend db file: ${(err as Error).message}`);
    }

    if (this.opts.clusterSize > 1) {
      this.log.info('Skipping check for revision consistency of etcd member as it will get in sync with etcd leader.');
      return { status: DataDirStatus.DataDirectoryValid, dbRevision };
    }

    this.log.info('Checking for etcd revision consistency...');
    let latest: number;
    try {
      latest = await this.latestSnapshotRevision();
    } catch (err) {
      return this.result(DataDirStatus.DataDirectoryStatusUnknown, `unable to get snapshots from store: ${(err as Error).message}`, {
        dbRevision,
      });
    }
    if (latest === 0) {
      this.log.info('No snapshot found.');
      return { status: DataDirStatus.DataDirectoryValid, dbRevision };
    }
    if (dbRevision >= latest) return { status: DataDirStatus.DataDirectoryValid, dbRevision };

    this.log.info(
      { dbRevision, latestSnapshotRevision: latest },
      `current etcd revision (${dbRevision}) is less than latest snapshot revision (${latest})`,
    );
    if (!this.opts.catchUp) {
      return this.result(
        DataDirStatus.RevisionConsistencyError,
        `etcd revision ${dbRevision} is behind the latest snapshot revision ${latest}`,
        { dbRevision },
      );
    }
    this.log.info('Checking for Full revision consistency...');
    let caughtUp: boolean;
    try {
      caughtUp = await this.opts.catchUp(this.opts.dataDir, latest);
    } catch (err) {
      return this.result(DataDirStatus.DataDirectoryCorrupt, `unable to start embedded etcd: ${(err as Error).message}`, { dbRevision });
    }
    if (!caughtUp) {
      return this.result(
        DataDirStatus.RevisionConsistencyError,
        `after WAL replay the backend revision is still below the latest snapshot revision (${latest}): possible data loss`,
        { dbRevision },
      );
    }
    this.log.info(`After WAL replay the backend revision reached the latest snapshot revision (${latest}): no data loss`);
    return { status: DataDirStatus.DataDirectoryValid, dbRevision };
  }

  /** Upstream checkStatus: the filter applied to a failed sanity check. */
  async checkStatus(r: ValidationResult): Promise<ValidationResult> {
    if (r.status === DataDirStatus.WrongVolumeMounted || r.status === DataDirStatus.FailToOpenBoltDBError) return r;
    if (this.opts.clusterSize > 1 && !(await this.backupBucketEmpty())) {
      return this.result(
        DataDirStatus.DataDirStatusInvalidInMultiNode,
        `data dir invalid (${dataDirStatusName(r.status)}) in a multi-node cluster with backups`,
        r.dbRevision === undefined ? {} : { dbRevision: r.dbRevision },
      );
    }
    return r;
  }

  async full(): Promise<ValidationResult> {
    try {
      this.log.info('Verifying snap directory...');
      const snaps = await loadNewestSnapshot(this.snapDir);
      for (const b of snaps.broken) this.log.warn({ file: b.name }, `skipping broken snapshot file: ${b.reason}`);
      const ref = snaps.snapshot ?? { index: 0, term: 0 };
      if (snaps.snapshot) this.log.info({ file: snaps.snapshot.name, index: ref.index, term: ref.term }, 'loaded newest snapshot');

      this.log.info('Verifying WAL directory...');
      const wal = await verifyWal(this.walDir, ref);
      if (!wal.ok) {
        return this.result(DataDirStatus.DataDirectoryCorrupt, `Data directory corrupt. invalid wal files: ${wal.problems[0]}`, {
          problems: wal.problems.slice(0, MAX_REPORTED_PROBLEMS),
        });
      }
      if (wal.repairable) {
        const { file, offset, message, followedByRecords } = wal.repairable;
        this.log.warn(
          { file, offset, followedByRecords: followedByRecords === true },
          `WAL tail is torn and will be truncated by etcd on start${followedByRecords ? ' (dropping the frames after it)' : ''}: ${message}`,
        );
      }

      this.log.info('Verifying DB file...');
      const locked = await this.lockTimedOut();
      if (locked) return locked;
      const check = await checkConsistency(this.dbPath);
      for (const w of check.warnings) this.log.warn(w);
      if (!check.ok) {
        const problems = check.problems.slice(0, MAX_REPORTED_PROBLEMS).map((p) => p.message);
        return this.result(
          DataDirStatus.DataDirectoryCorrupt,
          `Data directory corrupt. invalid db files: ${check.problemCount} problem(s), first: ${problems[0]}`,
          { problems },
        );
      }
      return wal.repairable
        ? { status: DataDirStatus.DataDirectoryValid, walRepairable: true }
        : { status: DataDirStatus.DataDirectoryValid };
    } catch (err) {
      // Upstream turns every error of the corruption check into DataDirectoryCorrupt.
      return this.result(DataDirStatus.DataDirectoryCorrupt, `Data directory corrupt. ${(err as Error).message}`);
    }
  }

  private async safeGuard(): Promise<ValidationResult | undefined> {
    const ns = this.opts.podNamespace;
    if (!ns) {
      this.log.warn('POD_NAMESPACE environment variable is not set. The variable is used to safe guard against wrong volume mount');
      return undefined;
    }
    const path = join(goPathDir(this.opts.dataDir), 'safe_guard');
    let content: string;
    try {
      try {
        content = await readFile(path, 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        // The volume's mount point normally exists; a fresh local setup may not have it yet.
        await mkdir(goPathDir(this.opts.dataDir), { recursive: true, mode: 0o700 });
        await writeFile(path, ns, { mode: 0o600, flag: 'wx' }).catch((e: NodeJS.ErrnoException) => {
          if (e.code !== 'EEXIST') throw e;
        });
        content = await readFile(path, 'utf8');
      }
    } catch (err) {
      // Upstream exits the process here; a status lets the caller report it instead.
      return this.result(
        DataDirStatus.DataDirectoryStatusUnknown,
        `can't check or create the safe_guard file ${path}: ${(err as Error).message}`,
      );
    }
    await chmod(path, 0o600).catch((err: Error) => this.log.warn({ err }, `cannot chmod ${path} to 0600`));
    if (content !== ns) {
      return this.result(
        DataDirStatus.WrongVolumeMounted,
        `wrong volume is mounted. The shoot name derived from namespace is ${ns} and the content of \`safe_guard\` file at ${path} is ${content}`,
      );
    }
    return undefined;
  }

  private async lockTimedOut(): Promise<ValidationResult | undefined> {
    const free = await waitForFlockRelease(this.dbPath, this.opts.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS);
    if (free) return undefined;
    return this.result(DataDirStatus.FailToOpenBoltDBError, `another etcd process is using ${this.dbPath} and holds the file lock`);
  }

  private latestSnapshotRevision(): Promise<number> {
    const v = this.opts.latestSnapshotRevision;
    this.latest ??= typeof v === 'function' ? v() : Promise.resolve(v ?? 0);
    return this.latest;
  }

  /** Upstream IsBackupBucketEmpty: no store, no backups, or a store that cannot be listed. */
  private async backupBucketEmpty(): Promise<boolean> {
    if (this.opts.latestSnapshotRevision === undefined) return true;
    try {
      return (await this.latestSnapshotRevision()) === 0;
    } catch {
      return true;
    }
  }
}

type Existence = 'dir' | 'other' | 'missing' | Error;

async function exists(p: string): Promise<Existence> {
  try {
    return (await stat(p)).isDirectory() ? 'dir' : 'other';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'missing' : (err as Error);
  }
}

/** Go's path.Dir: everything before the last slash, cleaned ("/a/b/" gives "/a/b", as upstream computes it). */
export function goPathDir(p: string): string {
  const i = p.lastIndexOf('/');
  if (i < 0) return '.';
  const dir = posix.normalize(p.slice(0, i + 1));
  return dir.length > 1 && dir.endsWith('/') ? dir.slice(0, -1) : dir;
}
