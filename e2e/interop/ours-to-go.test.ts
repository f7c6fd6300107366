/**
 * The Go etcd-backup-restore reads what we write (issue 27's interop requirement): our `snapshot` backs up a
 * live etcd under the mixed write load (a full snapshot, then deltas, in every compression both tools share);
 * our `compact` folds such a chain into one full snapshot without etcd. The Go `restore` restores each store,
 * and etcd started on its data dir serves exactly the source's keys, values, create and mod revisions and
 * versions at the last backed-up revision.
 *
 * Leases: the Go tool writes the keys a delta carries without their lease, so its restore of deltas is compared
 * with the source leases aside; ours keeps them (and reads the lease TTLs our deltas record, which the Go tool
 * reads past), so our restore of the same store equals the source, leases included. Our compact keeps them
 * too: the Go restore of our compacted full (no delta to replay) equals the source, leases included.
 */
import { rename } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { cleanupAfterEach } from '../../test/support/cleanups.js';
import { backupLive, type Compression } from './support/backup-live.js';
import {
  expectGoDropsOnlyLeases,
  localSnapshots,
  localStore,
  restoreWith,
  runOk,
  withoutLeases,
  type Cleanups,
  type StoredSnapshot,
} from './support/tools.js';

const after = cleanupAfterEach();
const cleanups: Cleanups = [];
// Its own hook: one pushed onto `after` would run once, after the first test, and never again (each run of
// `after` empties it), leaving every later test's etcds running. Registered after `after`'s, so it runs first.
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

describe('our snapshot → Go restore', () => {
  it.each<Compression>(['none', 'gzip', 'zlib', 'lzw'])('%s: full + deltas of a live etcd restore exactly', async (compression) => {
    const dir = await after.tempDir(`etcdbr-interop-ours-${compression}-`);
    const backup = await backupLive(
      // A small memory limit makes our snapshotter cut deltas by size too, not only by period.
      { tool: 'ours', compression, dir, extraFlags: ['--delta-snapshot-memory-limit=262144'] },
      cleanups,
    );
    const stored = await localSnapshots(backup.container);
    expect(stored.filter((s) => s.kind === 'Full')).toHaveLength(1);
    expect(stored.filter((s) => s.kind === 'Incr').length).toBeGreaterThanOrEqual(3);

    const go = await restoreWith('go', localStore(backup.container), dir, cleanups);
    expect(withoutLeases(go)).toEqual(withoutLeases(backup.source));
    const ours = await restoreWith('ours', localStore(backup.container), dir, cleanups);
    expect(ours).toEqual(backup.source);
    expectGoDropsOnlyLeases(go, ours);
  });
});

describe('our compact (offline, no etcd) → Go restore', () => {
  it('gzip chain compacted to one full (the sidecar clock 30 s ahead of the Job): the Go restore serves the source at the head', async () => {
    const dir = await after.tempDir('etcdbr-interop-ours-compact-');
    const backup = await backupLive({ tool: 'ours', compression: 'gzip', dir }, cleanups);
    // The last delta named by a sidecar whose clock is ahead of the compact Job's (or written in the second the
    // compaction runs, which the offline compaction is fast enough to share): the Go tool orders a full and a
    // delta at the same revision by creation second, so the compacted full must still be named after it.
    const last = (await localSnapshots(backup.container)).at(-1) as StoredSnapshot;
    expect(last.kind).toBe('Incr');
    const ahead = last.name.replace(/-(\d+)(\.gz)$/, (_m, t: string, ext: string) => `-${Math.floor(Date.now() / 1000) + 30}${ext}`);
    await rename(join(backup.container, 'v2', last.name), join(backup.container, 'v2', ahead));
    const r = await runOk(
      'ours',
      ['compact', ...localStore(backup.container), `--restoration-temp-snapshots-dir=${dir}/compact-tmp`, `--data-dir=${dir}/compact.etcd`],
      {},
      cleanups,
    );
    const compacted = /Compacted snapshot name : (\S+)/.exec(r.stdout)?.[1];
    expect(compacted, r.stdout).toMatch(new RegExp(`^Full-00000000-${String(backup.source.revision).padStart(8, '0')}-\\d+\\.gz$`));
    // The newest full is the compacted one, with no delta after it: the Go restore reads only it.
    const newest = (await localSnapshots(backup.container)).filter((s) => s.kind === 'Full').at(-1);
    expect(newest?.name).toBe(compacted);

    // Every key of our compacted full has its lease: the Go restore of it (the full alone) keeps them.
    const go = await restoreWith('go', localStore(backup.container), dir, cleanups);
    expect(go).toEqual(backup.source);
    const ours = await restoreWith('ours', localStore(backup.container), dir, cleanups);
    expect(go).toEqual(ours);
  });
});
