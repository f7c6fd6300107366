/**
 * The offline replay's oracle is the online replay: for every chain, both give the same database — the same
 * `etcdctl endpoint hashkv` (hash and compact revision), the same keys with their revisions and versions at
 * the latest and at sampled historical revisions — and etcd starts on the offline result and accepts writes.
 * Chains: the Go-written stores, and chains written by our snapshotter from a real etcd under a workload of
 * deletes, re-creates, multi-op transactions, range deletes, leases, values over several pages and a source
 * compaction before the base, plus a point-in-time restore into the middle of a delta.
 */
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SnapStore } from '@etcdbrctl/snapstore';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { planRestore, type RestoreTarget } from '../../src/restorer/plan.js';
import { executeRestore, type DeltaReplayMode } from '../../src/restorer/restore.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcd35Binaries, etcdBinaries, startTestEtcd, type TestEtcd } from '../support/etcd.js';
import { UPSTREAM_V023, UPSTREAM_V043 } from '../support/fixtures.js';
import { openLocalStore } from '../support/local-store.js';
import { restoreOptions } from '../support/restore.js';
import { createTestSnapshotter } from '../support/snapshotter.js';
import { waitFor } from '../support/wait.js';
import type { Snapshotter } from '../../src/snapshotter/snapshotter.js';
import { readDeltaEvents } from '../support/deltas.js';
import { client, copyFullAs, dump, writeDelta, type Dump } from './support.js';

const execFileAsync = promisify(execFile);

interface Observed {
  revision: number;
  hashKv: { hash: number; compactRevision: number };
  latest: Dump;
  /** A dump per sampled revision, or the error etcd gave (a compacted revision). */
  history: Array<Dump | { error: string }>;
  /** The revision a put lands on after the restore. */
  nextPutRevision: number;
}

async function hashKv(binaries: EtcdBinaries, endpoint: string): Promise<{ hash: number; compactRevision: number }> {
  const { stdout } = await execFileAsync(binaries.etcdctl!, [`--endpoints=${endpoint}`, 'endpoint', 'hashkv', '-w', 'json'], {
    env: { ...process.env, ETCDCTL_API: '3' },
  });
  const [first] = JSON.parse(stdout) as Array<{ HashKV: { hash: number; compact_revision?: number } }>;
  return { hash: first!.HashKV.hash, compactRevision: first!.HashKV.compact_revision ?? 0 };
}

