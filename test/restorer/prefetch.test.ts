/**
 * The restore downloads its deltas while etcd's restore tool writes the base (fetch.ts startFetching,
 * replay.ts prefetchDeltas): the downloads start before the base, a failure waits for the consumer, and a
 * restore whose base fails still ends them and leaves no file in the temp dir.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { readFileSync, writeFileSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { startFetching } from '../../src/restorer/fetch.js';
import { planRestore } from '../../src/restorer/plan.js';
import { BaseSnapshotError, executeRestore } from '../../src/restorer/restore.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { etcdBinaries } from '../support/etcd.js';
import { copyUpstreamStore } from '../support/fixtures.js';
import { openLocalStore } from '../support/local-store.js';
import { restoreOptions } from '../support/restore.js';
import { waitFor } from '../support/wait.js';
import { recordingLogger } from './support.js';

const cleanups = cleanupAfterEach();

/** Resolves when `open` is called: lets a test hold a generator at a step. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

describe('startFetching', () => {
  it('runs the first step before anyone asks, then hands out every item in order', async () => {
    const started: string[] = [];
    async function* source(): AsyncGenerator<number> {
      started.push('first step');
      yield 1;
      yield 2;
    }
    const fetch = startFetching(source());
    expect(started).toEqual(['first step']);
    const got: number[] = [];
    for await (const n of fetch) got.push(n);
    expect(got).toEqual([1, 2]);
  });

  it("keeps the first step's failure for the consumer (not an unhandled rejection)", async () => {
    async function* source(): AsyncGenerator<number> {
      await Promise.resolve();
      if (Date.now() > 0) throw new Error('download failed');
      yield 1;
    }
    const fetch = startFetching(source());
    // Let the failure happen before anyone asks: it must not surface on its own.
    await new Promise((r) => setImmediate(r));
    await expect(fetch.next()).rejects.toThrow('download failed');
  });

  it('close during the first step waits for it and runs the cleanup', async () => {
    const step = gate();
    const events: string[] = [];
    async function* source(): AsyncGenerator<number> {
      try {
        await step.wait;
        events.push('step done');
        yield 1;
        events.push('resumed');
      } finally {
        events.push('cleanup');
      }
    }
    const fetch = startFetching(source());
    const closed = fetch.close().then(() => events.push('closed'));
    step.open();
    await closed;
    expect(events).toEqual(['step done', 'cleanup', 'closed']);
  });
});

describe('a restore fetches its deltas during the base restore', () => {
  /** The v0.23 gzip store (a full and four deltas), with every fetch recorded by object name in `fetched`. */
  async function recordedStore(dir: string, breakFull = false): Promise<{ store: SnapStore; fetched: string[] }> {
    const { root, v2 } = copyUpstreamStore('gzip', dir);
    if (breakFull) {
      // One bit of the database flipped: etcd's restore tool refuses it on its sha256 trailer.
      const full = (await readdir(v2)).find((n) => n.startsWith('Full-'))!;
      const db = gunzipSync(readFileSync(join(v2, full)));
      db[5000] = db[5000]! ^ 1;
      writeFileSync(join(v2, full), gzipSync(db));
    }
    const inner = await openLocalStore(root, join(dir, 'store-tmp'));
    cleanups.push(() => inner.close());
    const fetched: string[] = [];
    const store = new Proxy(inner, {
      get(target, prop) {
        if (prop === 'fetch') {
          return (snap: { snapName: string }, ...rest: unknown[]) => {
            fetched.push(snap.snapName);
            return (target.fetch as (...a: unknown[]) => unknown).call(target, snap, ...rest);
          };
        }
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    return { store, fetched };
  }

  it('the first deltas are asked for before the base is restored, and the result is the whole chain', async () => {
    const dir = await cleanups.tempDir('etcdbr-prefetch-');
    const { store, fetched } = await recordedStore(dir);
    const plan = planRestore(await store.list());
    const logger = recordingLogger();
    let deltasAskedAtBase = -1;
    const result = await executeRestore(store, plan, {
      ...restoreOptions(await etcdBinaries(), dir, { maxFetchers: 2 }),
      logger: {
        ...logger,
        info: (obj: object | string, msg?: string) => {
          if (msg === 'base snapshot restored') deltasAskedAtBase = fetched.filter((n) => n.startsWith('Incr-')).length;
          logger.info(obj, msg);
        },
      },
    });
    expect(result.revision).toBe(plan.targetRevision);
    expect(result.deltasApplied).toBe(plan.deltas.length);
    // maxFetchers downloads were under way by the time etcd's restore tool had finished.
    expect(deltasAskedAtBase).toBeGreaterThanOrEqual(2);
    expect(await readdir(join(dir, 'restore-tmp')).catch(() => [])).toEqual([]);
  });

  it('while the full downloads, one delta at a time; all of them at once after', async () => {
    const dir = await cleanups.tempDir('etcdbr-prefetch-full-first-');
    const { root } = copyUpstreamStore('gzip', dir);
    const inner = await openLocalStore(root, join(dir, 'store-tmp'));
    cleanups.push(() => inner.close());
    const fullHeld = gate();
    let fullReleased = false;
    let deltasInFlight = 0;
    let mostBeforeFull = 0;
    let mostAfterFull = 0;
    let deltasStarted = 0;
    const store = new Proxy(inner, {
      get(target, prop) {
        if (prop === 'fetch') {
          return async (snap: { snapName: string }, ...rest: unknown[]) => {
            const full = snap.snapName.startsWith('Full-');
            if (full) await fullHeld.wait;
            else {
              deltasStarted++;
              deltasInFlight++;
              if (fullReleased) mostAfterFull = Math.max(mostAfterFull, deltasInFlight);
              else mostBeforeFull = Math.max(mostBeforeFull, deltasInFlight);
            }
            const stream = (await (target.fetch as (...a: unknown[]) => Promise<NodeJS.ReadableStream>).call(
              target,
              snap,
              ...rest,
            )) as Readable;
            if (!full) stream.once('close', () => deltasInFlight--);
            return stream;
          };
        }
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const plan = planRestore(await store.list());
    expect(plan.deltas.length).toBeGreaterThanOrEqual(4);
    const restoring = executeRestore(store, plan, restoreOptions(await etcdBinaries(), dir, { maxFetchers: 3 }));
    // The prefetch's first step holds two deltas (the second for the overlap check), then waits for the replay.
    await waitFor(() => deltasStarted >= 2 && deltasInFlight === 0, 'two deltas fetched while the full is held');
    expect(deltasStarted).toBe(2);
    expect(mostBeforeFull).toBe(1);
    fullReleased = true;
    fullHeld.open();
    const result = await restoring;
    expect(result.revision).toBe(plan.targetRevision);
    expect(result.deltasApplied).toBe(plan.deltas.length);
    expect(mostAfterFull).toBeGreaterThan(1);
  });

  it('a base that fails: its error, no data dir, and the downloads ended with no file left in the temp dir', async () => {
    const dir = await cleanups.tempDir('etcdbr-prefetch-broken-');
    const { store, fetched } = await recordedStore(dir, true);
    const plan = planRestore(await store.list());
    const opts = restoreOptions(await etcdBinaries(), dir, { maxFetchers: 3 });
    const err = await executeRestore(store, plan, opts).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BaseSnapshotError);
    expect((err as BaseSnapshotError).code).toBe('E_FAILED');
    expect(fetched.filter((n) => n.startsWith('Incr-')).length).toBeGreaterThanOrEqual(1);
    // The temp dir the restore created is gone with everything in it (the scratch dir, then its empty parent).
    expect(await readdir(dir)).toEqual(['store']);
  });
});
