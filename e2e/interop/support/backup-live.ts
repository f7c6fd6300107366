/**
 * A live backup by either tool: a real etcd under the mixed write load (write-load.ts), `etcdbrctl snapshot`
 * of our tool or the Go one (same flags) into a Local store, a full snapshot first, then a delta for each
 * further round of writes; stopped with SIGTERM once the store holds the last revision. The source etcd's
 * dump at that revision is what every restore of the store must give.
 */
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { expect } from 'vitest';
import { startTestEtcd } from '../../../test/support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../../../test/support/etcd-dump.js';
import { waitFor } from '../../../test/support/wait.js';
import { localSnapshots, localStore, parseSnapshotName, startGo, startOurs, type Cleanups, type Running, type Tool } from './tools.js';
import { mixedWrites } from './write-load.js';

export type Compression = 'none' | 'gzip' | 'zlib' | 'lzw';

export interface LiveBackup {
  /** The Local store's container. */
  container: string;
  /** The source etcd's state at the last backed-up revision. */
  source: EtcdDump;
  /** The backup's stored objects (names), oldest first. */
  names: string[];
}

export interface LiveBackupOptions {
  tool: Tool;
  compression: Compression;
  /** Scratch dir of the test; the store is `<dir>/store`. */
  dir: string;
  /** Rounds of writes after the full snapshot, each waited into the store before the next (default 3). */
  deltaRounds?: number;
  /** Extra `snapshot` flags (e.g. a small --delta-snapshot-memory-limit). */
  extraFlags?: string[];
  /** Writes per round (default the load's own). */
  load?: { keys?: number; bigValues?: number };
}

/**
 * Said explicitly both ways: the Go v0.23 binary defaults to uncompressed, ours (as upstream since v0.40)
 * to gzip.
 */
export function compressionFlags(c: Compression): string[] {
  return c === 'none' ? ['--compress-snapshots=false'] : ['--compress-snapshots=true', `--compression-policy=${c}`];
}

/** The name suffix each codec's objects carry. */
export const COMPRESSION_SUFFIX: Readonly<Record<Compression, string>> = { none: '', gzip: '.gz', zlib: '.zlib', lzw: '.Z' };

/**
 * The newest revision the tool reports as stored: ours through the store (a Local object appears only
 * complete, by rename), the Go tool through its "Successfully saved … snapshot at" log lines (its Local
 * store writes straight to the final name, so a listed object may still be growing).
 */
async function storedUpTo(tool: Tool, container: string, running: Running): Promise<number> {
  if (tool === 'ours') return Math.max(0, ...(await localSnapshots(container)).map((s) => s.last));
  let last = 0;
  for (const m of running.output().matchAll(/Successfully saved (?:full|delta) snapshot at: ([^"\s]+)/g)) {
    const s = parseSnapshotName((m[1] as string).split('/').at(-1) ?? '');
    if (s) last = Math.max(last, s.last);
  }
  return last;
}

export async function backupLive(opts: LiveBackupOptions, cleanups: Cleanups): Promise<LiveBackup> {
  const etcd = await startTestEtcd();
  cleanups.push(() => etcd.cleanup());
  const client = new Etcd3({ hosts: etcd.clientUrl });
  cleanups.push(async () => client.close());
  const container = join(opts.dir, 'store');

  let revision = await mixedWrites(client, 0, opts.load);
  const args = [
    'snapshot',
    `--endpoints=${etcd.clientUrl}`,
    ...localStore(container),
    `--snapstore-temp-directory=${opts.dir}`,
    '--schedule=0 0 1 1 *',
    '--delta-snapshot-period=1s',
    '--garbage-collection-period=1h',
    ...compressionFlags(opts.compression),
    ...(opts.extraFlags ?? []),
  ];
  const running = opts.tool === 'ours' ? startOurs(args, {}, cleanups) : startGo(args, {}, cleanups);
  const waitStored = (rev: number, what: string) =>
    waitFor(
      async () => {
        if (running.child.exitCode !== null) throw new Error(`${opts.tool} snapshot exited early:\n${running.output()}`);
        return (await storedUpTo(opts.tool, container, running)) >= rev;
      },
      `${opts.tool} snapshot to store ${what} (revision ${rev})`,
      90_000,
      100,
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}\n${running.output().slice(-4000)}`);
    });
  await waitStored(revision, 'the full snapshot');
  for (let round = 1; round <= (opts.deltaRounds ?? 3); round++) {
    revision = await mixedWrites(client, round, opts.load);
    await waitStored(revision, `a delta of round ${round}`);
  }
  running.child.kill('SIGTERM');
  const exit = await running.exited;
  // The Go `snapshot` command ends on SIGTERM with exit code 0 as ours does; a crash would show here.
  expect(exit.code, running.output().slice(-4000)).toBe(0);

  const source = await dumpEtcd(etcd.clientUrl);
  expect(source.revision).toBe(revision);
  const stored = await localSnapshots(container);
  expect(stored.at(-1)?.last).toBe(revision);
  for (const s of stored) expect(s.name.replace(/^(Full|Incr)-\d+-\d+-\d+/, '')).toBe(COMPRESSION_SUFFIX[opts.compression]);
  return { container, source, names: stored.map((s) => s.name) };
}