/** Restores the plan with `mode` and looks at the result through a real etcd. */
async function restoreAndObserve(
  binaries: EtcdBinaries,
  store: SnapStore,
  mode: DeltaReplayMode,
  dir: string,
  target: RestoreTarget,
  sampled: (revision: number) => number[],
): Promise<Observed> {
  const d = join(dir, mode);
  const result = await executeRestore(store, planRestore(await store.list(), target), restoreOptions(binaries, d, { deltaReplay: mode }));
  expect(result.restored).toBe(true);
  const etcd = await startLocalEtcd({ binaries, dataDir: join(d, 'data'), name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
  const c = client(etcd.clientUrl);
  try {
    const latest = await dump(c);
    const history: Observed['history'] = [];
    for (const rev of sampled(latest.revision)) {
      history.push(await dump(c, rev).catch((err: unknown) => ({ error: (err as Error).message })));
    }
    const hash = await hashKv(binaries, etcd.clientUrl);
    const put = await c.put('/oracle/after-restore').value('x').exec();
    return { revision: result.revision, hashKv: hash, latest, history, nextPutRevision: Number(put.header.revision) };
  } finally {
    c.close();
    await etcd.stop();
    await rm(d, { recursive: true, force: true });
  }
}

async function expectSameDatabase(
  store: SnapStore,
  target: RestoreTarget = {},
  sampled: (rev: number) => number[] = () => [],
  binaries?: EtcdBinaries,
): Promise<Observed> {
  binaries ??= await etcdBinaries();
  const dir = await mkdtemp(join(tmpdir(), 'etcdbr-oracle-'));
  try {
    const offline = await restoreAndObserve(binaries, store, 'offline', dir, target, sampled);
    const online = await restoreAndObserve(binaries, store, 'online', dir, target, sampled);
    expect(offline.revision).toBe(online.revision);
    expect(offline.hashKv).toEqual(online.hashKv);
    expect(offline.latest).toEqual(online.latest);
    expect(offline.history).toEqual(online.history);
    expect(offline.nextPutRevision).toBe(offline.revision + 1);
    expect(online.nextPutRevision).toBe(online.revision + 1);
    return offline;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('offline replay = online replay', () => {
  const compatCases = readdirSync(UPSTREAM_V023, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name);

  it.each(compatCases)(
    'Go-written store %s',
    async (name) => {
      const dir = await mkdtemp(join(tmpdir(), 'etcdbr-oracle-compat-'));
      const store = await openLocalStore(join(UPSTREAM_V023, name, 'snapstore'), dir);
      try {
        // Historical reads from the base's revision on (the chain's history is kept by both).
        await expectSameDatabase(store, {}, (rev) => [rev - 40, rev - 20, rev - 3]);
      } finally {
        await store.close();
        await rm(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );

  // etcd 3.5 restores the base with etcdutl, which also writes the new membership into the backend's
  // `members` bucket: the offline replay must carry that over exactly as the online replay's etcd keeps it.
  it.each(['gzip', 'final-gzip'])(
    'on etcd 3.5: Go-written store %s',
    async (name) => {
      const dir = await mkdtemp(join(tmpdir(), 'etcdbr-oracle-compat35-'));
      const store = await openLocalStore(join(UPSTREAM_V023, name, 'snapstore'), dir);
      try {
        await expectSameDatabase(store, {}, (rev) => [rev - 20, rev - 3], await etcd35Binaries());
      } finally {
        await store.close();
        await rm(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );

  // What etcd-druid v0.37 runs: chains the Go tool v0.43 wrote beside etcd 3.5, in every codec, a final full,
  // a compacted chain and two start-up fulls at one revision (zlib).
  it.each(
    readdirSync(UPSTREAM_V043, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name),
  )(
    'on etcd 3.5: v0.43-written store %s',
    async (name) => {
      const dir = await mkdtemp(join(tmpdir(), 'etcdbr-oracle-compat043-'));
      const store = await openLocalStore(join(UPSTREAM_V043, name, 'snapstore'), dir);
      try {
        await expectSameDatabase(store, {}, (rev) => [rev - 400, rev - 20, rev - 3], await etcd35Binaries());
      } finally {
        await store.close();
        await rm(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );

  it('a chain whose base is an empty etcd (revision 1, no keys)', async () => {
    const src = await startTestEtcd();
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-oracle-empty-'));
    const store = await openLocalStore(join(dir, 'store'), dir);
    const c = client(src.clientUrl);
    try {
      const snapshotter = await createTestSnapshotter({ client: c, store }, { deltaSnapshotPeriodMs: 3_600_000 });
      const run = new AbortController();
      const running = snapshotter.run(run.signal, true);
      expect(await waitForFull(store)).toBe(1);
      for (let i = 0; i < 5; i++) await c.put(`/first/${i}`).value(`v${i}`);
      await deltaThrough(snapshotter, 6);
      run.abort();
      await running;
      const seen = await expectSameDatabase(store, {}, () => [1, 3]);
      expect(seen.revision).toBe(6);
    } finally {
      c.close();
      await store.close();
      await src.cleanup();
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);

  describe('chains written by our snapshotter from a real etcd', () => {
    let src: TestEtcd;
    let dir: string;
    let store: SnapStore;
    let fullRevision = 0;
    let lastRevision = 0;
    const midDelta: number[] = [];

    beforeAll(async () => {
      src = await startTestEtcd();
      dir = await mkdtemp(join(tmpdir(), 'etcdbr-oracle-chain-'));
      store = await openLocalStore(join(dir, 'store'), dir);
      const c = client(src.clientUrl);
      try {
        // Before the base: history, then a compaction of the source, so the base carries compaction marks.
        for (let i = 0; i < 40; i++) await c.put(`/pre/${i % 10}`).value(`v${i}`);
        const compactAt = Number((await c.get('/pre/0').exec()).header.revision) - 5;
        await c.maintenance.status();
        await (c as unknown as { kv: { compact(r: { revision: string; physical: boolean }): Promise<unknown> } }).kv.compact({
          revision: String(compactAt),
          physical: true,
        });
        const snapshotter = await createTestSnapshotter({ client: c, store }, { deltaSnapshotPeriodMs: 3_600_000 });
        const run = new AbortController();
        const running = snapshotter.run(run.signal, true);
        const full = await waitForFull(store);
        fullRevision = full;
        const lease = c.lease(600, { autoKeepAlive: false });
        await lease.grant();
        let rev = 0;
        for (let round = 0; round < 4; round++) {
          for (let i = 0; i < 25; i++) rev = Number((await c.put(`/k/${round}/${i}`).value(`r${round}-${i}`).exec()).header.revision);
          for (let i = 0; i < 10; i++) await c.put(`/k/${round}/${i}`).value(`again-${round}-${i}`);
          await c.delete().key(`/k/${round}/3`).exec();
          await c.put(`/k/${round}/3`).value('re-created');
          // A multi-op transaction: several puts and a delete in one revision.
          await c
            .if(`/k/${round}/0`, 'Version', '>', 0)
            .then(c.put(`/txn/${round}/a`).value('a'), c.put(`/txn/${round}/b`).value('b'), c.delete().key(`/k/${round}/4`))
            .commit();
          // A range delete: one revision, several tombstones.
          await c.delete().prefix(`/k/${round}/1`).exec();
          await c.put(`/big/${round}`).value(Buffer.alloc(20_000 + round * 5000, 0x41 + round));
          await lease.put(`/leased/${round}`).value('with a lease');
          await c.put(`/pre/${round}`).value(`updated-${round}`);
          rev = Number((await c.put(`/k/${round}/end`).value('end').exec()).header.revision);
          midDelta.push(rev - 6);
          await deltaThrough(snapshotter, rev);
        }
        lastRevision = rev;
        await lease.revoke();
        lastRevision = Number((await c.put('/k/final').value('final').exec()).header.revision);
        await deltaThrough(snapshotter, lastRevision);
        run.abort();
        await running;
      } finally {
        c.close();
      }
    }, 180_000);

    afterAll(async () => {
      await store?.close();
      await src?.cleanup();
      await rm(dir, { recursive: true, force: true });
    });

    it('the whole chain: same hashkv, same keys now and at sampled past revisions', async () => {
      const seen = await expectSameDatabase(store, {}, () => [fullRevision, fullRevision + 1, ...midDelta, lastRevision - 1]);
      expect(seen.revision).toBe(lastRevision);
      expect(seen.latest.kvs.length).toBeGreaterThan(50);
    }, 180_000);

    it('a transaction cut across two deltas (as the Go snapshotter cuts at its memory limit) is replayed as one revision by both paths', async () => {
      const splitDir = await mkdtemp(join(tmpdir(), 'etcdbr-oracle-split-'));
      const split = await openLocalStore(join(splitDir, 'store'), splitDir);
      try {
        const list = await store.list();
        const full = list.find((x) => x.kind === 'Full')!;
        await copyFullAs(store, full, split, full.lastRevision);
        let cut = 0;
        for (const d of list.filter((x) => x.kind === 'Incr')) {
          const events = await readDeltaEvents(store, d);
          const counts = new Map<number, number>();
          for (const e of events) counts.set(e.modRevision, (counts.get(e.modRevision) ?? 0) + 1);
          const txnRevision = [...counts].find(([, n]) => n >= 3)?.[0];
          if (txnRevision === undefined || cut > 0) {
            await writeDelta(split, events, d.startRevision, d.createdOn);
            continue;
          }
          // The first event of the transaction ends one delta; the rest start the next one, which is named
          // from the revision after (Incr-<prev last + 1>-…), exactly as the Go snapshotter names it.
          const at = events.findIndex((e) => e.modRevision === txnRevision) + 1;
          await writeDelta(split, events.slice(0, at), d.startRevision, d.createdOn);
          await writeDelta(split, events.slice(at), txnRevision + 1, new Date(d.createdOn.getTime() + 1000));
          cut = txnRevision;
        }
        expect(cut).toBeGreaterThan(0);
        const whole = await expectSameDatabase(store, {}, () => [cut - 1, cut, cut + 1]);
        const joined = await expectSameDatabase(split, {}, () => [cut - 1, cut, cut + 1]);
        expect(joined.revision).toBe(lastRevision);
        expect(joined.hashKv).toEqual(whole.hashKv);
        expect(joined.latest).toEqual(whole.latest);
        expect(joined.history).toEqual(whole.history);
      } finally {
        await split.close();
        await rm(splitDir, { recursive: true, force: true });
      }
    }, 240_000);

    it('on etcd 3.5: the whole chain and a point in time in the middle of a delta', async () => {
      const binaries = await etcd35Binaries();
      const seen = await expectSameDatabase(store, {}, () => [fullRevision, ...midDelta, lastRevision - 1], binaries);
      expect(seen.revision).toBe(lastRevision);
      const target = midDelta[1]!;
      const pitr = await expectSameDatabase(store, { revision: target }, () => [fullRevision, target - 1], binaries);
      expect(pitr.revision).toBe(target);
    }, 240_000);

    it('point in time: --to-revision in the middle of a delta', async () => {
      const target = midDelta[2]!;
      const seen = await expectSameDatabase(store, { revision: target }, () => [fullRevision, target - 1]);
      expect(seen.revision).toBe(target);
    }, 180_000);
  });
});

/** Takes delta snapshots until one reaches `revision` (a trigger saves only what the watch delivered yet). */
async function deltaThrough(snapshotter: Snapshotter, revision: number): Promise<void> {
  await waitFor(
    async () => ((await snapshotter.triggerDeltaSnapshot())?.lastRevision === revision ? true : undefined),
    `a delta through revision ${revision}`,
  );
}

async function waitForFull(store: SnapStore): Promise<number> {
  return waitFor(async () => (await store.list()).find((s) => s.kind === 'Full')?.lastRevision, 'a full snapshot');
}
