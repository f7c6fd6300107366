import { describe, expect, it } from 'vitest';
import type { EtcdClient } from '../../src/etcd/index.js';
import { WatchProgress } from '../../src/snapshotter/watch-progress.js';

/** Only the one call WatchProgress makes; etcd's answer is given by the test. */
function etcdAt(revision: number | Error): EtcdClient {
  return {
    currentRevision: () => (revision instanceof Error ? Promise.reject(revision) : Promise.resolve(revision)),
  } as unknown as EtcdClient;
}

describe('WatchProgress.catchUp', () => {
  it("returns at once when the watch already delivered etcd's revision", async () => {
    const p = new WatchProgress();
    p.reset(10);
    p.reached(12);
    expect(await p.catchUp(etcdAt(12), 60_000)).toEqual({ reached: true, target: 12, watched: 12 });
  });

  it('waits for the watch to reach the revision etcd had at the call', async () => {
    const p = new WatchProgress();
    p.reset(10);
    const waiting = p.catchUp(etcdAt(15), 60_000);
    await Promise.resolve();
    p.reached(13);
    p.reached(15);
    expect(await waiting).toEqual({ reached: true, target: 15, watched: 15 });
  });

  it("two catch-ups at once each get their answer: one ending does not drop the other's wait", async () => {
    const p = new WatchProgress();
    p.reset(10);
    const short = p.catchUp(etcdAt(12), 5);
    const long = p.catchUp(etcdAt(12), 60_000);
    expect(await short).toMatchObject({ reached: false });
    p.reached(12);
    expect(await long).toEqual({ reached: true, target: 12, watched: 12 });
  });

  it('gives up at its bound and says how far the watch got', async () => {
    const p = new WatchProgress();
    p.reset(10);
    p.reached(11);
    expect(await p.catchUp(etcdAt(20), 5)).toEqual({ reached: false, target: 20, watched: 11 });
  });

  it('gives up when etcd does not say its revision, with no target', async () => {
    const p = new WatchProgress();
    p.reset(10);
    expect(await p.catchUp(etcdAt(new Error('unavailable')), 60_000)).toEqual({ reached: false, target: undefined, watched: 10 });
  });
});
