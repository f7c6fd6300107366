/**
 * `etcdbrctl verify --against-endpoints=<urls>` (ours): the hash drill on demand. The newest chain's HashKV,
 * computed from the store, against each member's own at the newest revision both have
 * (src/verifier/hash-drill.ts). Exit code 0: equal for every member; 1: a difference (its first revisions and
 * the objects holding them are named), no comparison possible (the reason is named), or the command failed.
 */
import { openSnapStore, type StoreConfig } from '@etcdbrctl/snapstore';
import type { CommandContext } from '../../config/context.js';
import type { VerifyCommandConfig } from '../../config/types.js';
import { createEtcdClient, type EtcdClient } from '../../etcd/index.js';
import { runHashDrill, type HashDrillReport } from '../../verifier/hash-drill.js';
import { memberHashSource } from '../../verifier/member-source.js';
import { reportFailure } from '../failure.js';

const CONNECTION_TIMEOUT_MS = 30_000;

const hex = (n: number): string => `0x${n.toString(16).padStart(8, '0')}`;

export function formatDrillReport(r: HashDrillReport): string {
  const lines: string[] = [];
  if (r.base) lines.push(`chain ${r.base} and ${r.deltas} delta snapshot(s), up to revision ${r.storeRevision}`);
  for (const m of r.members) {
    lines.push(
      `  ${m.equal ? 'equal ' : 'DIFFER'} ${m.endpoint}  HashKV at revision ${r.revision} (compact revision ${m.compactRevision}): ` +
        `etcd ${hex(m.etcdHash)}, store ${hex(m.storeHash)}`,
    );
  }
  if (r.outcome === 'match') {
    lines.push(`proven: the store gives back what etcd holds at revision ${r.revision} (${(r.durationMs / 1000).toFixed(1)} s)`);
  } else if (r.outcome === 'mismatch') {
    lines.push(`MISMATCH: ${r.difference?.message ?? 'the hashes differ'}`);
  } else {
    lines.push(`NOT COMPARED: ${r.reason ?? 'nothing to compare'}`);
  }
  return lines.join('\n') + '\n';
}

export async function runDrill(config: VerifyCommandConfig, storeConfig: StoreConfig, ctx: CommandContext): Promise<number> {
  const clients: EtcdClient[] = [];
  let report: HashDrillReport;
  try {
    for (const endpoint of config.againstEndpoints) {
      clients.push(
        await createEtcdClient({
          endpoints: [endpoint],
          ...(config.againstUsername ? { username: config.againstUsername, password: config.againstPassword } : {}),
          ...(config.againstCaFile ? { caFile: config.againstCaFile } : {}),
          ...(config.againstCertFile ? { certFile: config.againstCertFile } : {}),
          ...(config.againstKeyFile ? { keyFile: config.againstKeyFile } : {}),
          insecureTransport: true,
          insecureSkipVerify: config.againstInsecureSkipVerify,
          connectionTimeoutMs: CONNECTION_TIMEOUT_MS,
        }),
      );
    }
    const store = await openSnapStore(storeConfig, { readOnly: true });
    try {
      report = await runHashDrill(
        store,
        config.againstEndpoints.map((e, i) => memberHashSource(e, clients[i]!)),
        {
          tempDir: config.snapstoreConfig.tempDir,
          maxFetchers: config.maxFetchers,
          ...(ctx.signal ? { signal: ctx.signal } : {}),
          onStep: (range) =>
            ctx.logger.info({ after: range.lo, upTo: range.hi }, 'hash drill: narrowing down where the store differs from etcd'),
        },
      );
    } finally {
      await store.close();
    }
  } catch (err) {
    return reportFailure(ctx.io, ctx.logger, 'etcdbrctl verify --against-endpoints', err, { signal: ctx.signal });
  } finally {
    for (const c of clients) c.close();
  }
  ctx.io.stdout.write(config.output === 'json' ? JSON.stringify(report, null, 2) + '\n' : formatDrillReport(report));
  if (report.outcome === 'match') return 0;
  ctx.io.stderr.write(
    report.outcome === 'mismatch'
      ? `Error: ${report.difference?.message ?? 'the store differs from etcd'}\n`
      : `Error: cannot compare the store with etcd: ${report.reason ?? 'nothing to compare'}\n`,
  );
  return 1;
}
