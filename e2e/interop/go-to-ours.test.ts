/**
 * We read what the Go etcd-backup-restore writes, live: the Go `snapshot` command backs up a real etcd under
 * the mixed write load (a full snapshot, then deltas cut from its own watch, in each of its codecs), and the Go
 * `compact` folds such a chain into one full snapshot. Our `restore` restores each store and etcd started on
 * the result serves exactly the source's keys, values, create and mod revisions, versions and leases (ours
 * keeps the lease of a key a delta carries, with --restored-lease-ttl as its TTL: a Go delta records none); the
 * Go tool's own restore of the same store gives the same but those leases. (The vendored fixtures under
 * test/fixtures/upstream-v0.23 cover the same formats frozen; these chains are written here and now.)
 *
 * A chain compacted into one full by the Go `compact` is compared with the source leases aside: it holds the
 * keys a delta carried without their lease. Ours keeps them (with --restored-lease-ttl as their TTL), so the Go
 * restore of our compacted full serves the source, leases included.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { cleanupAfterEach } from '../../test/support/cleanups.js';
import { waitFor } from '../../test/support/wait.js';
import { backupLive, type Compression } from './support/backup-live.js';
import { expectGoDropsOnlyLeases, localSnapshots, localStore, restoreWith, runOk, withoutLeases, type Cleanups } from './support/tools.js';

const after = cleanupAfterEach();
const cleanups: Cleanups = [];
// Its own hook: one pushed onto `after` would run once, after the first test, and never again (each run of
// `after` empties it), leaving every later test's etcds running. Registered after `after`'s, so it runs first.
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

describe('Go snapshot → our restore', () => {
  it.each<Compression>(['none', 'gzip', 'zlib', 'lzw'])('%s: full + deltas of a live etcd restore exactly', async (compression) => {
    const dir = await after.tempDir(`etcdbr-interop-go-${compression}-`);
    const backup = await backupLive({ tool: 'go', compression, dir }, cleanups);
    const stored = await localSnapshots(backup.container);
    expect(stored.filter((s) => s.kind === 'Full')).toHaveLength(1);
    expect(stored.filter((s) => s.kind === 'Incr').length).toBeGreaterThanOrEqual(3);

    const ours = await restoreWith('ours', localStore(backup.container), dir, cleanups);
    expect(ours).toEqual(backup.source);
    // The offline replay (our default) and the online one (upstream's way, through etcd) agree with the Go tool.
    const online = await restoreWith('ours', localStore(backup.container), dir, cleanups, {
      extra: ['--delta-replay=online'],
      tag: 'online',
    });
    expect(online).toEqual(ours);
    const go = await restoreWith('go', localStore(backup.container), dir, cleanups);
    expectGoDropsOnlyLeases(go, ours);
  });
});

describe('compact of a chain the Go tool wrote, restored by the other tool', () => {
  it('Go compact → our restore: the source at the head', async () => {
    const dir = await after.tempDir('etcdbr-interop-go-compact-');
    const backup = await backupLive({ tool: 'go', compression: 'gzip', dir }, cleanups);
    const before = new Set(backup.names);
    // The Go compact names its full with the current second. In the last delta's second, the Go restore below
    // may order that delta after the full and fail on it (upstream's tie, docs/design-decisions.md "Same-second
    // ties at one revision"; our compact names its full a second later), so the Go compact starts after it.
    const lastSecond = Math.max(...backup.names.map((n) => Number(/-(\d+)(\.[a-zA-Z]+)?(\.final)?$/.exec(n)?.[1] ?? 0)));
    await waitFor(() => Date.now() / 1000 >= lastSecond + 1, "the clock to leave the last snapshot's second", 5_000, 20);
    await runOk(
      'go',
      [
        'compact',
        ...localStore(backup.container),
        `--data-dir=${dir}/compact.etcd`,
        `--restoration-temp-snapshots-dir=${dir}/compact-tmp`,
        `--snapstore-temp-directory=${dir}`,
      ],
      {},
      cleanups,
    );
    const added = (await localSnapshots(backup.container)).filter((s) => !before.has(s.name));
    expect(added.map((s) => [s.kind, s.start, s.last])).toEqual([['Full', 0, backup.source.revision]]);

    const ours = await restoreWith('ours', localStore(backup.container), dir, cleanups);
    expect(withoutLeases(ours)).toEqual(withoutLeases(backup.source));
    const go = await restoreWith('go', localStore(backup.container), dir, cleanups);
    expect(ours).toEqual(go);
  });

  it.each([
    ['offline', []],
    ['through etcd', ['--delta-replay=online']],
  ])('our compact (%s) → Go restore: the source at the head', async (_way, extra) => {
    const dir = await after.tempDir('etcdbr-interop-go-ourcompact-');
    const backup = await backupLive({ tool: 'go', compression: 'gzip', dir }, cleanups);
    await runOk(
      'ours',
      [
        'compact',
        ...localStore(backup.container),
        `--restoration-temp-snapshots-dir=${dir}/compact-tmp`,
        `--data-dir=${dir}/compact.etcd`,
        ...extra,
      ],
      {},
      cleanups,
    );
    // Our compacted full has every key with its lease: the Go restore of it (the full alone) keeps them.
    const go = await restoreWith('go', localStore(backup.container), dir, cleanups);
    expect(go).toEqual(backup.source);
    const ours = await restoreWith('ours', localStore(backup.container), dir, cleanups);
    expect(go).toEqual(ours);
  });
});
