/**
 * Secondary backup sync of `etcdbrctl server` (upstream `pkg/server/backuprestoreserver.go`, since v0.41 #917): while this
 * sidecar leads, every backup of the primary store is copied to the secondary store (`--secondary-*`,
 * `SECONDARY_*` credentials) at once and then every `--secondary-backup-sync-period`, and the secondary
 * store is garbage-collected with the primary's policy and period.
 *
 * - A round is the copier with upstream's fixed settings: all backups, 10 workers, no wait for a final
 *   snapshot; what the secondary has already (name without `.final`) is skipped, copies never carry `.final`.
 * - Rounds are scheduled start to start, as upstream's ticker: a round that overran its period is followed
 *   by the next one at once, never by two.
 * - A failed round (secondary unreachable, an object that could not be copied) is logged and counted in
 *   `etcdbr_snapshotter_failure`, never fatal; the next round retries whatever is still missing. An
 *   object that the primary's GC deleted between the listing and its copy is no failure.
 * - Unlike upstream, a GC pass never runs during a copy round (nor a round during a pass): a pass in the
 *   middle of a round would judge a half-copied backup and delete what the round is about to complete.
 * - Aborting the signal (leadership lost, SIGTERM) stops both loops; copies in flight are aborted and
 *   the secondary store commits nothing partial (SnapStore.save's contract).
 */
import { asError } from '../errors.js';
import { isSnapStoreError, type CredentialEnv, type GcResult, type Logger, type SnapStore, type StoreConfig } from '@etcdbrctl/snapstore';
import type { Clock } from '../clock.js';
import { STORE_ENV_PREFIX } from '../config/store.js';
import type { CopierConfig, ServerConfig } from '../config/types.js';
import { failureLabel, type Metrics } from '../metrics.js';
import { GarbageCollector, type GarbageCollectorConfig } from '../snapshotter/garbage-collector.js';
import { RotatingStore } from '../config/store-provider.js';
import { CopyError, copyBackups, type CopyResult } from './copier.js';
import { saveBufferBytes } from './save-buffer.js';

/** Upstream's copier settings for the sync: every backup, 10 workers, no final-snapshot wait. */
export const SECONDARY_SYNC_COPIER_CONFIG: Readonly<CopierConfig> = Object.freeze({
  maxBackupsToCopy: -1,
  maxBackupAge: -1,
  maxParallelCopyOperations: 10,
  waitForFinalSnapshot: false,
  waitForFinalSnapshotTimeout: 0,
});

export interface SecondarySyncConfig {
  /** `--secondary-backup-sync-period`. */
  periodMs: number;
  /** The primary's GC settings; a period <= 1 s disables GC of the secondary store too. */
  gc: GarbageCollectorConfig;
}

/** How a sync round ended. */
export type SyncRound =
  | { status: 'synced'; result: CopyResult }
  | { status: 'failed'; error: Error }
  /** The signal aborted it; nothing partial was committed. */
  | { status: 'aborted' };

export interface SecondarySyncDeps {
  /** Asked at every round, so rotated credentials take effect (RotatingStore.get). */
  primary: () => Promise<SnapStore>;
  secondary: () => Promise<SnapStore>;
  /** What one save into the secondary buffers in memory (see save-buffer.ts); bounds parallel copies. */
  saveBufferBytes?: number;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
  /** After every round (logging and tests). */
  onRound?: (round: SyncRound) => void;
  /** After every GC pass of the secondary store; undefined when the pass failed as a whole. */
  onCollected?: (result: GcResult | undefined) => void;
}

/** The state of one leadership term: rounds and GC passes take turns through `exclusive`. */
interface Term {
  signal: AbortSignal;
  /** Settles when the round or pass holding the turn is done. */
  turn: Promise<void>;
  /** Highest revision known to be in the secondary (the GC keeps chunks above it). */
  syncedRevision: number;
}

