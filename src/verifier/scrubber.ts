/**
 * The server's backup verification: one scrub of the newest chain at a time (an HTTP request that arrives
 * during a scheduled scrub gets that scrub's report), on the leader's `--verify-schedule`, with the result
 * in the `etcdbr_backup_*` metrics, so an alert fires on a broken or stale backup before anyone needs it.
 */
import { EtcdbrError } from '../errors.js';
import type { Logger, SnapshotEncryption, SnapStore } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import type { Metrics } from '../metrics.js';
import type { CronSchedule } from '../config/schedule.js';
import type { VerifyReport } from './verify.js';

export interface ScrubberDeps {
  store: () => Promise<SnapStore>;
  metrics: Metrics;
  clock: Clock;
  logger: Logger;
  maxFetchers?: number;
}

/**
 * `--verify-schedule` on a sidecar that encrypts its snapshots (recipients) but cannot decrypt them (no
 * identity) would never check a new backup: refused at start-up rather than reporting "cannot check" on every
 * run. Returns what is wrong, or undefined. (Without recipients the schedule checks whatever it can open.)
 */
export function scheduledVerificationProblem(verifySchedule: string, encryption: SnapshotEncryption | undefined): string | undefined {
  if (verifySchedule === '' || encryption === undefined) return undefined;
  if (encryption.recipients.length === 0 || encryption.identities.length > 0) return undefined;
  return (
    '--verify-schedule cannot check the backups this sidecar encrypts: it has recipients (--encryption-recipients-file) but no ' +
    'identity to decrypt them; give --encryption-identity-file (or ENCRYPTION_IDENTITY_FILE) too, or drop --verify-schedule and ' +
    'run `etcdbrctl verify` with the identity where it is kept'
  );
}

export class BackupScrubber {
  private running: Promise<VerifyReport> | undefined;

  constructor(private readonly deps: ScrubberDeps) {}

  /**
   * Scrubs the newest chain now, or joins the scrub under way. Rejects when the store cannot be read, or
   * when `signal` (of the scrub that started it) aborts.
   */
  scrubNow(signal?: AbortSignal): Promise<VerifyReport> {
    this.running ??= this.scrub(signal).finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /** Scrubs on `schedule` until `signal` aborts; a failed scrub is logged and counted, and the next one runs. */
  async runOnSchedule(schedule: CronSchedule, signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.deps;
    while (!signal.aborted) {
      const wait = schedule.next(clock.now()).getTime() - clock.now().getTime();
      try {
        await clock.sleep(Math.max(0, wait), signal);
      } catch {
        return; // aborted
      }
      await this.scrubNow(signal).catch((err: unknown) => {
        if (!signal.aborted) logger.warn({ err }, 'backup verification could not read the store');
      });
    }
  }

  private async scrub(signal?: AbortSignal): Promise<VerifyReport> {
    const { metrics, logger } = this.deps;
    let report: VerifyReport;
    try {
      // The checkers (bbolt, delta parsing) load with the first scrub, not with the server.
      const [{ planVerification }, { verifyBackups }] = await Promise.all([import('./chains.js'), import('./verify.js')]);
      const store = await this.deps.store();
      const plan = planVerification(await store.list(), { all: false });
      report = await verifyBackups(store, plan, {
        maxFetchers: this.deps.maxFetchers ?? 6,
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      if (!signal?.aborted) metrics.backupVerifyFailures.inc();
      throw err;
    }
    // An aborted scrub reports the objects it was cut off in as broken: that is no verdict on the backups.
    if (signal?.aborted)
      throw signal.reason instanceof Error ? signal.reason : new EtcdbrError('E_STOPPED', 'backup verification was stopped');
    const newest = report.chains.at(-1);
    if (!report.firstBroken && report.firstUnverifiable) {
      // No identity opens the encrypted objects: no verdict on the backups, so no failure and no metric moves.
      logger.warn(
        { notChecked: report.firstUnverifiable, checkedUpToRevision: newest?.restorableRevision ?? 0 },
        'backup verification: cannot check the encrypted backups without an identity (--encryption-identity-file)',
      );
    } else if (report.restorable && newest) {
      metrics.backupLastVerifiedRevision.set(newest.restorableRevision);
      if (newest.restorableTime) metrics.backupLatestRestorableTimestamp.set(Date.parse(newest.restorableTime) / 1000);
      logger.info(
        { revision: newest.restorableRevision, bytes: report.bytes, ms: report.durationMs },
        'backup verification: the newest chain restores',
      );
    } else {
      metrics.backupVerifyFailures.inc();
      metrics.backupLastVerifiedRevision.set(newest?.restorableRevision ?? 0);
      if (newest?.restorableTime) metrics.backupLatestRestorableTimestamp.set(Date.parse(newest.restorableTime) / 1000);
      logger.error(
        { broken: report.firstBroken, restorableRevision: newest?.restorableRevision ?? 0 },
        'backup verification: the newest chain does NOT restore as stored',
      );
    }
    return report;
  }
}
