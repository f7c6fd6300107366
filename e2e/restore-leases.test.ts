/**
 * A restore keeps leases, and gives back the source byte for byte as `etcdctl endpoint hashkv` sees it (issue 40):
 * a real etcd under a workload of puts, overwrites, deletes, a range delete, a multi-op transaction, leased keys
 * (a lease from before the full snapshot, leases granted after it with TTLs of 8 s and 1 h, a lease revoked, a
 * lease that expires) and a compaction before the full, backed up by our sidecar (`etcdbrctl server`, which
 * records each new lease's TTL in its deltas). Restored by the CLI, offline and online, at the head and at a
 * revision in the middle (`--to-revision`): the restored member's `hashkv --rev R` equals the source's, the
 * leases the restored keys name exist with the source's TTLs (the revoked and expired ones do not), and once
 * the 8 s lease's time is over its keys are gone in the restored member as in the source. The same chain
 * compacted by `etcdbrctl compact`, offline and through etcd (`--delta-replay=online`), restores to the source
 * compacted at the head: the same `hashkv`, and the same leases (`etcdctl lease list`, `timetolive`). On a
 * Go-written chain, whose deltas record no TTL, `compact --restored-lease-ttl` gives the deltas' lease its TTL.
 */
import { execFile } from 'node:child_process';
import { cp, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Etcd3 } from 'etcd3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SnapStore } from '@etcdbrctl/snapstore';
import type { EtcdBinaries } from '../src/etcd/binaries.js';
import { startLocalEtcd, type LocalEtcd } from '../src/etcd/local-etcd.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcdBinaries, startEtcdWithClient, type EtcdWithClient } from '../test/support/etcd.js';
import { etcdClient } from '../test/support/etcd-client.js';
import { dumpEtcd, type EtcdDump } from '../test/support/etcd-dump.js';
import { copyUpstreamStore, UPSTREAM_V023 } from '../test/support/fixtures.js';
import { openLocalStore } from '../test/support/local-store.js';
import { runCli } from './support/cli-process.js';
import { restoreFlags } from './support/restore-dump.js';
import { localStoreFlags, startSidecar, waitFor, type SidecarProcess } from './support/sidecar.js';

const execFileAsync = promisify(execFile);

async function hashKv(binaries: EtcdBinaries, endpoint: string, revision: number): Promise<{ hash: number; compactRevision: number }> {
  const { stdout } = await execFileAsync(
    binaries.etcdctl!,
    [`--endpoints=${endpoint}`, 'endpoint', 'hashkv', `--rev=${revision}`, '-w', 'json'],
    { env: { ...process.env, ETCDCTL_API: '3' } },
  );
  const [first] = JSON.parse(stdout) as Array<{ HashKV: { hash: number; compact_revision?: number } }>;
  return { hash: first!.HashKV.hash, compactRevision: first!.HashKV.compact_revision ?? 0 };
}

/** `etcdctl lease list`: the lease IDs as it prints them (hex), sorted. */
async function leaseList(binaries: EtcdBinaries, endpoint: string): Promise<string[]> {
  const { stdout } = await execFileAsync(binaries.etcdctl!, [`--endpoints=${endpoint}`, 'lease', 'list'], {
    env: { ...process.env, ETCDCTL_API: '3' },
  });
  // "found N leases" and then one ID a line.
  const [found, ...ids] = stdout.trim().split('\n');
  expect(found).toBe(`found ${ids.length} leases`);
  return ids.sort();
}

/** A lease ID (decimal int64) as etcdctl prints it (`%016x`): its 64 bits in hex, zero-padded to 16 digits. */
const hexId = (id: string): string => BigInt.asUintN(64, BigInt(id)).toString(16).padStart(16, '0');

/** The number of keys under `prefix`. */
async function countUnder(client: Etcd3, prefix: string): Promise<number> {
  return Number((await client.getAll().prefix(prefix).count()) ?? 0);
}

interface LeasedHistory {
  /** The start-up full snapshot's revision. */
  fullRevision: number;
  /** A revision after the full where the 2 s lease's keys are there. */
  middle: number;
  /** The last revision written (the 8 s lease's keys). */
  head: number;
  ids: { baseLeaseId: string; hourId: string; revokedId: string; expiringId: string; shortId: string };
}

