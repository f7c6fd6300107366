/**
 * The offline replay stops on the restore's signal (SIGINT, SIGTERM) at once: between deltas, and while it
 * copies the base backend's buckets, rejecting with the signal's reason and leaving the base backend as it was
 * (no half-written replacement beside it, no fetched delta left on disk).
 */
import { createHash } from 'node:crypto';
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { silentLogger, type SnapStore, type Snapshot } from '@etcdbrctl/snapstore';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fetchDeltasInOrder } from '../../src/restorer/fetch.js';
import { replayDeltasOffline } from '../../src/restorer/offline-replay.js';
import { baseSnapshot, writeSmallPutChain } from '../support/restore-chain.js';
import { startEtcdWithClient, type EtcdWithClient } from '../support/etcd.js';
import { openLocalStore } from '../support/local-store.js';

describe('offline replay and the restore signal', () => {
  let env: EtcdWithClient;
  let store: SnapStore;
  let dir: string;
  let base: Snapshot;
  let deltas: Snapshot[];

  beforeAll(async () => {
    env = await startEtcdWithClient('etcdbr-offline-signal-');
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-offline-signal-work-'));
    store = await openLocalStore(join(dir, 'store'), dir);
    // More keys than one copied batch (256), so the copy of the base's key bucket has a second batch.
    for (let i = 0; i < 600; i++) await env.client.put(`/base/${i}`).value('v');
    base = await baseSnapshot(env.client, store);
    await writeSmallPutChain(store, base, { revisions: 60, perDelta: 20, keySpace: 1000, valueBytes: 8, compression: undefined });
    deltas = (await store.list()).filter((s) => s.kind === 'Incr');
    expect(deltas).toHaveLength(3);
  }, 120_000);

  afterAll(async () => {
    await store?.close();
    await env?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** A copy of the base snapshot (an etcd backend) to replay into, and its sha256. */
  async function backend(name: string): Promise<{ db: string; sha: () => Promise<string> }> {
    const db = join(dir, name, 'db');
    await mkdir(dirname(db), { recursive: true });
    await copyFile(join(dir, 'store', base.prefix, base.snapName), db);
    return {
      db,
      sha: async () =>
        createHash('sha256')
          .update(await readFile(db))
          .digest('hex'),
    };
  }

  it('an abort after the first delta ends the replay before the next one, with the reason; the backend stays as it was', async () => {
    const { db, sha } = await backend('between');
    const before = await sha();
    const scratch = join(dir, 'between-tmp');
    await mkdir(scratch);
    const stop = new AbortController();
    const reason = new Error('received SIGTERM');
    const applied: string[] = [];
    const replay = replayDeltasOffline({
      dbPath: db,
      deltas: fetchDeltasInOrder(store, deltas, { maxFetchers: 2, tempDir: scratch }),
      targetRevision: deltas.at(-1)!.lastRevision,
      logger: silentLogger,
      signal: stop.signal,
      onDelta: (snap) => {
        applied.push(snap.snapName);
        stop.abort(reason);
      },
    });
    await expect(replay).rejects.toBe(reason);
    expect(applied).toEqual([deltas[0]!.snapName]);
    expect(await sha()).toBe(before);
    expect(await readdir(dirname(db))).toEqual([basename(db)]);
    expect(await readdir(scratch)).toEqual([]);
  });

  it('an abort while the base is copied ends the replay there; nothing is applied', async () => {
    const { db, sha } = await backend('copy');
    const before = await sha();
    const scratch = join(dir, 'copy-tmp');
    await mkdir(scratch);
    const reason = new Error('received SIGINT');
    const applied: string[] = [];
    const replay = replayDeltasOffline({
      dbPath: db,
      deltas: fetchDeltasInOrder(store, deltas, { maxFetchers: 2, tempDir: scratch }),
      targetRevision: deltas.at(-1)!.lastRevision,
      logger: silentLogger,
      signal: AbortSignal.abort(reason),
      onDelta: (snap) => applied.push(snap.snapName),
    });
    await expect(replay).rejects.toBe(reason);
    expect(applied).toEqual([]);
    expect(await sha()).toBe(before);
    expect(await readdir(dirname(db))).toEqual([basename(db)]);
  });
});
