/**
 * Which etcd tools a restore uses, and that finding them spawns nothing: the version probe (`etcd --version`)
 * runs only when a tool found away from etcd on PATH makes the version matter. Stand-in executables record
 * every call, so the test sees exactly what was spawned.
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { restoreBaseSnapshot } from '../../src/restorer/base-restore.js';
import { atLeast35, findEtcdBinaries } from '../../src/etcd/binaries.js';

let root: string;
let calls: string;

/** An executable that appends "<name> <args>" to the call log; `etcd --version` prints `version`. */
function tool(dir: string, name: string, version = '3.4.23'): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, name);
  writeFileSync(
    file,
    `#!/bin/sh\necho "${name} $*" >> '${calls}'\n` + (name === 'etcd' ? `echo "etcd Version: ${version}"\necho "Git SHA: x"\n` : ''),
  );
  chmodSync(file, 0o755);
  return file;
}

function logged(): string[] {
  try {
    return readFileSync(calls, 'utf8').trim().split('\n').filter(Boolean);
  } catch {
    return [];
  }
}

async function restoreWith(etcdBin: string, path: string): Promise<string[]> {
  const binaries = await findEtcdBinaries({ etcdBin, path });
  await restoreBaseSnapshot({
    binaries,
    snapshotFile: join(root, 'snap.db'),
    dataDir: join(root, 'data'),
    name: 'default',
    initialCluster: 'default=http://localhost:2380',
    initialClusterToken: 'etcd-cluster',
    initialAdvertisePeerUrls: ['http://localhost:2380'],
    skipHashCheck: false,
  });
  return logged();
}

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'etcdbr-binaries-'));
  calls = join(root, 'calls.log');
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

describe('findEtcdBinaries', () => {
  it('finds the tools beside etcd without spawning anything, and asks for the version once, on demand', async () => {
    const bin = join(root, 'bin');
    const etcd = tool(bin, 'etcd', '3.5.17');
    tool(bin, 'etcdctl');
    tool(bin, 'etcdutl');
    const found = await findEtcdBinaries({ etcdBin: etcd, path: '' });
    expect(found).toMatchObject({ etcd, etcdctl: join(bin, 'etcdctl'), etcdutl: join(bin, 'etcdutl') });
    expect(found.toolsBesideEtcd).toEqual({ etcdctl: true, etcdutl: true });
    expect(logged()).toEqual([]);
    expect(await found.version()).toBe('3.5.17');
    expect(await found.version()).toBe('3.5.17');
    expect(logged()).toEqual(['etcd --version']);
  });

  it('rejects with a typed error naming ETCD_BIN when etcd is missing', async () => {
    await expect(findEtcdBinaries({ etcdBin: join(root, 'nope', 'etcd'), path: '' })).rejects.toMatchObject({
      code: 'E_INVALID_INPUT',
      message: expect.stringContaining(join(root, 'nope', 'etcd')) as string,
    });
  });

  it('says which versions have etcdutl-era behaviour', () => {
    expect([atLeast35('3.4.23'), atLeast35('3.5.0'), atLeast35('3.6.1'), atLeast35('4.0.0')]).toEqual([false, true, true, true]);
  });
});

describe('restoreBaseSnapshot picks the restoring tool', () => {
  it('uses etcdctl beside etcd 3.4 without asking etcd for its version', async () => {
    const bin = join(root, 'bin');
    const etcd = tool(bin, 'etcd', '3.4.23');
    tool(bin, 'etcdctl');
    expect(await restoreWith(etcd, '')).toEqual([expect.stringMatching(/^etcdctl snapshot restore /) as string]);
  });

  it('uses etcdutl beside etcd (3.5+) over etcdctl, without a version probe', async () => {
    const bin = join(root, 'bin');
    const etcd = tool(bin, 'etcd', '3.6.1');
    tool(bin, 'etcdctl');
    tool(bin, 'etcdutl');
    expect(await restoreWith(etcd, '')).toEqual([expect.stringMatching(/^etcdutl snapshot restore /) as string]);
  });

  it('asks the version when only an etcdutl elsewhere on PATH could restore: skips it for an etcd 3.4', async () => {
    const etcd = tool(join(root, 'etcd-home'), 'etcd', '3.4.23');
    tool(join(root, 'other'), 'etcdutl');
    tool(join(root, 'other'), 'etcdctl');
    const log = await restoreWith(etcd, join(root, 'other'));
    expect(log).toEqual(['etcd --version', expect.stringMatching(/^etcdctl snapshot restore /) as string]);
  });

  it('uses the PATH etcdutl for an etcd 3.5 that has no tools beside it', async () => {
    const etcd = tool(join(root, 'etcd-home'), 'etcd', '3.5.17');
    tool(join(root, 'other'), 'etcdutl');
    tool(join(root, 'other'), 'etcdctl');
    const log = await restoreWith(etcd, join(root, 'other'));
    expect(log).toEqual(['etcd --version', expect.stringMatching(/^etcdutl snapshot restore /) as string]);
  });
});