describe('a restore keeps leases and is byte-identical by hashkv (etcd 3.5, our sidecar)', () => {
  let env: EtcdWithClient;
  let client: Etcd3;
  let dir: string;
  let store: SnapStore;
  let sidecar: SidecarProcess | undefined;
  const cleanups: Array<() => Promise<unknown>> = [];

  beforeEach(async () => {
    env = await startEtcdWithClient('etcdbr-e2e-restore-leases-');
    ({ client, dir } = env);
    store = await openLocalStore(join(dir, 'store'), dir);
  });

  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    await sidecar?.stop('SIGKILL');
    sidecar = undefined;
    await store.close();
    await env.cleanup();
  });

  const revision = async () => Number((await client.get('/none').exec()).header.revision);

  /** Asks the sidecar for deltas until the store's last one reaches `target` (an on-demand delta may end short of it). */
  async function deltaUpTo(s: SidecarProcess, target: number): Promise<void> {
    await waitFor(async () => {
      const r = await fetch(`${s.url}/snapshot/delta`);
      const last = r.status === 200 ? ((await r.json()) as { lastRevision?: number }).lastRevision : undefined;
      const listed = (await store.list()).filter((x) => x.kind === 'Incr').at(-1)?.lastRevision ?? 0;
      return Math.max(last ?? 0, listed) >= target ? true : undefined;
    }, `a delta up to revision ${target}`);
  }

  /**
   * `etcdbrctl restore` with `extra` flags into `<dir>/<name>` from `container` (default: the sidecar's store),
   * then etcd started on it (stopped by the test's cleanup).
   */
  async function restored(name: string, extra: string[], container = join(dir, 'store')): Promise<LocalEtcd> {
    const dataDir = join(dir, name);
    const flags = ['--storage-provider=Local', `--store-container=${container}`, ...restoreFlags(join(dir, `${name}-scratch`), dataDir)];
    const r = await runCli(['restore', ...flags, ...extra], {}, cleanups);
    expect(r.code, r.stderr).toBe(0);
    const etcd = await startLocalEtcd({
      binaries: await etcdBinaries(),
      dataDir,
      name: 'default',
      extraArgs: [...SINGLE_MEMBER_RAFT_ARGS],
    });
    cleanups.push(() => etcd.stop());
    return etcd;
  }

  /** The source etcd stopped and started again on its data dir and ports (stopped by the test's cleanup). */
  async function restartedSource(binaries: EtcdBinaries): Promise<LocalEtcd> {
    const { dataDir, name, clientUrl, peerUrl } = env.etcd;
    await env.etcd.stop();
    const again = await startLocalEtcd({
      binaries,
      dataDir,
      name,
      clientPort: Number(new URL(clientUrl).port),
      peerPort: Number(new URL(peerUrl).port),
      extraArgs: [...SINGLE_MEMBER_RAFT_ARGS],
    });
    cleanups.push(() => again.stop());
    return again;
  }

  /**
   * The source's history, backed up by our sidecar (left running, idle): before the full snapshot keys, a lease
   * with keys (the base's), history and a compaction; after it every kind of write and leases granted (1 h),
   * revoked, expiring (2 s, expired by the end) and, last, keys on an 8 s lease, still there at the head.
   * Resolves once the store's deltas reach the head.
   */
  async function leasedHistory(): Promise<LeasedHistory> {
    // Before the full snapshot: keys, a lease with keys (the base's), history, and a compaction.
    for (let i = 0; i < 20; i++) await client.put(`/base/k${i}`).value(`v${i}`);
    for (let i = 0; i < 5; i++) await client.put(`/base/k${i}`).value(`again ${i}`);
    await client.delete().key('/base/k19');
    const baseLease = client.lease(3600, { autoKeepAlive: false });
    const baseLeaseId = await baseLease.grant();
    for (let i = 0; i < 3; i++) await baseLease.put(`/base/leased-${i}`).value(`b${i}`);
    await client.kv.compact({ revision: String(await revision()), physical: true });
    for (let i = 0; i < 5; i++) await client.put(`/base/k${i}`).value(`after compaction ${i}`);

    sidecar = await startSidecar([
      `--endpoints=${env.etcd.clientUrl}`,
      ...localStoreFlags(join(dir, 'store'), join(dir, 'tmp')),
      '--schedule=0 0 1 1 *',
      '--delta-snapshot-period=1h',
      '--garbage-collection-period=1h',
    ]);
    const s = sidecar;
    await waitFor(async () => ((await store.list()).some((x) => x.kind === 'Full') ? true : undefined), 'the start-up full snapshot');
    const fullRevision = (await store.list()).find((x) => x.kind === 'Full')!.lastRevision;

    // After it: every kind of write, and leases granted, revoked and expiring.
    for (let i = 0; i < 10; i++) await client.put(`/after/k${i}`).value(`a${i}`);
    await client.put('/base/k5').value('overwritten after the full');
    await client.delete().key('/base/k6');
    for (let i = 0; i < 4; i++) await client.put(`/range/k${i}`).value(`r${i}`);
    await client.delete().prefix('/range/');
    const txn = await client
      .if('/after/k0', 'Create', '>', 0)
      .then(client.put('/txn/a').value('A'), client.put('/txn/b').value('B'), client.delete().key('/after/k1'))
      .commit();
    expect(txn.succeeded).toBe(true);
    const hour = client.lease(3600, { autoKeepAlive: false });
    const hourId = await hour.grant();
    for (let i = 0; i < 3; i++) await hour.put(`/hour/k${i}`).value(`h${i}`);
    // A base key moves to the hour lease; an hour key leaves its lease.
    await hour.put('/base/leased-0').value('moved to the hour lease');
    await client.put('/hour/k2').value('no lease any more');
    const revoked = client.lease(600, { autoKeepAlive: false });
    const revokedId = await revoked.grant();
    for (let i = 0; i < 2; i++) await revoked.put(`/revoked/k${i}`).value(`x${i}`);
    await revoked.revoke();
    const expiring = client.lease(2, { autoKeepAlive: false });
    const expiringId = await expiring.grant();
    for (let i = 0; i < 2; i++) await expiring.put(`/expiring/k${i}`).value(`e${i}`);
    // The middle: the expiring lease's keys are there (the point-in-time restore must create their lease).
    const middle = await revision();
    await deltaUpTo(s, middle);
    await waitFor(async () => ((await countUnder(client, '/expiring/')) === 0 ? true : undefined), 'the 2 s lease to expire in the source');
    for (let i = 0; i < 5; i++) await client.put(`/after/k${i}`).value(`late ${i}`);
    // Last: keys on an 8 s lease, still there at the head.
    const short = client.lease(8, { autoKeepAlive: false });
    const shortId = await short.grant();
    for (let i = 0; i < 2; i++) await short.put(`/short/k${i}`).value(`s${i}`);
    const head = await revision();
    await deltaUpTo(s, head);
    expect((await store.list()).filter((x) => x.kind === 'Incr').length).toBeGreaterThanOrEqual(2);
    expect(fullRevision).toBeLessThan(middle);

    return { fullRevision, middle, head, ids: { baseLeaseId, hourId, revokedId, expiringId, shortId } };
  }

  it('offline and online, at the head and in the middle; the 8 s lease expires in the restored member as in the source', async () => {
    const binaries = await etcdBinaries();

    const { middle, head, ids } = await leasedHistory();
    const { baseLeaseId, hourId, revokedId, expiringId, shortId } = ids;
    const source = { head: await hashKv(binaries, env.etcd.clientUrl, head), middle: await hashKv(binaries, env.etcd.clientUrl, middle) };
    expect(source.head.compactRevision).toBeGreaterThan(0);

    // Head, offline (the default): the source's hashkv, the leases with their TTLs, the short keys still there.
    // --restored-lease-ttl is no TTL of the source's: every lease below has a TTL its delta recorded or the base held.
    const offline = await restored('offline', ['--restored-lease-ttl=77s', `--to-revision=${head}`]);
    expect(await hashKv(binaries, offline.clientUrl, head)).toEqual(source.head);
    const c = etcdClient(offline.clientUrl);
    cleanups.push(async () => c.close());
    expect((await c.leaseTimeToLive(shortId, { keys: true })).grantedTtl).toBe(8);
    expect(await c.leaseTimeToLive(hourId, { keys: true })).toMatchObject({ grantedTtl: 3600, keys: 3 });
    expect(await c.leaseTimeToLive(baseLeaseId, { keys: true })).toMatchObject({ grantedTtl: 3600, keys: 2 });
    expect((await c.leaseTimeToLive(revokedId)).ttl).toBe(-1);
    expect((await c.leaseTimeToLive(expiringId)).ttl).toBe(-1);

    // Head, online: the same.
    const online = await restored('online', ['--delta-replay=online', '--restored-lease-ttl=77s', `--to-revision=${head}`]);
    expect(await hashKv(binaries, online.clientUrl, head)).toEqual(source.head);
    const o = etcdClient(online.clientUrl);
    cleanups.push(async () => o.close());
    expect(await o.leaseTimeToLive(shortId, { keys: true })).toMatchObject({ grantedTtl: 8, keys: 2 });
    expect(await o.leaseTimeToLive(hourId, { keys: true })).toMatchObject({ grantedTtl: 3600, keys: 3 });
    expect((await o.leaseTimeToLive(revokedId)).ttl).toBe(-1);

    // The middle, offline: the source's hashkv there; the expiring lease exists again (its keys name it).
    const atMiddle = await restored('middle', [`--to-revision=${middle}`]);
    const m = etcdClient(atMiddle.clientUrl);
    cleanups.push(async () => m.close());
    // First, within the lease's 2 s from the restored member's start: it expires there as it did in the source.
    // The hash at `middle` does not change when it does (the expiry's deletes come at later revisions).
    expect((await m.leaseTimeToLive(expiringId, { keys: true })).keys).toBe(2);
    expect(await hashKv(binaries, atMiddle.clientUrl, middle)).toEqual(source.middle);
    expect((await m.leaseTimeToLive(shortId)).ttl).toBe(-1);

    // The 8 s lease's time passes: its keys go, in the source and in each restored member; the hour's stay.
    for (const [what, url] of [
      ['the source', env.etcd.clientUrl],
      ['the offline restore', offline.clientUrl],
      ['the online restore', online.clientUrl],
    ] as const) {
      const e = etcdClient(url);
      try {
        await waitFor(
          async () => ((await e.leaseTimeToLive(shortId, { keys: true })).ttl === -1 ? true : undefined),
          `${what}: the 8 s lease to expire`,
          30_000,
        );
      } finally {
        e.close();
      }
    }
    for (const url of [offline.clientUrl, online.clientUrl]) {
      const e = new Etcd3({ hosts: url });
      cleanups.push(async () => e.close());
      expect(await countUnder(e, '/short/')).toBe(0);
      expect(await countUnder(e, '/hour/')).toBe(3);
    }
    expect(await countUnder(client, '/short/')).toBe(0);
  });

  it('compact, offline and through etcd: the compacted full restores to the source compacted at the head, leases included', async () => {
    const binaries = await etcdBinaries();
    const { head, ids } = await leasedHistory();
    const { baseLeaseId, hourId, revokedId, expiringId, shortId } = ids;
    // A copy of the chain for each way: each compaction adds its full to its own store, the base of its restore.
    const containers = { offline: join(dir, 'store-offline'), online: join(dir, 'store-online') };
    for (const c of Object.values(containers)) await cp(join(dir, 'store'), c, { recursive: true });
    // A compacted full holds the head's keys only: it restores to the source compacted at the head. etcd 3.5
    // answers `hashkv --rev=<a revision it compacted at>` with the hash it took while compacting (of the history
    // before the compaction) until it restarts: so the source restarts (on its ports) and hashes what it holds.
    await sidecar!.stop('SIGKILL');
    sidecar = undefined;
    await client.kv.compact({ revision: String(head), physical: true });
    const source = await restartedSource(binaries);
    const sourceHash = await hashKv(binaries, source.clientUrl, head);
    expect(sourceHash.compactRevision).toBe(head);

    const members: Array<[string, LocalEtcd]> = [];
    for (const [way, extra] of [
      ['offline', []],
      ['online', ['--delta-replay=online']],
    ] as const) {
      const container = containers[way];
      const r = await runCli(
        [
          'compact',
          '--storage-provider=Local',
          `--store-container=${container}`,
          `--data-dir=${join(dir, `${way}-compact.etcd`)}`,
          `--restoration-temp-snapshots-dir=${join(dir, `${way}-compact-tmp`)}`,
          // No TTL of the source's: every lease here has one its delta recorded or the base held.
          '--restored-lease-ttl=77s',
          ...extra,
        ],
        {},
        cleanups,
      );
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toMatch(new RegExp(`"path":"${way}".*"msg":"Compacted snapshot name`));
      expect(/Compacted snapshot name : (\S+)/.exec(r.stdout)?.[1]).toMatch(new RegExp(`^Full-00000000-${String(head).padStart(8, '0')}-`));

      // The compacted full alone (no delta after it) restores to the source's hashkv at the head.
      const member = await restored(`${way}-restored`, [], container);
      members.push([`the restore of the ${way} compaction`, member]);
      expect(await hashKv(binaries, member.clientUrl, head)).toEqual(sourceHash);
      const c = etcdClient(member.clientUrl);
      cleanups.push(async () => c.close());
      expect(await c.leaseTimeToLive(shortId, { keys: true })).toMatchObject({ grantedTtl: 8, keys: 2 });
      expect(await c.leaseTimeToLive(hourId, { keys: true })).toMatchObject({ grantedTtl: 3600, keys: 3 });
      expect(await c.leaseTimeToLive(baseLeaseId, { keys: true })).toMatchObject({ grantedTtl: 3600, keys: 2 });
      const hour = await c.leaseTimeToLive(hourId);
      expect(hour.ttl).toBeGreaterThan(3500);
      expect(hour.ttl).toBeLessThanOrEqual(3600);
      expect((await c.leaseTimeToLive(revokedId)).ttl).toBe(-1);
      expect((await c.leaseTimeToLive(expiringId)).ttl).toBe(-1);
      // etcdctl sees the same leases: the base's, the hour's and the 8 s one (IDs in hex), no other.
      expect(await leaseList(binaries, member.clientUrl)).toEqual([baseLeaseId, hourId, shortId].map(hexId).sort());
    }

    // The 8 s lease's time passes: its keys go in each restored member as in the source; the hour's stay.
    for (const [what, member] of [['the source', source] as const, ...members]) {
      const e = etcdClient(member.clientUrl);
      try {
        await waitFor(
          async () => ((await e.leaseTimeToLive(shortId, { keys: true })).ttl === -1 ? true : undefined),
          `${what}: the 8 s lease to expire`,
          30_000,
        );
      } finally {
        e.close();
      }
    }
    for (const [, member] of members) {
      const e = new Etcd3({ hosts: member.clientUrl });
      cleanups.push(async () => e.close());
      expect(await countUnder(e, '/short/')).toBe(0);
      expect(await countUnder(e, '/hour/')).toBe(3);
    }
  });
});

