import { etcdBinaryLookup } from '../../config/pod-environment.js';
import { openSnapStore } from '@etcdbrctl/snapstore';
import type { RestoreCommandConfig } from '../../config/types.js';
import { findEtcdBinaries } from '../../etcd/binaries.js';
import { planRestore, type RestorePlan, type RestoreTarget } from '../../restorer/plan.js';
import { executeRestore, restoreSettings } from '../../restorer/restore.js';
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
  try {
    const target: RestoreTarget = {};
    if (config.toRevision > 0) target.revision = config.toRevision;
    if (config.toTime !== '') target.time = new Date(config.toTime);
    const plan = planRestore(await store.list(), target);
    if (config.dryRun) {
      ctx.io.stdout.write(config.output === 'json' ? `${JSON.stringify(planJson(plan), null, 2)}\n` : planText(plan));
      return 0;
    }
    if (!plan.base) {
      ctx.logger.info({}, 'No base snapshot found. Will do nothing.');
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
    return reportFailure(ctx.io, ctx.logger, 'etcdbrctl restore', err, {
      signal: ctx.signal,
      interruptedNote: 'the data dir was left as it was',
    });
  } finally {
    await store.close();
  }
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
  if (!plan.base) return 'No full snapshot in the store: nothing to restore.\n';
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
