/**
 * Our sidecar (`etcdbrctl server`) as etcd-druid drives it, read by the Go restore: the initial full snapshot,
 * deltas cut on demand (`/snapshot/delta`) under the mixed write load, and a final full snapshot
 * (`/snapshot/full?final=true`, as before a scale-down) right after the last delta, at the same revision.
 * The Go `restore` restores the store exactly.
 */
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestEtcd } from '../../test/support/etcd.js';
import { dumpEtcd } from '../../test/support/etcd-dump.js';
import { cleanupAfterEach } from '../../test/support/cleanups.js';
import { waitFor } from '../../test/support/wait.js';
import { startSidecar } from '../support/sidecar.js';
import { localSnapshots, localStore, restoreWith, withoutLeases, type Cleanups } from './support/tools.js';
import { mixedWrites } from './support/write-load.js';

const after = cleanupAfterEach();
const cleanups: Cleanups = [];
// Its own hook: one pushed onto `after` would run once, after the first test, and never again (each run of
// `after` empties it), leaving every later test's etcds running. Registered after `after`'s, so it runs first.
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

interface SnapshotJson {
  kind: string;
  lastRevision: number;
  snapName: string;
}

async function snapshotRoute(url: string): Promise<SnapshotJson> {
  const r = await fetch(url);
  expect(r.status, await r.clone().text()).toBe(200);
  return (await r.json()) as SnapshotJson;
}

describe('our server → Go restore', () => {
  it('initial full, on-demand deltas and a final full at the last delta’s revision restore exactly', async () => {
    const dir = await after.tempDir('etcdbr-interop-server-');
    const etcd = await startTestEtcd();
    cleanups.push(() => etcd.cleanup());
    const client = new Etcd3({ hosts: etcd.clientUrl });
    cleanups.push(async () => client.close());
    const container = join(dir, 'store');
    await mixedWrites(client, 0);
    const sidecar = await startSidecar([
      `--endpoints=${etcd.clientUrl}`,
      ...localStore(container),
      `--snapstore-temp-directory=${dir}`,
      '--schedule=0 0 1 1 *',
      // Deltas only on demand, so each one below ends exactly at the revision written before it.
      '--delta-snapshot-period=1h',
      '--garbage-collection-period=1h',
      '--compress-snapshots=true',
      '--compression-policy=gzip',
    ]);
    cleanups.push(() => sidecar.stop('SIGKILL'));
    await waitFor(async () => (await localSnapshots(container)).some((s) => s.kind === 'Full'), 'the initial full snapshot');

    let revision = 0;
    for (let round = 1; round <= 3; round++) {
      revision = await mixedWrites(client, round);
      expect((await snapshotRoute(`${sidecar.url}/snapshot/delta`)).lastRevision).toBe(revision);
    }
    const final = await snapshotRoute(`${sidecar.url}/snapshot/full?final=true`);
    expect(final).toMatchObject({ kind: 'Full', lastRevision: revision });
    expect(final.snapName).toMatch(/\.gz\.final$/);
    expect(await sidecar.stop('SIGTERM')).toBe(0);
    const source = await dumpEtcd(etcd.clientUrl);
    expect(source.revision).toBe(revision);

    const go = await restoreWith('go', localStore(container), dir, cleanups);
    expect(withoutLeases(go)).toEqual(withoutLeases(source));
    const ours = await restoreWith('ours', localStore(container), dir, cleanups);
    expect(go).toEqual(ours);
  });
});