export class SecondarySync {
  private readonly log: Logger;

  constructor(
    private readonly config: SecondarySyncConfig,
    private readonly deps: SecondarySyncDeps,
  ) {
    this.log = withFields(deps.logger, { sync: 'secondary' });
  }

  /** Copies and collects until `signal` aborts; never throws. */
  async run(signal: AbortSignal): Promise<void> {
    const term: Term = { signal, turn: Promise.resolve(), syncedRevision: 0 };
    this.log.info({ periodMs: this.config.periodMs }, 'secondary backup sync started');
    await Promise.all([this.syncLoop(term), this.collectLoop(term)]);
    this.log.info({}, 'secondary backup sync stopped');
  }

  /** One copy round from primary to secondary; never throws. */
  async syncOnce(signal: AbortSignal): Promise<SyncRound> {
    const round = await this.copyRound(signal);
    this.deps.onRound?.(round);
    return round;
  }

  private async syncLoop(term: Term): Promise<void> {
    const { clock } = this.deps;
    while (!term.signal.aborted) {
      const started = clock.now().getTime();
      const round = await exclusive(term, () => this.syncOnce(term.signal));
      if (round.status === 'synced') {
        for (const s of round.result.selected) term.syncedRevision = Math.max(term.syncedRevision, s.lastRevision);
      }
      const wait = started + this.config.periodMs - clock.now().getTime();
      if (wait <= 0) continue;
      try {
        await clock.sleep(wait, term.signal);
      } catch {
        return;
      }
    }
  }

  private async collectLoop(term: Term): Promise<void> {
    const gc = new GarbageCollector(this.config.gc, {
      store: this.deps.secondary,
      latestSnapshotRevision: () => term.syncedRevision,
      clock: this.deps.clock,
      logger: this.log,
      metrics: this.deps.metrics,
    });
    if (!gc.enabled) {
      this.log.info({ periodMs: this.config.gc.periodMs }, 'garbage collection period <= 1s: secondary store not garbage-collected');
      return;
    }
    while (!term.signal.aborted) {
      try {
        await this.deps.clock.sleep(this.config.gc.periodMs, term.signal);
      } catch {
        return;
      }
      const result = await exclusive(term, async () => (term.signal.aborted ? null : await gc.collectOnce()));
      if (result !== null) this.deps.onCollected?.(result);
    }
  }

  private async copyRound(signal: AbortSignal): Promise<SyncRound> {
    if (signal.aborted) return { status: 'aborted' };
    const { clock, metrics } = this.deps;
    try {
      const source = await this.deps.primary();
      const destination = await this.deps.secondary();
      const result = await copyBackups(
        {
          source,
          destination,
          logger: this.log,
          clock,
          signal,
          ...(this.deps.saveBufferBytes !== undefined ? { saveBufferBytes: this.deps.saveBufferBytes } : {}),
        },
        SECONDARY_SYNC_COPIER_CONFIG,
      );
      this.log.info(
        { copied: result.copied.length, skipped: result.skipped.length, bytes: result.bytes, ms: result.durationMs },
        'secondary backup sync round finished',
      );
      return { status: 'synced', result };
    } catch (err) {
      if (err instanceof CopyError && !signal.aborted && err.result.failures.every((f) => isSnapStoreError(f.error.cause, 'E_NOT_FOUND'))) {
        // Only objects the primary's GC deleted after the listing failed: nothing is missing, no failure.
        this.log.info(
          {
            vanished: err.result.failures.map((f) => f.snapshot.snapName),
            copied: err.result.copied.length,
            skipped: err.result.skipped.length,
          },
          'secondary backup sync round finished; some snapshots were deleted from the primary meanwhile',
        );
        return { status: 'synced', result: err.result };
      }
      if (signal.aborted) {
        this.log.info({}, 'secondary backup sync round interrupted; copies in flight were not committed');
        return { status: 'aborted' };
      }
      const error = asError(err);
      // Object names stay out of the label: a label per failed round would grow without bound.
      const label =
        err instanceof CopyError
          ? 'secondary backup sync: some snapshots could not be copied'
          : `secondary backup sync: ${failureLabel(error)}`;
      metrics.snapshotterFailure.labels(label).inc();
      this.log.error(
        { err: error, retryInMs: this.config.periodMs },
        `secondary backup sync round failed; retrying next period: ${error.message}`,
      );
      return { status: 'failed', error };
    }
  }
}

