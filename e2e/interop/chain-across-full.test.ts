/**
 * Since issue 38 our snapshotter's deltas go on across a full snapshot: the first delta after a full starts
 * where the delta before the full ended, at or below the full's revision, so the revisions written while the
 * full was being taken are in a delta too. The Go restore must read such a chain: it sorts the delta after the
 * full (by last revision) and applies only its events newer than the full (applyFirstDeltaSnapshot). Our
 * restore reaches every revision, those between the last delta before the full and the full included.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { compareSnapshots } from '@etcdbrctl/snapstore';
import { FakeClock } from '../../src/clock.js';
import { dumpEtcd } from '../../test/support/etcd-dump.js';
import { startEtcdWithClient } from '../../test/support/etcd.js';
import { gatedStore } from '../../test/support/gated-store.js';
import { openLocalStore } from '../../test/support/local-store.js';
import { createTestSnapshotter } from '../../test/support/snapshotter.js';
import { waitFor } from '../../test/support/wait.js';
import { localStore, restoreWith, withoutLeases, type Cleanups } from './support/tools.js';

const cleanups: Cleanups = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

describe('a chain whose deltas go on across a full snapshot', () => {
  it('the Go restore serves the head; ours serves the head and a revision written while the full was taken', async () => {
    const env = await startEtcdWithClient('etcdbr-interop-across-full-');
    cleanups.push(() => env.cleanup());
    const { client } = env;
    const container = join(env.dir, 'store');
    const real = await openLocalStore(container, env.dir);
    cleanups.push(() => real.close());
    const gated = gatedStore(real);
    const clock = new FakeClock(Date.now());
    const s = await createTestSnapshotter({ client, store: gated.store, clock }, { deltaSnapshotPeriodMs: 1000 });
    const stop = new AbortController();
    const running = s.run(stop.signal, true);
    cleanups.push(async () => (stop.abort(), await running.catch(() => undefined)));
    await waitFor(async () => (await real.list()).some((x) => x.kind === 'Full'), 'the first full snapshot');
    const rev = async () => Number((await client.get('x').exec()).header.revision);

    for (let i = 0; i < 20; i++) await client.put(`before/${i}`).value(`v${i}`);
    const beforeFull = await rev();
    await waitFor(() => s.bufferedRevision === beforeFull || undefined, 'the writes in the delta buffer');
    // The delta the full stores first waits while writes land between it and the full's revision.
    const { reached, release } = gated.holdNext('Incr');
    const newer = s.triggerFullSnapshot(false);
    await reached;
    for (let i = 0; i < 10; i++) await client.put(`while/${i}`).value(`w${i}`);
    await client.delete().key('before/3');
    const insideWindow = await rev();
    release();
    const newerFull = await newer;
    expect(newerFull.lastRevision).toBeGreaterThanOrEqual(insideWindow);
    for (let i = 0; i < 10; i++) await client.put(`after/${i}`).value(`a${i}`);
    await client.put('before/5').value('changed');
    const head = await rev();
    await waitFor(async () => {
      await clock.advanceAsync(1000);
      return (await real.list()).some((x) => x.kind === 'Incr' && x.lastRevision === head);
    }, 'a delta through the head');
    stop.abort();
    await running;
    const deltas = (await real.list()).filter((x) => x.kind === 'Incr').sort(compareSnapshots);
    expect(deltas.at(-1)!.startRevision, 'the last delta starts below the newer full').toBeLessThanOrEqual(newerFull.lastRevision);

    const source = await dumpEtcd(env.etcd.clientUrl);
    expect(source.revision).toBe(head);
    const go = await restoreWith('go', localStore(container), env.dir, cleanups);
    expect(withoutLeases(go)).toEqual(withoutLeases(source));
    const ours = await restoreWith('ours', localStore(container), env.dir, cleanups);
    expect(ours).toEqual(go);
    // A point in time the newer full's name is past: only the older full and the deltas across it reach it.
    const mid = insideWindow - 1;
    const pit = await restoreWith('ours', localStore(container), env.dir, cleanups, { tag: 'pit', extra: [`--to-revision=${mid}`] });
    expect(pit.revision).toBe(mid);
    const keys = pit.kvs.map((kv) => Buffer.from(kv.key, 'base64').toString());
    expect(keys).toContain('while/9');
    expect(keys, 'the delete at the next revision is not applied').toContain('before/3');
  });
});
