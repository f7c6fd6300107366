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

/**
 * Cuts deltas on demand until one ends at `revision`, and returns that one. A delta cut on demand holds the
 * events the watch has delivered when the request comes (upstream's TakeDeltaSnapshot alike): on etcd 3.5,
 * or a loaded machine, the last write's event may still be on its way, so the first delta may end a revision
 * short (the next one then carries the rest) or there may be nothing new yet (`null`).
 */
async function deltaUpTo(sidecarUrl: string, revision: number): Promise<SnapshotJson> {
  return waitFor(async () => {
    const r = await fetch(`${sidecarUrl}/snapshot/delta`);
    if (r.status !== 200) throw new Error(`/snapshot/delta: ${r.status} ${await r.text()}`);
    const snap = (await r.json()) as SnapshotJson | null;
    return snap !== null && snap.lastRevision >= revision ? snap : undefined;
  }, `a delta up to revision ${revision}`);
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
      // Deltas only on demand, so the last one of each round below ends exactly at the revision written before it.
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
      expect((await deltaUpTo(sidecar.url, revision)).lastRevision).toBe(revision);
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
