/**
 * The leader's hash drill: runs src/verifier/hash-drill.ts on `--hash-drill-schedule`
 * (src/config/drill-schedule.ts decides when), one drill at a time, beside the snapshotter (its own loop: the
 * snapshot queue never waits for it), with the result in the `etcdbr_backup_hash_drill_*` metrics and a log
 * line that names the first differing revisions, so an alert fires when the store would not give back what
 * etcd holds. The drill's modules load with the first drill, not with the server.
 */
import type { Logger, SnapshotEncryption, SnapStore } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import { AFTER_FULL, nextDrillAt, type DrillSchedule } from '../config/drill-schedule.js';
import type { Metrics } from '../metrics.js';
import type { EtcdHashSource, HashDrillReport, runHashDrill } from './hash-drill.js';

export interface DrillRunnerDeps {
  store: () => Promise<SnapStore>;
  /** The members to compare with: the leader's own. */
  members: () => EtcdHashSource[];
  /** Where a drill fetches the chain to (--snapstore-temp-directory). */
  tempDir: string;
  metrics: Metrics;
  clock: Clock;
  logger: Logger;
  maxFetchers?: number;
  /** The drill itself (tests script it); by default hash-drill.ts's, loaded with the first drill. */
  runDrill?: typeof runHashDrill;
}

/**
 * A sidecar that encrypts its snapshots (recipients) but cannot decrypt them (no identity) cannot drill: the
 * default `after-full` is then off, with a reason to log (`off`); a schedule given explicitly is refused at
 * start-up (`refuse`), as `--verify-schedule` is. Both undefined: drill as scheduled.
 */
export function drillScheduleProblem(spec: string, encryption: SnapshotEncryption | undefined): { refuse?: string; off?: string } {
  if (spec.trim() === '' || encryption === undefined) return {};
  if (encryption.recipients.length === 0 || encryption.identities.length > 0) return {};
  const why =
    'the hash drill cannot read the backups this sidecar encrypts: it has recipients (--encryption-recipients-file) but no identity';
  if (spec.trim() === AFTER_FULL) return { off: `${why}; it is off (give --encryption-identity-file to drill)` };
  return {
    refuse: `--hash-drill-schedule: ${why}; give --encryption-identity-file (or ENCRYPTION_IDENTITY_FILE) too, or drop --hash-drill-schedule`,
  };
}

export class HashDrillRunner {
  private running: Promise<HashDrillReport> | undefined;
  private lastStartedAt: number | undefined;
  private fullSinceLastDrill = false;
  /** Wakes a schedule loop that waits for a full snapshot. */
  private wake: (() => void) | undefined;
  /** Scratch directories a killed drill of an earlier process left are removed before the first drill. */
  private swept = false;

  constructor(private readonly deps: DrillRunnerDeps) {}

  /** The snapshotter stored a full snapshot (the `after-full` schedule waits for one). */
  fullSnapshotStored(): void {
    this.fullSinceLastDrill = true;
    this.wake?.();
  }

  /** Drills now, or joins the drill under way; rejects when the store or etcd cannot be read, or `signal` aborts. */
  drillNow(signal?: AbortSignal): Promise<HashDrillReport> {
    this.running ??= this.drill(signal).finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /** Drills on `schedule` until `signal` aborts; a failed drill is logged and counted, and the next one comes. */
  async runOnSchedule(schedule: DrillSchedule, signal: AbortSignal): Promise<void> {
    const { clock, logger } = this.deps;
    while (!signal.aborted) {
      const now = clock.now().getTime();
      const due = nextDrillAt(schedule, {
        now,
        fullSinceLastDrill: this.fullSinceLastDrill,
        ...(this.lastStartedAt === undefined ? {} : { lastStartedAt: this.lastStartedAt }),
      });
      try {
        if (due === undefined) await this.untilFullSnapshot(signal);
        else if (due > now) await clock.sleep(due - now, signal);
      } catch {
        return; // aborted
      }
      if (due === undefined) continue;
      this.fullSinceLastDrill = false;
      this.lastStartedAt = clock.now().getTime();
      await this.drillNow(signal).catch((err: unknown) => {
        if (!signal.aborted) logger.warn({ err }, 'hash drill could not read the store or etcd');
      });
    }
  }

  private untilFullSnapshot(signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        this.wake = undefined;
        reject(signal.reason as Error);
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      this.wake = () => {
        this.wake = undefined;
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
    });
  }

  private async drill(signal?: AbortSignal): Promise<HashDrillReport> {
    const { metrics, logger, clock } = this.deps;
    let report: HashDrillReport;
    try {
      const [runDrill, { removeLeftoverScratch }] = await Promise.all([
        this.deps.runDrill ?? import('./hash-drill.js').then((m) => m.runHashDrill),
        import('./local-chain.js'),
      ]);
      if (!this.swept) {
        this.swept = true;
        const removed = await removeLeftoverScratch(this.deps.tempDir, true);
        if (removed.length > 0)
          logger.info({ removed, dir: this.deps.tempDir }, 'removed the scratch directories of hash drills a stopped process left');
      }
      report = await runDrill(await this.deps.store(), this.deps.members(), {
        tempDir: this.deps.tempDir,
        maxFetchers: this.deps.maxFetchers ?? 6,
        ...(signal ? { signal } : {}),
        onStep: (range) => logger.info({ after: range.lo, upTo: range.hi }, 'hash drill: narrowing down where the store differs from etcd'),
      });
    } catch (err) {
      if (!signal?.aborted) {
        metrics.hashDrillRuns.labels('error').inc();
        metrics.hashDrillLastRunTimestamp.set(clock.now().getTime() / 1000);
      }
      throw err;
    }
    const endedAt = clock.now().getTime() / 1000;
    metrics.hashDrillRuns.labels(report.outcome).inc();
    metrics.hashDrillLastRunTimestamp.set(endedAt);
    const facts = { revision: report.revision, base: report.base, deltas: report.deltas, members: report.members, ms: report.durationMs };
    if (report.outcome === 'match') {
      metrics.hashDrillLastProvenRevision.set(report.revision);
      metrics.hashDrillLastProvenTimestamp.set(endedAt);
      logger.info(facts, `hash drill: the store gives back what etcd holds at revision ${report.revision}`);
    } else if (report.outcome === 'mismatch') {
      logger.error(
        { ...facts, difference: report.difference },
        `hash drill: the store does NOT give back what etcd holds: ${report.difference?.message ?? 'the hashes differ'}`,
      );
    } else {
      logger.warn({ ...facts, reason: report.reason }, `hash drill: nothing compared: ${report.reason ?? 'no reason given'}`);
    }
    return report;
  }
}
