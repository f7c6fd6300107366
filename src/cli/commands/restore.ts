import { etcdBinaryLookup } from '../../config/pod-environment.js';
import { openSnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import type { RestoreCommandConfig } from '../../config/types.js';
import { findEtcdBinaries } from '../../etcd/index.js';
import { nothingToRestore, olderChain, planRestore, type RestorePlan, type RestoreTarget } from '../../restorer/plan.js';
import { storeLocation } from '../../config/store.js';
import { BaseSnapshotError, executeRestore, restoreSettings } from '../../restorer/restore.js';
import type { CommandContext } from '../../config/context.js';
import { reportFailure } from '../failure.js';
import { replayCallTimeout } from '../deadlines.js';

/**
 * `etcdbrctl restore`: the newest full snapshot plus the deltas after it into `--data-dir` (which must not
 * exist or be empty). With `--dry-run`, only prints the plan. `--to-revision`/`--to-time` restore to a
 * point in time (ours).
 */
export async function run(config: RestoreCommandConfig, ctx: CommandContext): Promise<number> {
  const storeConfig = ctx.stores.primary;
  if (!storeConfig) {
    ctx.io.stderr.write(
      'Error: no store to restore from: give --storage-provider (Local, S3, ABS, GCS, Swift, OSS, ECS or OCS) and --store-container\n',
    );
    return 1;
  }
  const store = await openSnapStore(storeConfig, { readOnly: true });
  let listing: Snapshot[] = [];
  try {
    const target: RestoreTarget = {};
    if (config.toRevision > 0) target.revision = config.toRevision;
    if (config.toTime !== '') target.time = new Date(config.toTime);
    if (config.baseSnapshot !== '') target.baseName = config.baseSnapshot;
    listing = await store.list();
    const plan = planRestore(listing, target);
    // Nothing to restore is an error for this command (a script would otherwise start an empty etcd); the
    // initialization path instead starts a new member (upstream's "No base snapshot found. Will do nothing.").
    if (!plan.base) throw nothingToRestore(listing, storeLocation(storeConfig));
    if (config.dryRun) {
      ctx.io.stdout.write(config.output === 'json' ? `${JSON.stringify(planJson(plan), null, 2)}\n` : planText(plan));
      return 0;
    }
    const rc = config.restorationConfig;
    const binaries = await findEtcdBinaries(etcdBinaryLookup(ctx.pod));
    const callTimeout = replayCallTimeout(ctx.env);
    if (callTimeout.problem !== undefined) ctx.logger.warn(callTimeout.problem);
    const result = await executeRestore(store, plan, {
      ...restoreSettings(rc),
      binaries,
      dataDir: rc.dataDir,
      tempDir: rc.tempDir,
      logger: ctx.logger,
      signal: ctx.signal,
      callTimeoutMs: callTimeout.ms,
    });
    ctx.logger.info(
      { dataDir: rc.dataDir, revision: result.revision, deltas: result.deltasApplied, ms: result.durationMs },
      'Successfully restored the etcd data directory',
    );
    return 0;
  } catch (err) {
    return reportFailure(ctx.io, ctx.logger, 'etcdbrctl restore', withWayAround(err, listing), {
      signal: ctx.signal,
      interruptedNote: 'the data dir was left as it was',
    });
  } finally {
    await store.close();
  }
}

/**
 * A base full snapshot that cannot be restored: the error also names the older chain that goes around it, the
 * revision its names reach, and the flag that restores it.
 */
function withWayAround(err: unknown, listing: readonly Snapshot[]): unknown {
  if (!(err instanceof BaseSnapshotError)) return err;
  const older = olderChain(listing, err.snapshot);
  if (older === undefined) return err;
  const message =
    `${err.message}; without it, the older chain from ${older.base.snapName} reaches revision ${older.lastRevision} ` +
    `(${older.deltas} delta snapshots, by their names): restore it with --base-snapshot=${older.base.snapName} ` +
    '(etcdbrctl verify checks it first)';
  return new BaseSnapshotError(err.code, err.snapshot, message, { cause: err });
}

function planJson(plan: RestorePlan) {
  const entry = (s: NonNullable<RestorePlan['base']>) => ({
    kind: s.kind,
    name: s.snapName,
    key: [s.prefix.replace(/\/$/, ''), s.snapDir, s.snapName].filter(Boolean).join('/'),
    startRevision: s.startRevision,
    lastRevision: s.lastRevision,
    createdOn: s.createdOn.toISOString(),
    sizeBytes: s.sizeBytes ?? null,
  });
  return {
    base: plan.base ? entry(plan.base) : null,
    deltas: plan.deltas.map(entry),
    targetRevision: plan.targetRevision,
    fetchBytes: plan.fetchBytes,
  };
}

function planText(plan: RestorePlan): string {
  if (!plan.base) return '';
  const rows = [plan.base, ...plan.deltas].map(
    (s) =>
      `${s.kind.padEnd(5)} ${String(s.startRevision).padStart(10)} ${String(s.lastRevision).padStart(10)}  ${s.createdOn.toISOString()}  ${String(s.sizeBytes ?? '-').padStart(10)}  ${s.snapName}`,
  );
  return [
    `KIND       START       LAST  CREATED                         SIZE  NAME`,
    ...rows,
    `restores to revision ${plan.targetRevision}: 1 full + ${plan.deltas.length} delta snapshots, ${plan.fetchBytes} bytes to fetch`,
    '',
  ].join('\n');
}