describe('compact --restored-lease-ttl (a chain the Go tool wrote: its deltas record no lease TTL)', () => {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it("the lease only the deltas name gets it; the full snapshot's lease keeps its own TTL", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-e2e-compact-lease-ttl-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const { root } = copyUpstreamStore('gzip', dir);
    const expected = JSON.parse(await readFile(join(UPSTREAM_V023, 'gzip', 'expected.json'), 'utf8')) as EtcdDump;
    const r = await runCli(
      [
        'compact',
        '--storage-provider=Local',
        `--store-container=${root}`,
        `--data-dir=${join(dir, 'compact.etcd')}`,
        `--restoration-temp-snapshots-dir=${join(dir, 'compact-tmp')}`,
        '--restored-lease-ttl=77s',
      ],
      {},
      cleanups,
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/"leases":\{"recorded":0,"defaulted":1,"base":1\}/);

    // Restored with the default --restored-lease-ttl (1h): the compacted full holds the leases already.
    const dataDir = join(dir, 'restored');
    const restore = await runCli(
      ['restore', '--storage-provider=Local', `--store-container=${root}`, ...restoreFlags(join(dir, 'restore-scratch'), dataDir)],
      {},
      cleanups,
    );
    expect(restore.code, restore.stderr).toBe(0);
    const etcd = await startLocalEtcd({
      binaries: await etcdBinaries(),
      dataDir,
      name: 'default',
      extraArgs: [...SINGLE_MEMBER_RAFT_ARGS],
    });
    cleanups.push(() => etcd.stop());
    expect(await dumpEtcd(etcd.clientUrl)).toEqual(expected);
    const c = etcdClient(etcd.clientUrl);
    cleanups.push(async () => c.close());
    const leaseIds = [...new Set(expected.kvs.map((kv) => kv.lease).filter((l) => l !== '0'))];
    const seen = await Promise.all(leaseIds.map((id) => c.leaseTimeToLive(id, { keys: true })));
    // The preload lease (7200 s) is in the base full; the other was granted after it, in a delta.
    expect(seen.map((l) => l.grantedTtl).sort((a, b) => a - b)).toEqual([77, 7200]);
    leaseIds.forEach((id, i) => expect(seen[i]!.keys).toBe(expected.kvs.filter((kv) => kv.lease === id).length));
  });
});
