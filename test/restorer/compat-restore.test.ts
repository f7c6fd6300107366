import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { planRestore } from '../../src/restorer/plan.js';
import { executeRestore } from '../../src/restorer/restore.js';
import { startLocalEtcd } from '../../src/etcd/local-etcd.js';
import { SINGLE_MEMBER_RAFT_ARGS, etcd35Binaries, etcdBinaries } from '../support/etcd.js';
import { dumpEtcd, type EtcdDump } from '../support/etcd-dump.js';
import { openLocalStore } from '../support/local-store.js';
import { restoreOptions } from '../support/restore.js';
import { UPSTREAM_V023, UPSTREAM_V043, copyUpstreamStore } from '../support/fixtures.js';
import { main } from '../../src/cli/main.js';
import type { EtcdBinaries } from '../../src/etcd/binaries.js';
import type { VerifyReport } from '../../src/verifier/verify.js';

const COMPAT = UPSTREAM_V023;
const casesOf = (set: string) =>
  readdirSync(set, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name);

/** Restores `<set>/<name>/snapstore` with `binaries` and expects etcd started on the result to serve expected.json. */
async function restoresToExpected(set: string, name: string, binaries: EtcdBinaries): Promise<void> {
  const expected = JSON.parse(readFileSync(join(set, name, 'expected.json'), 'utf8')) as EtcdDump;
  const dir = await mkdtemp(join(tmpdir(), `etcdbr-compat-${name}-`));
  try {
    const store = await openLocalStore(join(set, name, 'snapstore'), dir);
    const plan = planRestore(await store.list());
    const dataDir = join(dir, 'data');
    const result = await executeRestore(store, plan, restoreOptions(binaries, dir, { dataDir }));
    expect(result.restored).toBe(true);
    expect(result.revision).toBe(expected.revision);
    const etcd = await startLocalEtcd({ binaries, dataDir, name: 'default', extraArgs: [...SINGLE_MEMBER_RAFT_ARGS] });
    let got: EtcdDump;
    try {
      got = await dumpEtcd(etcd.clientUrl);
    } finally {
      await etcd.stop();
    }
    expect(got.revision).toBe(expected.revision);
    // Leases aside, as upstream: keys written with a lease inside a delta come back without it.
    const strip = (kvs: EtcdDump['kvs']) => kvs.map(({ lease: _lease, ...rest }) => rest);
    expect(strip(got.kvs)).toEqual(strip(expected.kvs));
    await store.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('restore of the upstream v0.23 stores reproduces expected.json', () => {
  const cases = casesOf(COMPAT);
  it('has cases', () => expect(cases.length).toBeGreaterThanOrEqual(7));

  it.each(cases)('%s', async (name) => restoresToExpected(COMPAT, name, await etcdBinaries()));
});

// What etcd-druid v0.37 runs: the sidecar v0.43 beside etcd 3.5. Restored and served by etcd 3.5.
describe('restore of the upstream v0.43 stores reproduces expected.json on etcd 3.5', () => {
  const cases = casesOf(UPSTREAM_V043);
  it('has every codec, a final full and a compacted chain', () =>
    expect(cases.sort()).toEqual(['compacted-gzip', 'final-gzip', 'gzip', 'lzw', 'none', 'zlib']));

  it.each(cases)('%s', async (name) => restoresToExpected(UPSTREAM_V043, name, await etcd35Binaries()));
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