/** Runs `fn` when the previous holder of the term's turn is done. */
function exclusive<T>(term: Term, fn: () => Promise<T>): Promise<T> {
  const next = term.turn.then(fn);
  term.turn = next.then(
    () => undefined,
    () => undefined,
  );
  return next;
}

/** Tags every line, so the copier's "source"/"destination" lines read as primary → secondary. */
function withFields(logger: Logger, fields: Record<string, unknown>): Logger {
  const at =
    (level: keyof Logger) =>
    (obj: object | string, msg?: string): void => {
      if (typeof obj === 'string') logger[level]({ ...fields }, obj);
      else logger[level]({ ...fields, ...obj }, msg);
    };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

export interface SecondarySyncHandle {
  /** One leadership term: sync and GC until `signal` aborts; never throws. */
  run(signal: AbortSignal): Promise<void>;
  /** Closes the secondary store client (after the last run ended). */
  close(): Promise<void>;
}

/**
 * The sync of `etcdbrctl server`, or undefined when `--secondary-backup-sync-enabled` is off (the CLI
 * resolves the secondary store only then). The secondary store is re-opened when its `SECONDARY_*`
 * credential files change, as the primary is.
 */
export function secondarySyncFromConfig(input: {
  config: ServerConfig;
  /** The resolved secondary store (`ctx.stores.secondary`). */
  secondary: StoreConfig | undefined;
  /** Resolves it again, re-reading credential files. */
  resolveSecondary: () => Promise<StoreConfig | undefined>;
  /** Names this sidecar's temp files in a Local secondary store (OpenOptions.tempOwner). */
  tempOwner?: string;
  env: CredentialEnv;
  /** The primary store, undefined when the server runs without one. */
  primary: (() => Promise<SnapStore>) | undefined;
  clock: Clock;
  logger: Logger;
  metrics: Metrics;
}): SecondarySyncHandle | undefined {
  const { config, secondary, primary, logger } = input;
  if (!config.secondarySnapstoreConfig.backupSyncEnabled || secondary === undefined) return undefined;
  if (primary === undefined) {
    logger.warn({}, '--secondary-backup-sync-enabled is set but there is no primary store (--storage-provider): nothing to sync');
    return undefined;
  }
  const store = new RotatingStore({
    resolve: input.resolveSecondary,
    env: input.env,
    envPrefix: STORE_ENV_PREFIX.secondary,
    logger,
    ...(input.tempOwner !== undefined ? { tempOwner: input.tempOwner } : {}),
  });
  const sc = config.snapshotterConfig;
  const sync = new SecondarySync(
    {
      periodMs: config.secondarySnapstoreConfig.syncPeriod,
      gc: {
        policy: sc.garbageCollectionPolicy,
        maxBackups: sc.maxBackups,
        deltaRetentionMs: sc.deltaSnapshotRetentionPeriod,
        periodMs: sc.garbageCollectionPeriod,
      },
    },
    {
      primary,
      secondary: () => store.get(),
      saveBufferBytes: saveBufferBytes(secondary),
      clock: input.clock,
      logger,
      metrics: input.metrics,
    },
  );
  return {
    // run() does not throw by design; a bug there must not take down the server's shutdown path.
    run: (signal) => sync.run(signal).catch((err: unknown) => logger.error({ err }, 'secondary backup sync stopped unexpectedly')),
    close: () => store.close(),
  };
}
