/**
 * A restore that cannot write its files (a full disk, here /dev/full behind a symlink) says which file and
 * which flag chose its directory: Node's own write errors name neither ("ENOSPC: no space left on device,
 * write"), and the command line's hint ("free space on that file system") needs the path beside it.
 */
import { chmod, mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { silentLogger, type SnapStore } from '@etcdbrctl/snapstore';
import { describeFailure } from '../../src/cli/failure.js';
import { findEtcdBinaries, type EtcdBinaries } from '../../src/etcd/binaries.js';
import { fetchBase, restoreBase } from '../../src/restorer/base.js';
import { fetchDeltasInOrder } from '../../src/restorer/fetch.js';
import { planRestore } from '../../src/restorer/plan.js';
import { replayDeltas } from '../../src/restorer/replay.js';
import { backendPath, openScratch, WorkDirWriteError } from '../../src/restorer/work-dirs.js';
import { EtcdbrError } from '../../src/errors.js';
import { cleanupAfterEach } from '../support/cleanups.js';
import { copyUpstreamStore } from '../support/fixtures.js';
import { openLocalStore } from '../support/local-store.js';
import { restoreOptions } from '../support/restore.js';

const cleanups = cleanupAfterEach();

/** A copy of the v0.23 gzip store (a full and deltas, all compressed: every one is downloaded to a file). */
async function gzipStore(dir: string): Promise<SnapStore> {
  const { root } = copyUpstreamStore('gzip', dir);
  const store = await openLocalStore(root, join(dir, 'store-tmp'));
  cleanups.push(() => store.close());
  return store;
}

const member = (binaries: EtcdBinaries, dataDir: string) => ({
  binaries,
  dataDir,
  name: 'default',
  initialCluster: 'default=http://127.0.0.1:2380',
  initialClusterToken: 'etcd-cluster',
  initialAdvertisePeerUrls: ['http://127.0.0.1:2380'],
  skipHashCheck: false,
});

/** The error `p` rejects with, which must be a WorkDirWriteError. */
async function writeError(p: Promise<unknown>): Promise<WorkDirWriteError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(WorkDirWriteError);
  return err as WorkDirWriteError;
}

describe("a restore's failed writes name the file and the flag", () => {
  it('a delta fetched into a full temp dir: its file and --restoration-temp-snapshots-dir, and the hint', async () => {
    const dir = await cleanups.tempDir('etcdbr-workdir-delta-');
    const store = await gzipStore(dir);
    const plan = planRestore(await store.list());
    const first = plan.deltas[0]!;
    const tempDir = join(dir, 'scratch');
    await mkdir(tempDir);
    const file = join(tempDir, `delta-00000000-${first.snapName}`);
    await symlink('/dev/full', file);
    const err = await writeError(
      (async () => {
        for await (const _ of fetchDeltasInOrder(store, plan.deltas, { maxFetchers: 1, tempDir })) void _;
      })(),
    );
    expect(err.code).toBe('ENOSPC');
    expect(err.message).toBe(
      `cannot write delta snapshot ${first.snapName} to ${file} (--restoration-temp-snapshots-dir): ENOSPC: no space left on device, write`,
    );
    expect(describeFailure(err).line).toBe(`Error: ${err.message}; free space on that file system`);
  });

  it('the base full snapshot downloaded into a full temp dir: its file and the flag, not "the full is broken"', async () => {
    const dir = await cleanups.tempDir('etcdbr-workdir-base-');
    const store = await gzipStore(dir);
    const plan = planRestore(await store.list());
    const scratch = join(dir, 'scratch');
    await mkdir(scratch);
    await symlink('/dev/full', join(scratch, 'snapshot.db'));
    const err = await writeError(fetchBase(store, plan.base!, scratch, undefined));
    expect(err.code).toBe('ENOSPC');
    expect(err.message).toMatch(
      new RegExp(
        `^cannot write full snapshot ${plan.base!.snapName} to ${join(scratch, 'snapshot.db')} \\(--restoration-temp-snapshots-dir\\): ENOSPC`,
      ),
    );
  });

  it("etcd's restore tool finding the data dir's disk full: --data-dir, not the base snapshot's fault", async () => {
    const dir = await cleanups.tempDir('etcdbr-workdir-etcdutl-');
    const store = await gzipStore(dir);
    const plan = planRestore(await store.list());
    const scratch = join(dir, 'scratch');
    await mkdir(scratch);
    // An etcdutl that fails as etcd's does on a full disk.
    const tool = join(dir, 'etcdutl');
    await writeFile(tool, '#!/bin/sh\necho "Error: write $4/member/snap/db: no space left on device" >&2\nexit 1\n');
    await chmod(tool, 0o755);
    const binaries: EtcdBinaries = {
      etcd: join(dir, 'etcd'),
      etcdutl: tool,
      toolsBesideEtcd: { etcdctl: false, etcdutl: true },
      version: async () => '3.5.16',
    };
    const partDir = join(dir, 'data.part');
    const file = await fetchBase(store, plan.base!, scratch, undefined);
    const err = await writeError(restoreBase(plan.base!, member(binaries, partDir), file, scratch, undefined));
    expect(err.code).toBe('ENOSPC');
    expect(err.path).toBe(partDir);
    expect(err.message).toMatch(new RegExp(`^cannot write ${partDir} \\(--data-dir: .*\\): .*no space left on device`));
  });

  it('the offline replay writing the new backend on a full disk: the backend and --data-dir', async () => {
    const dir = await cleanups.tempDir('etcdbr-workdir-replay-');
    const store = await gzipStore(dir);
    const plan = planRestore(await store.list());
    const binaries = await findEtcdBinaries({ path: process.env['PATH'] ?? '' });
    const partDir = join(dir, 'data.part');
    const scratch = join(dir, 'scratch');
    await mkdir(scratch);
    await restoreBase(plan.base!, member(binaries, partDir), await fetchBase(store, plan.base!, scratch, undefined), scratch, undefined);
    // The replay writes the new backend beside the old one and renames it over it.
    await symlink('/dev/full', `${backendPath(partDir)}.offline-replay`);
    const opts = { ...restoreOptions(binaries, dir), dataDir: partDir, logger: silentLogger, callTimeoutMs: 60_000 };
    const err = await writeError(replayDeltas(store, plan, partDir, scratch, { ...opts, deltaReplay: 'auto' }));
    expect(err.code).toBe('ENOSPC');
    expect(err.message).toMatch(new RegExp(`^cannot write the restored backend to ${backendPath(partDir)} \\(--data-dir\\): ENOSPC`));
  });

  it('a temp dir that cannot be created: the path, the flag and what to do', async () => {
    const err = await openScratch('/dev/full/restoration.tmp').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EtcdbrError);
    expect((err as EtcdbrError).code).toBe('E_INVALID_INPUT');
    expect((err as Error).message).toMatch(
      /^--restoration-temp-snapshots-dir \/dev\/full\/restoration\.tmp: cannot create the restoration temp directory: .*ENOTDIR.*; give --restoration-temp-snapshots-dir a writable directory/,
    );
  });
});
