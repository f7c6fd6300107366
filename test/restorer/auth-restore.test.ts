/**
 * Acceptance 37: a base snapshot with etcd auth enabled restores (deltas replayed through a local etcd
 * that runs with auth switched off), and auth is enabled again in the result.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SnapStore } from '@etcdbrctl/snapstore';
import { checkConsistency } from '../../src/bbolt/check.js';
import { readAuthEnabled } from '../../src/backend/auth-flag.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { planRestore } from '../../src/restorer/plan.js';
import { backendPath, executeRestore } from '../../src/restorer/restore.js';
import { reenableAuth } from '../../src/restorer/replay-etcd.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcdBinaries, startTestEtcd, type TestEtcd } from '../support/etcd.js';
import { openLocalStore } from '../support/local-store.js';
import { restoreOptions } from '../support/restore.js';
import { createTestSnapshotter } from '../support/snapshotter.js';
import { client, dump, type Dump } from './support.js';
import { waitFor } from '../support/wait.js';

const ROOT = { username: 'root', password: 'r00t-pw' };

/** Starts etcd on `dataDir` and checks auth from the outside: anonymous refused, root served. */
async function expectAuthEnforced(binaries: EtcdBinaries, dataDir: string): Promise<Dump> {
  const etcd = await startLocalEtcd({ binaries, dataDir, extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
  const anon = client(etcd.clientUrl);
  const root = client(etcd.clientUrl, ROOT);
  try {
    await expect(anon.get('/a/0').string()).rejects.toThrow(/user name is empty/);
    await expect(anon.put('/intruder').value('x').exec()).rejects.toThrow(/user name is empty/);
    return await dump(root);
  } finally {
    anon.close();
    root.close();
    await etcd.stop();
  }
}

describe('restore of a store whose base snapshot has auth enabled (case 37)', () => {
  let binaries: EtcdBinaries;
  let src: TestEtcd;
  let c: Etcd3;
  let dir: string;
  let store: SnapStore;
  let expected: Dump;
  let fullOnly: SnapStore;
  let expectedFullOnly: Dump;

  beforeAll(async () => {
    binaries = await etcdBinaries();
    dir = await mkdtemp(join(tmpdir(), 'etcdbr-restore-auth-'));
    src = await startTestEtcd();
    const setup = client(src.clientUrl);
    await setup.user(ROOT.username).create(ROOT.password);
    await setup.user(ROOT.username).addRole('root');
    await setup.role('reader').create();
    await setup.user('alice').create('alice-pw');
    await setup.user('alice').addRole('reader');
    for (let i = 0; i < 20; i++) await setup.put(`/a/${i}`).value(`v${i}`);
    await setup.auth.authEnable({});
    setup.close();
    c = client(src.clientUrl, ROOT);
    store = await openLocalStore(join(dir, 'store'), dir);
    fullOnly = await openLocalStore(join(dir, 'full-only'), dir);

    const snapshotter = await createTestSnapshotter(
      { client: c, store },
      { deltaSnapshotPeriodMs: 3_600_000, finalDeltaTimeoutMs: 10_000 },
    );
    const stop = new AbortController();
    const running = snapshotter.run(stop.signal, true);
    const cut = async () => {
      const target = Number((await c.get('foo').exec()).header.revision);
      // Each trigger writes what the watch has delivered so far; again until the delta reaches the target.
      await waitFor(
        async () => (await snapshotter.triggerDeltaSnapshot(), (snapshotter.chain.prevSnapshot?.lastRevision ?? 0) >= target),
        `a delta through revision ${target}`,
      );
    };
    try {
      await waitFor(() => snapshotter.chain.prevFull, 'the full snapshot');
      // The full-only store: the same base, no deltas.
      await fullOnly.save(snapshotter.chain.prevFull!, await store.fetch((await store.list())[0]!));
      expectedFullOnly = await dump(c);
      for (let i = 0; i < 30; i++) await c.put(`/a/${i % 25}`).value(`w${i}`);
      await cut();
      await c.delete().prefix('/a/1');
      await c.put('/b/new').value('');
      await cut();
      expected = await dump(c);
    } finally {
      stop.abort();
      await running;
    }
    expect(planRestore(await store.list()).deltas.length).toBeGreaterThanOrEqual(2);
  }, 120_000);

  afterAll(async () => {
    c?.close();
    await store?.close();
    await fullOnly?.close();
    await src?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it.each([
    ['online', true],
    ['offline', false],
  ] as const)(
    'replays the deltas (%s) and leaves auth enabled, with the same users and data',
    async (mode, authSwitched) => {
      const d = join(dir, `with-deltas-${mode}`);
      const result = await executeRestore(store, planRestore(await store.list()), restoreOptions(binaries, d, { deltaReplay: mode }));
      // Online, auth is switched off for the replay etcd and back on; offline, no etcd runs and it is never touched.
      expect(result).toMatchObject({ restored: true, authDisabledForReplay: authSwitched, revision: expected.revision });
      expect(result.deltasApplied).toBeGreaterThanOrEqual(2);
      const db = backendPath(join(d, 'data'));
      expect(await readAuthEnabled(db)).toBe(true);
      expect((await checkConsistency(db)).problems).toEqual([]);
      expect(await expectAuthEnforced(binaries, join(d, 'data'))).toEqual(expected);

      // Other users survive with their passwords and roles (alice has no permissions: denied, not unknown).
      const etcd = await startLocalEtcd({ binaries, dataDir: join(d, 'data'), extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
      const alice = client(etcd.clientUrl, { username: 'alice', password: 'alice-pw' });
      try {
        await expect(alice.get('/a/0').string()).rejects.toThrow(/permission denied/);
      } finally {
        alice.close();
        await etcd.stop();
      }
    },
    120_000,
  );

  it('restores a base snapshot without deltas with auth untouched', async () => {
    const d = join(dir, 'full-only-restore');
    const result = await executeRestore(fullOnly, planRestore(await fullOnly.list()), restoreOptions(binaries, d));
    expect(result).toMatchObject({ restored: true, deltasApplied: 0, authDisabledForReplay: false });
    expect(await expectAuthEnforced(binaries, join(d, 'data'))).toEqual(expectedFullOnly);
  }, 60_000);

  it('with keepEtcdRunning hands over an etcd without auth; reenableAuth switches it back on', async () => {
    const d = join(dir, 'kept');
    const opts = restoreOptions(binaries, d, { keepEtcdRunning: true });
    const result = await executeRestore(store, planRestore(await store.list()), opts);
    expect(result.authDisabledForReplay).toBe(true);
    const etcd = result.etcd!;
    try {
      const anon = client(etcd.clientUrl);
      expect(await dump(anon)).toEqual(expected);
      anon.close();
    } finally {
      await etcd.stop();
    }
    await reenableAuth(etcd.dataDir);
    expect(await expectAuthEnforced(binaries, etcd.dataDir)).toEqual(expected);
  }, 120_000);
});
