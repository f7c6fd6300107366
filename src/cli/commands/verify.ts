/**
 * `etcdbrctl verify` (ours, not upstream): scrubs the backups of a store without restoring them and says
 * whether the newest chain restores, and to which revision. Exit code 0: it restores; 3: a backup is broken
 * (the first broken object is named); 1: the command itself failed (store unreachable, bad flags), or
 * encrypted objects could not be checked for want of an identity (and nothing was found broken).
 */
import { openSnapStore } from '@etcdbrctl/snapstore';
import type { VerifyCommandConfig } from '../../config/types.js';
import { planVerification } from '../../verifier/chains.js';
import { verifyBackups, verifyWayAround, type ObjectVerdict, type VerifyReport } from '../../verifier/verify.js';
import type { CommandContext } from '../../config/context.js';
import { reportFailure } from '../failure.js';

export const BROKEN_BACKUP_EXIT_CODE = 3;

function mib(bytes: number): string {
  return bytes < 1024 * 1024 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** An object's size column: nothing read (an object that could not be opened or decrypted) is not "0.0 KiB". */
function sizeOf(o: ObjectVerdict): string {
  return !o.ok && o.bytes === 0 ? 'unread' : mib(o.bytes);
}

function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/** A problem shown beside its object's name, without that name again (errors from below often carry it). */
function problemBesideName(problem: string | undefined, snapName: string): string {
  return (problem ?? 'failed').replaceAll(` ${snapName}`, '').replaceAll(`${snapName}: `, '').replaceAll(snapName, 'it');
}

export function formatReport(r: VerifyReport): string {
  const lines: string[] = [];
  for (const c of r.chains) {
    const state = c.ok ? 'OK' : c.unverifiable ? 'NOT CHECKED' : 'BROKEN';
    lines.push(
      `chain ${c.base}: ${state}, restorable to revision ${c.restorableRevision}${c.restorableTime ? ` (taken ${c.restorableTime})` : ''}`,
    );
    for (const o of c.objects) {
      const what =
        o.kind === 'Full'
          ? `database at revision ${o.revision ?? '?'}`
          : `${count(o.events ?? 0, 'event')} up to revision ${o.revision ?? '?'}`;
      lines.push(
        `  ${o.ok ? 'ok    ' : o.unverifiable ? '?     ' : 'BROKEN'} ${o.snapName}  ${sizeOf(o)}  ${o.ok ? what : problemBesideName(o.problem, o.snapName)}`,
      );
    }
    if (c.problem && c.objects.every((o) => o.ok)) lines.push(`  BROKEN ${c.problem}`);
  }
  if (r.orphanDeltas.length > 0)
    lines.push(`${r.orphanDeltas.length} delta snapshot(s) older than every full snapshot were not checked (no restore uses them)`);
  if (r.chains.length === 0) lines.push('no full snapshot in the store: nothing to restore');
  const around = r.wayAround;
  if (around) {
    lines.push(
      around.ok
        ? `without the broken full, the older chain from ${around.base} restores to revision ${around.restorableRevision}: etcdbrctl restore --base-snapshot=${around.base}`
        : `the older chain from ${around.base} is no way around it: ${around.problem ?? 'not checked'}`,
    );
  }
  lines.push(
    r.restorable
      ? `restorable: the newest chain restores to revision ${r.chains.at(-1)!.restorableRevision} (${mib(r.bytes)} checked in ${(r.durationMs / 1000).toFixed(1)} s)`
      : r.firstBroken
        ? `NOT restorable as stored: ${r.firstBroken.problem.includes(r.firstBroken.snapName) ? r.firstBroken.problem : `${r.firstBroken.snapName}: ${r.firstBroken.problem}`}`
        : r.firstUnverifiable
          ? `NOT CHECKED: ${r.firstUnverifiable.snapName} and the encrypted objects after it need an identity (--encryption-identity-file)`
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
  if (config.againstEndpoints.length > 0) return (await import('./verify-drill.js')).runDrill(config, storeConfig, ctx);
  let report: VerifyReport;
  try {
    const store = await openSnapStore(storeConfig, { readOnly: true });
    try {
      const listing = await store.list();
      const plan = planVerification(listing, { all: config.all });
      const options = {
        maxFetchers: config.maxFetchers,
        ...(ctx.signal ? { signal: ctx.signal } : {}),
        onObject: (o: ObjectVerdict) => ctx.logger.debug({ snapshot: o.snapName, ok: o.ok, bytes: o.bytes, problem: o.problem }, 'checked'),
      };
      report = await verifyBackups(store, plan, options);
      // A broken newest full: is there a way around it? (What the operator needs next.)
      await verifyWayAround(store, listing, report, options);
    } finally {
      await store.close();
    }
  } catch (err) {
    return reportFailure(ctx.io, ctx.logger, 'etcdbrctl verify', err, { signal: ctx.signal });
  }
  ctx.io.stdout.write(config.output === 'json' ? JSON.stringify(report, null, 2) + '\n' : formatReport(report));
  return verifyExitCode(report, ctx.io.stderr);
}

/**
 * 3 when a backup is broken (or there is none); 1 when nothing was found broken but encrypted objects could
 * not be checked (no identity opens them: a command problem, not a verdict on the backups); 0 when all restores.
 */
function verifyExitCode(report: VerifyReport, stderr: CommandContext['io']['stderr']): number {
  if (report.firstBroken) return BROKEN_BACKUP_EXIT_CODE;
  if (report.firstUnverifiable) {
    stderr.write(`Error: ${report.firstUnverifiable.problem}\n`);
    return 1;
  }
  return report.restorable && report.chains.every((c) => c.ok) ? 0 : BROKEN_BACKUP_EXIT_CODE;
}
