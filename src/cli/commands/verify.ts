/**
 * `etcdbrctl verify` (ours, not upstream): scrubs the backups of a store without restoring them and says
 * whether the newest chain restores, and to which revision. Exit code 0: it restores; 3: a backup is broken
 * (the first broken object is named); 1: the command itself failed (store unreachable, bad flags).
 */
import { openSnapStore } from '@etcdbrctl/snapstore';
import type { VerifyCommandConfig } from '../../config/types.js';
import { planVerification } from '../../verifier/chains.js';
import { verifyBackups, type VerifyReport } from '../../verifier/verify.js';
import type { CommandContext } from '../../config/context.js';
import { reportFailure } from '../failure.js';

export const BROKEN_BACKUP_EXIT_CODE = 3;

function mib(bytes: number): string {
  return bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

export function formatReport(r: VerifyReport): string {
  const lines: string[] = [];
  for (const c of r.chains) {
    lines.push(
      `chain ${c.base}: ${c.ok ? 'OK' : 'BROKEN'}, restorable to revision ${c.restorableRevision}${c.restorableTime ? ` (taken ${c.restorableTime})` : ''}`,
    );
    for (const o of c.objects) {
      const what =
        o.kind === 'Full' ? `database at revision ${o.revision ?? '?'}` : `${o.events ?? 0} events up to revision ${o.revision ?? '?'}`;
      lines.push(`  ${o.ok ? 'ok    ' : 'BROKEN'} ${o.snapName}  ${mib(o.bytes)}  ${o.ok ? what : o.problem}`);
    }
    if (c.problem && c.objects.every((o) => o.ok)) lines.push(`  BROKEN ${c.problem}`);
  }
  if (r.orphanDeltas.length > 0)
    lines.push(`${r.orphanDeltas.length} delta snapshot(s) older than every full snapshot were not checked (no restore uses them)`);
  if (r.chains.length === 0) lines.push('no full snapshot in the store: nothing to restore');
  lines.push(
    r.restorable
      ? `restorable: the newest chain restores to revision ${r.chains.at(-1)!.restorableRevision} (${mib(r.bytes)} checked in ${(r.durationMs / 1000).toFixed(1)} s)`
      : r.firstBroken
        ? `NOT restorable as stored: ${r.firstBroken.snapName}: ${r.firstBroken.problem}`
        : 'NOT restorable: the store holds no full snapshot',
  );
  return lines.join('\n') + '\n';
}

export async function run(config: VerifyCommandConfig, ctx: CommandContext): Promise<number> {
  const storeConfig = ctx.stores.primary;
  if (storeConfig === undefined) {
    ctx.io.stderr.write('Error: no store to verify: give --storage-provider (Local, S3, ABS, GCS, Swift, OSS, ECS or OCS)\n');
    return 1;
  }
  let report: VerifyReport;
  try {
    const store = await openSnapStore(storeConfig, { readOnly: true });
    try {
      const plan = planVerification(await store.list(), { all: config.all });
      report = await verifyBackups(store, plan, {
        maxFetchers: config.maxFetchers,
        ...(ctx.signal ? { signal: ctx.signal } : {}),
        onObject: (o) => ctx.logger.debug({ snapshot: o.snapName, ok: o.ok, bytes: o.bytes, problem: o.problem }, 'checked'),
      });
    } finally {
      await store.close();
    }
  } catch (err) {
    return reportFailure(ctx.io, ctx.logger, 'etcdbrctl verify', err, { signal: ctx.signal });
  }
  ctx.io.stdout.write(config.output === 'json' ? JSON.stringify(report, null, 2) + '\n' : formatReport(report));
  return report.restorable && report.chains.every((c) => c.ok) ? 0 : BROKEN_BACKUP_EXIT_CODE;
}
