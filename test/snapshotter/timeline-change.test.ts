/**
 * A snapshotter whose etcd is replaced under its watch (restored to an older revision, or another cluster)
 * does not continue the old chain: it drops what it buffered and starts a new chain with a full snapshot.
 * Real etcd processes on one fixed client port, the running snapshotter's client and watch untouched.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterEach, describe, expect, it } from 'vitest';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { startLocalEtcd, type LocalEtcd } from '../../src/etcd/local-etcd.js';
import { freePort } from '../../src/etcd/ports.js';
import { Metrics } from '../../src/metrics.js';
import { etcdBinaries } from '../support/etcd.js';
import { openLocalStore } from '../support/local-store.js';
import { createTestSnapshotter } from '../support/snapshotter.js';
import { waitFor } from '../support/wait.js';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function etcdOn(dir: string, name: string, clientPort: number): Promise<LocalEtcd> {
  const etcd = await startLocalEtcd({ binaries: await etcdBinaries(), dataDir: join(dir, name), clientPort, peerPort: await freePort() });
  cleanups.push(() => etcd.stop());
  return etcd;
}

describe('snapshotter: etcd leaves the backed-up history under the watch', () => {
  it('a replaced etcd with a lower revision: no delta of the old buffer, a full snapshot of the new etcd', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-timeline-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const clientPort = await freePort();
    const first = await etcdOn(dir, 'first', clientPort);
    const client = new Etcd3({ hosts: first.clientUrl });
    cleanups.push(async () => client.close());
    for (let i = 0; i < 30; i++) await client.put(`/old/${i}`).value(`v${i}`);
    const store: SnapStore = await openLocalStore(join(dir, 'store'), dir);
    cleanups.push(() => store.close());

    // Deltas only on demand (period 1h), so the events below stay buffered.
    const metrics = new Metrics({ defaultMetrics: false });
    const snapshotter = await createTestSnapshotter({ client, store, metrics }, { deltaSnapshotPeriodMs: 3_600_000 });
    const run = new AbortController();
    const running = snapshotter.run(run.signal, true);
    cleanups.push(async () => {
      run.abort();
      await running.catch(() => undefined);
    });
    const fullOfFirst = await waitFor(async () => (await store.list()).find((s) => s.kind === 'Full'), 'first full');
    await client.put('/old/buffered').value('never backed up');
    // The watch after the full has the write in its buffer once a delta is marked as required.
    await waitFor(
      async () => ((await metrics.registry.metrics()).includes('etcdbr_snapshot_required{kind="Incr"} 1') ? true : undefined),
      'the write buffered',
    );

    // The same endpoint now answers with another etcd: fresh data dir, revision 1 plus a few writes.
    await first.stop();
    const second = await etcdOn(dir, 'second', clientPort);
    const direct = new Etcd3({ hosts: second.clientUrl });
    cleanups.push(async () => direct.close());
    await direct.put('/new/a').value('1');
    await direct.put('/new/b').value('2');
    const secondRevision = Number((await direct.get('/new/a').exec()).header.revision);
    expect(secondRevision).toBeLessThan(fullOfFirst.lastRevision);

    const newFull = await waitFor(
      async () => (await store.list()).find((s) => s.kind === 'Full' && s.snapName !== fullOfFirst.snapName),
      'a full snapshot of the new etcd',
    );
    expect(newFull.lastRevision).toBeLessThan(fullOfFirst.lastRevision);
    // Nothing of the old buffer was stored as a delta on top of the old chain.
    expect((await store.list()).filter((s) => s.kind === 'Incr')).toEqual([]);
    // The chain goes on from the new etcd: the deltas after the new full reach its current revision.
    await direct.put('/new/c').value('3');
    const target = Number((await direct.get('/new/c').exec()).header.revision);
    await waitFor(async () => {
      await snapshotter.triggerDeltaSnapshot().catch(() => undefined);
      const deltas = (await store.list()).filter((x) => x.kind === 'Incr');
      return deltas.some((d) => d.lastRevision === target) ? true : undefined;
    }, `deltas up to revision ${target}`);
    const deltas = (await store.list()).filter((x) => x.kind === 'Incr').sort((a, b) => a.startRevision - b.startRevision);
    expect(deltas[0]?.startRevision).toBe(newFull.lastRevision + 1);
    expect(deltas.at(-1)?.lastRevision).toBe(target);
  }, 90_000);
});
