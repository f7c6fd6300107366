import { execFile } from 'node:child_process';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { planRestore } from '../../src/restorer/plan.js';
import { executeRestore, type DeltaReplayMode } from '../../src/restorer/restore.js';
import type { LeaseTimeToLive } from '../../src/etcd/index.js';
import { etcdClient } from '../support/etcd-client.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcd35Binaries, etcdBinaries } from '../support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../support/etcd-dump.js';
import { openLocalStore } from '../support/local-store.js';
import { restoreOptions } from '../support/restore.js';
import { UPSTREAM_V023, UPSTREAM_V043, copyUpstreamStore } from '../support/fixtures.js';
import { main } from '../../src/cli/main.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import type { VerifyReport } from '../../src/verifier/verify.js';

const execFileAsync = promisify(execFile);
const COMPAT = UPSTREAM_V023;
const casesOf = (set: string) =>
  readdirSync(set, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name);

/** The source's `hashkv` at the end of each v0.43 case, from the table in its README. */
function sourceHashKv(name: string): number | undefined {
  const readme = readFileSync(join(UPSTREAM_V043, 'README.md'), 'utf8');
  const row = new RegExp(`^\\| \`${name}\` \\|.*\\| (\\d+) \\|$`, 'm').exec(readme);
  return row ? Number(row[1]) : undefined;
}

async function hashKv(binaries: EtcdBinaries, endpoint: string): Promise<number> {
  const { stdout } = await execFileAsync(binaries.etcdctl!, [`--endpoints=${endpoint}`, 'endpoint', 'hashkv', '-w', 'json'], {
    env: { ...process.env, ETCDCTL_API: '3' },
  });
  return (JSON.parse(stdout) as Array<{ HashKV: { hash: number } }>)[0]!.HashKV.hash;
}

/** A TTL no lease of the fixtures has (theirs are 600 s and 3,600 s): the leases a restore creates get it. */
const DEFAULT_TTL = 1234;

/**
 * Restores `<set>/<name>/snapstore` with `binaries` (offline, or `online`) and expects etcd started on the result
 * to serve expected.json, leases included: every key keeps its lease, and every lease a key names exists with
 * the keys attached, with the base's TTL or (a Go-written chain records none) the restore's default. With
 * `hash`, `etcdctl endpoint hashkv` must give it (the source's).
 */
async function restoresToExpected(
  set: string,
  name: string,
  binaries: EtcdBinaries,
  opts: { hash?: number | undefined; deltaReplay?: DeltaReplayMode; baseTtls: readonly number[]; createsLeases?: boolean },
): Promise<void> {
  const expected = JSON.parse(readFileSync(join(set, name, 'expected.json'), 'utf8')) as EtcdDump;
  const dir = await mkdtemp(join(tmpdir(), `etcdbr-compat-${name}-`));
  try {
    const store = await openLocalStore(join(set, name, 'snapstore'), dir);
    const plan = planRestore(await store.list());
    const dataDir = join(dir, 'data');
    const result = await executeRestore(
      store,
      plan,
      restoreOptions(binaries, dir, { dataDir, restoredLeaseTtlSeconds: DEFAULT_TTL, deltaReplay: opts.deltaReplay ?? 'auto' }),
    );
    expect(result.restored).toBe(true);
    expect(result.revision).toBe(expected.revision);
    const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
    let got: EtcdDump;
    const leases = new Map<string, LeaseTimeToLive>();
    try {
      got = await dumpEtcd(etcd.clientUrl);
      if (opts.hash !== undefined) expect(await hashKv(binaries, etcd.clientUrl), 'hashkv of the source').toBe(opts.hash);
      const client = etcdClient(etcd.clientUrl);
      try {
        for (const kv of got.kvs) {
          if (kv.lease !== '0' && !leases.has(kv.lease)) leases.set(kv.lease, await client.leaseTimeToLive(kv.lease, { keys: true }));
        }
      } finally {
        client.close();
      }
    } finally {
      await etcd.stop();
    }
    expect(got.revision).toBe(expected.revision);
    // A full that the Go `compact` wrote went through etcd, which drops the leases of keys a delta carried:
    // those keys have none to keep. (v0.43's gzip and final-gzip expected.json hold lease IDs rounded through a
    // double: compared as doubles; hashkv, which covers the IDs' bytes, compares them exactly.)
    const lease = (id: string) => (name.startsWith('compacted-') ? '-' : String(Number(id)));
    const comparable = (kvs: EtcdDump['kvs']) => kvs.map((kv) => ({ ...kv, lease: lease(kv.lease) }));
    expect(comparable(got.kvs)).toEqual(comparable(expected.kvs));
    const named = new Map<string, number>();
    for (const kv of got.kvs) if (kv.lease !== '0') named.set(kv.lease, (named.get(kv.lease) ?? 0) + 1);
    for (const [id, l] of leases) {
      expect(l.ttl, `lease ${id} exists`).toBeGreaterThan(0);
      expect([DEFAULT_TTL, ...opts.baseTtls], `lease ${id}: the base's TTL or the default`).toContain(l.grantedTtl);
      expect(l.keys, `lease ${id}: its keys are attached`).toBe(named.get(id));
    }
    // The deltas name leases the base does not have: those get the default.
    if (opts.createsLeases) expect([...leases.values()].filter((l) => l.grantedTtl === DEFAULT_TTL).length).toBeGreaterThan(0);
    await store.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('restore of the upstream v0.23 stores reproduces expected.json', () => {
  const cases = casesOf(COMPAT);
  it('has cases', () => expect(cases.length).toBeGreaterThanOrEqual(7));

  // Its leases have TTLs of 3,600 and 7,200 s.
  it.each(cases)('%s', async (name) => restoresToExpected(COMPAT, name, await etcdBinaries(), { baseTtls: [3600, 7200] }));
});

// What etcd-druid v0.37 runs: the sidecar v0.43 beside etcd 3.5. Restored and served by etcd 3.5.
describe('restore of the upstream v0.43 stores reproduces expected.json on etcd 3.5', () => {
  const cases = casesOf(UPSTREAM_V043);
  it('has every codec, a final full and a compacted chain', () =>
    expect(cases.sort()).toEqual(['compacted-gzip', 'final-gzip', 'gzip', 'lzw', 'none', 'zlib']));

  it.each(cases)('%s', async (name) => {
    // A compacted history hashes differently by design (README.md); the others to the source's hashkv. Every
    // case but final-gzip (restored from its final full alone) has leases granted after its full.
    const hash = name === 'compacted-gzip' ? undefined : sourceHashKv(name);
    if (name !== 'compacted-gzip') expect(hash, `the README's hashkv of ${name}`).toBeGreaterThan(0);
    await restoresToExpected(UPSTREAM_V043, name, await etcd35Binaries(), {
      hash,
      baseTtls: [600, 3600],
      createsLeases: hash !== undefined && name !== 'final-gzip',
    });
  });

  // (final-gzip restores from its final full alone: nothing to replay.)
  it.each(['gzip', 'none'])('%s, replayed online: the same, to the source hashkv', async (name) =>
    restoresToExpected(UPSTREAM_V043, name, await etcd35Binaries(), {
      hash: sourceHashKv(name),
      deltaReplay: 'online',
      baseTtls: [600, 3600],
    }),
  );
});

describe('a corrupt newest full snapshot (two-fulls-gzip, one bit flipped in its database)', () => {
  const BROKEN = 'Full-00000000-00000297-1795219513.gz';
  const OLDER = 'Full-00000000-00000249-1795219501.gz';

  async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    let stdout = '';
    let stderr = '';
    const io = { stdout: { write: (s: string) => (stdout += s) }, stderr: { write: (s: string) => (stderr += s) } };
    // The environment is the process's: restore finds etcd's tools on PATH.
    const code = await main(args, { PATH: process.env.PATH ?? '' }, io, { homeDir: tmpdir() });
    return { code, stdout, stderr };
  }

  it('verify and restore name the older chain that goes around it, and restore --base-snapshot reaches the newest revision', async () => {
    const name = 'two-fulls-gzip';
    const expected = JSON.parse(readFileSync(join(COMPAT, name, 'expected.json'), 'utf8')) as EtcdDump;
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-compat-around-'));
    try {
      const { root, v2 } = copyUpstreamStore(name, dir);
      const db = gunzipSync(readFileSync(join(v2, BROKEN)));
      db[5000] = db[5000]! ^ 1;
      writeFileSync(join(v2, BROKEN), gzipSync(db));
      const store = ['--storage-provider=Local', `--store-container=${root}`];

      const verified = await cli(['verify', ...store]);
      expect(verified.code).toBe(3);
      expect(verified.stdout).toContain(
        `without the broken full, the older chain from ${OLDER} restores to revision 327: etcdbrctl restore --base-snapshot=${OLDER}`,
      );
      const json = await cli(['verify', ...store, '-o', 'json']);
      expect((JSON.parse(json.stdout) as VerifyReport).wayAround).toMatchObject({ base: OLDER, ok: true, restorableRevision: 327 });

      const dataDir = join(dir, 'data');
      const failed = await cli(['restore', ...store, `--data-dir=${dataDir}`]);
      expect(failed.code).toBe(1);
      expect(failed.stderr).toContain(`restoring full snapshot ${BROKEN} failed`);
      expect(failed.stderr).toContain(
        `without it, the older chain from ${OLDER} reaches revision 327 (4 delta snapshots, by their names): restore it with --base-snapshot=${OLDER}`,
      );

      const restored = await cli(['restore', ...store, `--data-dir=${dataDir}`, `--base-snapshot=${OLDER}`]);
      expect(restored.code).toBe(0);
      const binaries = await etcdBinaries();
      const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
      let got: EtcdDump;
      try {
        got = await dumpEtcd(etcd.clientUrl);
      } finally {
        await etcd.stop();
      }
      expect(got.revision).toBe(expected.revision);
      // Keys leased inside a replayed delta come back without their lease (as upstream's replay does).
      const strip = (kvs: EtcdDump['kvs']) => kvs.map(({ lease: _lease, ...rest }) => rest);
      expect(strip(got.kvs)).toEqual(strip(expected.kvs));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('--base-snapshot that is not a full snapshot of the store is refused naming the fulls there are', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'etcdbr-compat-base-'));
    try {
      const { root } = copyUpstreamStore('two-fulls-gzip', dir);
      const r = await cli(['restore', '--dry-run', '--storage-provider=Local', `--store-container=${root}`, '--base-snapshot=Full-nope']);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`--base-snapshot: no snapshot named Full-nope in the store; the full snapshots are: ${OLDER}, ${BROKEN}`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
